"""The rehearsal's fixed values: constants, not recipe settings.

Each has one legal or one sensible value, or one that no documented experiment changes; each cites
its source. ``SAVED_AS`` names the key (SkyRL's, where SkyRL has the concept) each is written under in
a run's saved config and hashed into its fingerprint (``RehearsalConfig.to_dict``), so a saved config
reads like a recipe and the fidelity table compares it with the cluster recipe's. The code reads them
as ``constants.NAME`` at the point of use, so a test may patch one
(``monkeypatch.setattr(constants, NAME, ...)``) and the fingerprint follows.
How each value was chosen: docs/rehearsal.md, "Every recipe default".
"""

from __future__ import annotations

from typing import Any

# trainer.algorithm: what the learner implements (workload/local/grpo.py, grpo_trainer.py)
ADVANTAGE_ESTIMATOR = "grpo"  # the only estimator the learner implements
# the only reduction that keeps merged identical turns exact (docs/rehearsal.md, the fidelity table)
LOSS_REDUCTION = "token_mean"
GRPO_NORM_BY_STD = True  # SkyRL's default trainer.algorithm.grpo_norm_by_std, and the published run's
# SkyRL's default PPO clip; with one optimizer step per GRPO step (policy_mini_batch_size = train_batch_size)
# the ratio is 1 and the clip never acts (docs/rehearsal.md, fidelity table)
EPS_CLIP_LOW = 0.2
EPS_CLIP_HIGH = 0.2
KL_LOSS_COEF = 0.001  # SkyRL's default trainer.algorithm.kl_loss_coef; read only with use_kl_loss=true
# One pass over each step's rollouts: on-policy, so the old log-probabilities are the current ones and
# the learner skips that forward (workload/local/grpo_trainer.py)
UPDATE_EPOCHS_PER_BATCH = 1

# trainer.policy.optimizer_config: the feasibility runs' AdamW, not compared since (docs/rehearsal.md)
WEIGHT_DECAY = 0.0
MAX_GRAD_NORM = 1.0
NUM_WARMUP_STEPS = 5  # GRPO steps of linear warm-up before the schedule (scheduler stays a setting)
MIN_LR_RATIO = 0.1  # cosine_with_min_lr ends at lr x this

# trainer.policy.model.lora: the feasibility runs' adapter, not compared since (docs/rehearsal.md)
LORA_DROPOUT = 0.0
LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # attention + MLP

# The run's plumbing
EVAL_BEFORE_TRAIN = True  # the report's baseline is the step-0 evaluation (workload/local/report.py needs it)
NUM_THREADS = 1  # torch threads of the learner and evaluator: on shared cores two threads stall (docs/results.md)
MAX_CKPTS_TO_KEEP = 2  # resumable checkpoints kept: resuming reads only the newest (disk)

# generator: the compact action format and greedy evaluation
MAX_GENERATE_LENGTH = 2  # one action token + <|im_end|> (workload/model/tiny.py makes each action one token)
EVAL_TEMPERATURE = 0.0  # greedy evaluation, the published run's eval_sampling_params

# environment
ENV_CLASS = "maze"  # the only environment (workload/maze)
# 7 cells x 8 px = 56 px frames, padded with wall gray to 64 px: each 16 px patch covers 2x2 cells, 4 image
# tokens a frame (docs/rehearsal.md, Settings)
CELL_PX = 8

# sft: the feasibility runs' SFT (docs/rehearsal.md) and the stopping rule's schedule, fixed with the claim
SFT_WARMUP_STEPS = 30
SFT_MAX_GRAD_NORM = 1.0
SFT_PATH_FRACTION = 0.5  # share of samples on the BFS path; the rest start on random floor cells (recovery)
SFT_CHECK_EVERY = 5  # SFT steps between validation checks (one batched forward each)
SFT_MAX_STEPS = 600  # SFT step cap, a bound the stopping rule reaches first

# The key each constant is saved under -> the constant's name.
SAVED_AS: dict[str, str] = {
    "trainer.update_epochs_per_batch": "UPDATE_EPOCHS_PER_BATCH",
    "trainer.eval_before_train": "EVAL_BEFORE_TRAIN",
    "trainer.max_ckpts_to_keep": "MAX_CKPTS_TO_KEEP",
    "trainer.num_threads": "NUM_THREADS",
    "trainer.algorithm.advantage_estimator": "ADVANTAGE_ESTIMATOR",
    "trainer.algorithm.loss_reduction": "LOSS_REDUCTION",
    "trainer.algorithm.grpo_norm_by_std": "GRPO_NORM_BY_STD",
    "trainer.algorithm.eps_clip_low": "EPS_CLIP_LOW",
    "trainer.algorithm.eps_clip_high": "EPS_CLIP_HIGH",
    "trainer.algorithm.kl_loss_coef": "KL_LOSS_COEF",
    "trainer.policy.optimizer_config.weight_decay": "WEIGHT_DECAY",
    "trainer.policy.optimizer_config.max_grad_norm": "MAX_GRAD_NORM",
    "trainer.policy.optimizer_config.num_warmup_steps": "NUM_WARMUP_STEPS",
    "trainer.policy.optimizer_config.min_lr_ratio": "MIN_LR_RATIO",
    "trainer.policy.model.lora.dropout": "LORA_DROPOUT",
    "trainer.policy.model.lora.target_modules": "LORA_TARGET_MODULES",
    "generator.sampling_params.max_generate_length": "MAX_GENERATE_LENGTH",
    "generator.eval_sampling_params.temperature": "EVAL_TEMPERATURE",
    "generator.eval_sampling_params.max_generate_length": "MAX_GENERATE_LENGTH",
    "environment.env_class": "ENV_CLASS",
    "environment.maze.cell_px": "CELL_PX",
    "sft.warmup_steps": "SFT_WARMUP_STEPS",
    "sft.max_grad_norm": "SFT_MAX_GRAD_NORM",
    "sft.path_fraction": "SFT_PATH_FRACTION",
    "sft.check_every": "SFT_CHECK_EVERY",
    "sft.max_steps": "SFT_MAX_STEPS",
}


# Saved keys whose value follows a setting -> that setting. The served step is chosen on validation among the
# steps both evaluated and exported, so every evaluation exports (workload/local/grpo_trainer.py).
FOLLOWS: dict[str, str] = {"trainer.hf_save_interval": "trainer.eval_interval"}


def fixed_values() -> dict[str, Any]:
    """``{saved key: value}`` of every constant, as saved configs hold it (tuples as lists)."""
    values = globals()
    return {key: list(values[name]) if isinstance(values[name], tuple) else values[name]
            for key, name in SAVED_AS.items()}
