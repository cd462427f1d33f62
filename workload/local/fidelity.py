"""Where the rehearsal recipe (``local``) differs from the cluster recipe (``blog``), and why.

A diff of the two recipe files as each run runs them: the rehearsal's settings with its constants
under SkyRL's keys, and the cluster recipe's SkyRL keys over SkyRL 0.4.0's defaults (recorded in
workload/skyrl/skyrl_0.4.0_keys.txt), so a default the cluster inherits is compared too. Every
shared key either has the same value in both, or has its reason below; ``undocumented`` lists the shared keys that differ without one, and a
test keeps that list empty (and every reason here attached to a key that really differs), so a
change to either recipe that breaks the correspondence fails until it is explained.
``BEHAVIOUR`` lists the differences that are not one key (the reward, an average, the model and task).
docs/rehearsal.md prints both tables (``markdown``).
"""

from __future__ import annotations

from typing import Any

CLUSTER_RECIPE = "blog"
LOCAL_RECIPE = "local"

# Shared keys whose values differ, with the reason the rehearsal keeps its own value.
REASONS: dict[str, str] = {
    "generator.inference_engine.num_engines": "6 vLLM engines on 6 GPUs there; 2 Ray rollout actors on 2 CPU cores here.",
    "generator.sampling_params.max_generate_length": "The cluster model writes free text around its action; the "
    "tiny model's action is one added token plus the end-of-turn token.",
    "generator.sampling_params.temperature": "Kept at 1.0 from the feasibility runs (0.7 was never measured here); "
    "sampled rollouts at 1.0 escape the greedy policy's loops.",
    "trainer.algorithm.loss_reduction": "token_mean_legacy averages per micro-batch of 4 sequences (whole "
    "trajectories); the rehearsal trains on turns, merged when identical, and only token_mean over the mini-batch "
    "keeps that merge exact (the merged-vs-unmerged gradient test).",
    "trainer.hf_save_interval": "The rehearsal exports at every evaluation (trainer.eval_interval; not a setting "
    "here), so the step chosen on validation can be served; the cluster's SkyRL key stays 20.",
    "trainer.policy.model.lora.rank": "Rank 16 on a 128-wide model is already an eighth of the width; 32 on "
    "Qwen3-VL-8B is under 1 %.",
    "trainer.policy.optimizer_config.lr": "3e-5 is SkyRL's rate for an 8B model's LoRA; the tiny model from a "
    "0.1-std init needs a larger one. 7e-4 was chosen in earlier runs on held-out scores of rehearsal-7x7-64 "
    "(2e-3 collapsed greedy solves), not on validation; none of that set's maps is in today's held-out set.",
    "trainer.train_batch_size": "30 mazes a step do not fit a 2-core budget; 8 mazes x 8 rollouts x 40 steps.",
    "trainer.policy_mini_batch_size": "One optimizer step per GRPO step here (8/8), two there (30/15): with one, "
    "the PPO ratio is 1 and the clip never acts, so the update is REINFORCE with group-normalised advantages.",
    "trainer.run_name": "The cluster names its run; a rehearsal is named by its settings' fingerprint.",
    "generator.eval_sampling_params.max_generate_length": "Evaluation replies are the same two tokens as rollouts "
    "here; the cluster's evaluation allows SkyRL's 1024.",
    "trainer.max_training_steps": "The rehearsal counts GRPO steps; the cluster's run length is trainer.epochs x "
    "steps per epoch (160), with SkyRL's max_training_steps unset.",
    "trainer.policy.model.lora.target_modules": "The same layers: PEFT's all-linear less the output layer and the "
    "vision tower (exclude_modules .*visual.*) is the language model's q/k/v/o and gate/up/down projections, which "
    "the rehearsal lists by name (the vision tower's are qkv, proj and linear_fc1/2).",
    "trainer.policy.optimizer_config.scheduler": "Warm-up then cosine to 0.1 x lr here; the cluster runs SkyRL's "
    "default, constant_with_warmup.",
    "trainer.policy.optimizer_config.num_warmup_steps": "5 GRPO steps of warm-up here (NUM_WARMUP_STEPS); none on "
    "the cluster (SkyRL's default 0).",
    "trainer.policy.optimizer_config.weight_decay": "0 on the rehearsal's LoRA (WEIGHT_DECAY, from the feasibility "
    "runs); the cluster runs SkyRL's default 1e-2.",
    "trainer.seed": "The rehearsal reports seeds 0, 1 and 2; the cluster recipe keeps SkyRL's default seed 42.",
}

