"""What a recipe will do on the cluster: GPUs, steps, rollouts, saves, and FSx space over the run.

Sizes follow SkyRL 0.4.0's FSDP checkpoint format: every full checkpoint stores the policy's
``state_dict`` including the frozen base weights in fp32 (plus the LoRA optimizer state), so a
LoRA run of an 8B model writes ~35 GB per checkpoint; an ``hf_save_interval`` export holds
only the LoRA tensors (fp32) and small config/tokenizer files.
"""

from __future__ import annotations

from dataclasses import dataclass

from workload.skyrl import schedule

GB = 1e9
GIB = 2**30
FP32_BYTES = 4
BF16_BYTES = 2
ADAM_STATES = 2  # exp_avg and exp_avg_sq, fp32, for the trainable (LoRA) parameters only
EXPORT_EXTRA_BYTES = 20e6  # config, tokenizer and processor files beside an exported adapter


@dataclass(frozen=True)
class ModelDims:
    """Language-model shapes of the base model (its HF config.json) and its vision tower's size."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    vision_params: int

    def text_params(self) -> int:
        attention = self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        mlp = 3 * self.hidden * self.intermediate
        return self.layers * (attention + mlp) + 2 * self.vocab * self.hidden  # untied embeddings + lm_head

    def total_params(self) -> int:
        return self.text_params() + self.vision_params

    def lora_params(self, rank: int) -> int:
        """LoRA A+B parameters on every language-model linear layer ("all-linear", vision excluded)."""
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        shapes = [(self.hidden, q_out), (self.hidden, kv_out), (self.hidden, kv_out), (q_out, self.hidden),
                  (self.hidden, self.intermediate), (self.hidden, self.intermediate), (self.intermediate, self.hidden)]
        return self.layers * rank * sum(i + o for i, o in shapes)


# Qwen/Qwen3-VL-8B-Instruct config.json (text_config); the vision tower (27 blocks of width 1152
# plus the deepstack mergers) is ~0.58 B parameters, for 8.77 B in all.
QWEN3_VL_8B = ModelDims(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, head_dim=128,
                        vocab=151936, vision_params=580_000_000)


@dataclass(frozen=True)
class Plan:
    """Everything ``skymaze plan`` prints."""

    policy_gpus: int
    engines: int
    train_rows: int
    steps_per_epoch: int
    epochs: int
    total_steps: int
    trajectories_per_step: int
    max_turns: int
    eval_steps: list[int]
    eval_episodes: int
    ckpt_steps: list[int]
    ckpt_interval: int
    export_steps: list[int]
    ckpt_bytes: float
    export_bytes: float
    model_bytes: float
    kept_ckpts: int
    fsx_bytes: float

    @property
    def train_episodes(self) -> int:
        return self.total_steps * self.trajectories_per_step

    @property
    def peak_bytes(self) -> float:
        """FSx use at the end of the run (nothing is deleted but pruned checkpoints)."""
        return (
            self.model_bytes
            + self.kept_ckpts * self.ckpt_bytes
            + len(self.export_steps) * self.export_bytes
            + self.export_bytes
        )


def build_plan(
    values: dict, *, train_rows: int, fsx_gib: int, dims: ModelDims = QWEN3_VL_8B, eval_set_size: int = 64
) -> Plan:
    """Plan a run from resolved SkyRL overrides (``Recipe.resolved()``) and its training-set size."""
    batch, epochs = int(values["trainer.train_batch_size"]), int(values["trainer.epochs"])
    per_epoch = schedule.steps_per_epoch(train_rows=train_rows, train_batch_size=batch)
    total = per_epoch * epochs
    if values.get("trainer.max_training_steps") is not None:  # skyrl/train/trainer.py 0.4.0 caps the run there
        total = min(total, int(values["trainer.max_training_steps"]))
    rank = int(values.get("trainer.policy.model.lora.rank", 0))
    lora = dims.lora_params(rank)
    ckpt_interval = int(values.get("trainer.ckpt_interval", 10))
    ckpt_steps = schedule.save_steps(total=total, per_epoch=per_epoch, interval=ckpt_interval)
    keep = int(values.get("trainer.max_ckpts_to_keep", -1))
    engines = int(values.get("generator.inference_engine.num_engines", 1))
    policy_gpus = int(values["trainer.placement.policy_num_nodes"]) * int(
        values["trainer.placement.policy_num_gpus_per_node"]
    )
    export_interval = int(values.get("trainer.hf_save_interval", -1))
    return Plan(
        policy_gpus=policy_gpus,
        engines=engines,
        train_rows=train_rows,
        steps_per_epoch=per_epoch,
        epochs=epochs,
        total_steps=total,
        trajectories_per_step=batch * int(values["generator.n_samples_per_prompt"]),
        max_turns=int(values["generator.max_turns"]),
        eval_steps=(evals := schedule.eval_steps(total=total, interval=int(values.get("trainer.eval_interval", 5)),
                                                 before_train=bool(values.get("trainer.eval_before_train", True)))),
        eval_episodes=len(evals) * eval_set_size * int(values.get("generator.eval_n_samples_per_prompt", 1)),
        ckpt_steps=ckpt_steps,
        ckpt_interval=ckpt_interval,
        export_steps=schedule.save_steps(total=total, per_epoch=per_epoch, interval=export_interval),
        ckpt_bytes=dims.total_params() * FP32_BYTES + lora * FP32_BYTES * ADAM_STATES,
        export_bytes=lora * FP32_BYTES + EXPORT_EXTRA_BYTES,
        model_bytes=dims.total_params() * BF16_BYTES,
        kept_ckpts=len(ckpt_steps) if keep < 0 else min(keep, len(ckpt_steps)),
        fsx_bytes=fsx_gib * GIB,
    )


def _steps(steps: list[int]) -> str:
    return ", ".join(map(str, steps)) if len(steps) <= 12 else f"{', '.join(map(str, steps[:10]))}, ... {steps[-1]}"


def render_plan(plan: Plan) -> list[str]:
    """Human-readable lines, sizes in GB (1e9 bytes) with the FSx share."""
    share = plan.peak_bytes / plan.fsx_bytes
    return [
        f"GPUs:         {plan.policy_gpus} (FSDP policy) colocated with {plan.engines} vLLM engines",
        f"steps:        {plan.total_steps} = {plan.epochs} epochs x {plan.steps_per_epoch} steps "
        f"({plan.train_rows} tickets)" if plan.total_steps == plan.epochs * plan.steps_per_epoch else
        f"steps:        {plan.total_steps} = trainer.max_training_steps, of {plan.epochs} epochs x "
        f"{plan.steps_per_epoch} steps ({plan.train_rows} tickets)",
        f"rollouts:     {plan.trajectories_per_step} a step, {plan.train_episodes:,} training episodes, "
        f"up to {plan.train_episodes * plan.max_turns:,} model turns",
        f"evaluations:  {len(plan.eval_steps)} at steps {_steps(plan.eval_steps)} ({plan.eval_episodes:,} episodes)",
        f"checkpoints:  {len(plan.ckpt_steps)} at steps {_steps(plan.ckpt_steps)}, {plan.ckpt_bytes / GB:.1f} GB each "
        "(fp32 base weights + LoRA Adam state)",
        f"exports:      {len(plan.export_steps)} at steps {_steps(plan.export_steps)}, "
        f"{plan.export_bytes / GB:.2f} GB each (LoRA adapter)",
        f"FSx /shared:  {plan.peak_bytes / GB:.0f} GB at the end of the run = "
        f"base model {plan.model_bytes / GB:.1f} GB "
        f"+ {plan.kept_ckpts} checkpoints + exports + lora_sync; {share:.0%} of {plan.fsx_bytes / GIB:.0f} GiB",
    ]


def plan_warnings(plan: Plan) -> list[str]:
    """Problems the plan shows before any GPU time is spent."""
    warnings = []
    if plan.peak_bytes > plan.fsx_bytes:
        warnings.append(
            f"the run needs {plan.peak_bytes / GB:.0f} GB but FSx has {plan.fsx_bytes / GIB:.0f} GiB: set "
            "trainer.max_ckpts_to_keep (e.g. 3) or deploy with a larger fsx_storage_gib"
        )
    off_cadence = [
        s for s in plan.ckpt_steps if plan.ckpt_interval > 0 and s % plan.ckpt_interval and s != plan.total_steps
    ]
    if off_cadence:
        warnings.append(
            f"{len(off_cadence)} extra checkpoints at epoch ends (steps {_steps(off_cadence)}), "
            f"{len(off_cadence) * plan.ckpt_bytes / GB:.0f} GB: turn fixes.aligned_epochs on"
        )
    return warnings