# Differences that are not one shared key.
BEHAVIOUR: dict[str, str] = {
    "reward": "Strict success (1 for a stop on the goal, else 0). The cluster's env_sft pays 0.8 x task + 0.2 x the "
    "share of turns whose reply carries non-empty <observation>, <justification> and <action> tags (format_bonus 0.2); "
    "the tiny model's reply is one action token and the end-of-turn token, which never carries those tags, so the "
    "bonus would be a constant 0 for it.",
    "weight averaging": "Evaluated, exported and served weights are a running average (rehearsal.ema_decay "
    "0.9); SkyRL has none.",
    "LoRA scale": "The update is scaled by alpha / rank: 32 / 16 = 2 here, 32 / 32 = 1 on the cluster, so the same "
    "alpha is not the same step size.",
    "SFT labels": "The rehearsal's start is SFT in the same run on the solver's action for every state it samples, "
    "half of them random floor cells off the solver's path (recovery states); the VisGym checkpoint was trained on "
    "solver trajectories (the path from the start, filtered to reward 1). A start taught recovery labels leaves "
    "RL less to add: docs/study.md measures GRPO from a path-only start.",
    "model and task": "A 0.7 M-parameter Qwen3-VL from random init on 7x7 mazes with 64 px frames and the latest "
    "frame only, SFT-started in the same run; the cluster fine-tunes Qwen3-VL-8B from the VisGym SFT checkpoint "
    "on 9x9 mazes.",
}


def shared(local: dict[str, Any], cluster: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{key: (local value, cluster value)}`` for every key both recipes set."""
    return {key: (local[key], cluster[key]) for key in sorted(set(local) & set(cluster))}


def differing(local: dict[str, Any], cluster: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {key: pair for key, pair in shared(local, cluster).items() if pair[0] != pair[1]}


def undocumented(local: dict[str, Any], cluster: dict[str, Any]) -> list[str]:
    """Shared keys whose values differ with no reason in ``REASONS``."""
    return [key for key in differing(local, cluster) if key not in REASONS]


def recipes() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped ``local`` recipe flattened (with the constants it fixes, under their SkyRL keys) and the
    ``blog`` recipe's SkyRL keys over SkyRL's defaults."""
    from workload import config
    from workload.local.config import load_config
    from workload.skyrl.known_keys import load_known_keys
    from workload.skyrl.recipe import load_recipe

    cluster = {**load_known_keys().defaults, **load_recipe(CLUSTER_RECIPE).skyrl}
    return config.flatten(load_config(LOCAL_RECIPE).to_dict()), cluster


def markdown() -> str:
    """The two tables docs/rehearsal.md carries: differing shared keys, then behaviour."""
    local, cluster = recipes()
    lines = [f"| key | rehearsal (`{LOCAL_RECIPE}`) | cluster (`{CLUSTER_RECIPE}` over SkyRL's defaults) | why |",
             "|---|---|---|---|"]
    for key, (mine, theirs) in differing(local, cluster).items():
        lines.append(f"| `{key}` | `{mine}` | `{theirs}` | {REASONS.get(key, '(no reason given)')} |")
    same = [key for key, (mine, theirs) in shared(local, cluster).items() if mine == theirs]
    lines += ["", "Same value in both: " + ", ".join(f"`{key}`" for key in same) + ".", ""]
    lines += ["| difference | why |", "|---|---|"]
    lines += [f"| {name} | {reason} |" for name, reason in BEHAVIOUR.items()]
    return "\n".join(lines)
