"""The cluster job: prepare data and model on /shared, register MazeEnv, run SkyRL's PPO loop.

Run by ``skymaze submit`` on the Ray head inside the trainer image::

    python -m workload.skyrl.entrypoint --job-spec job.json [--preflight]

``job.json`` (written by :func:`job_spec`) is the resolved recipe: the overrides passed
to SkyRL verbatim, the ticket settings and the fixes. SkyRL is imported only here, at
run time: it needs Python 3.12, CUDA and the image's pinned stack. ``--preflight`` stops
after the preparation (the tickets and the SFT checkpoint on /shared, where the endpoint's replicas
wait for it) and prints what would run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workload.skyrl.driver_check import check_gpu_nodes
from workload.skyrl.tickets import ENV_CLASS, TicketSpec, build_dataset, spec_from_recipe

STAGE_MARKER = "skymaze-stage:"
"""Printed (flushed) as each start-up stage begins: ``skymaze-stage: <stage>`` on the job's log."""
STARTUP_STAGES = (
    "config", "validate", "ray-init", "experiment-task", "env-registry", "tokenizer", "train-dataset", "eval-dataset",
    "placement-group", "trainer-setup", "tracker", "inference-client", "generator", "trainer", "build-models", "train",
)
"""SkyRL 0.4.0's start-up in order (skyrl/train/entrypoints/main_base.py ``main``, ``BasePPOExp``):
the stages up to ``experiment-task`` run on the job's driver (which then waits on the task), the
rest in the experiment's Ray task."""
FAILED_MARKER = "skymaze-failed-at:"
"""The driver's last stderr line when the job stops: ``skymaze-failed-at: <stage>: <error>``."""
REACHED_MARKER = "skymaze-reached:"
"""The driver's line before it: every stage begun, the task's included (``skymaze-reached: a b c``);
the task's own marker lines can reach the job log after the driver's error, or not at all."""
OVERRIDE_JOB_RUNTIME_ENV = "RAY_OVERRIDE_JOB_RUNTIME_ENV"
"""Lets ``ray.init(runtime_env=...)`` inside a Ray job name env vars the job's runtime_env names too
(ray/_private/worker.py ``init`` -> ``_merge_runtime_env``). SkyRL's ``initialize_ray`` copies
driver variables the job's runtime_env already set (HF_HOME, HF_TOKEN, WANDB_API_KEY,
MLFLOW_TRACKING_URI, NCCL_DEBUG, SKYRL_*, ...; ``prepare_runtime_environment`` in
skyrl/train/utils/utils.py); without it Ray refuses the merge and the job fails at start-up.
SkyRL's own CI jobs set it (ci/anyscale_gpu_ci.yaml)."""

NOT_IN_IMAGE = (
    "SkyRL is not importable here ({error}). This entrypoint runs inside the trainer image "
    "(containers/trainer); submit it to the cluster with `skymaze submit`, or use --preflight."
)


@dataclass(frozen=True)
class JobSpec:
    """Everything the job needs, read once from job.json."""

    recipe: str
    run_id: str
    run_dir: str
    overrides: list[str]
    tickets: TicketSpec
    model_hub_id: str
    model_subfolder: str
    model_path: str
    strict_metric: bool
    trajectories_per_step: int

    @property
    def data_dir(self) -> Path:
        return Path(self.run_dir) / "data"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        raw = json.loads(text)
        raw["tickets"] = TicketSpec(**raw["tickets"])
        return cls(**raw)


def job_spec(recipe: Any) -> JobSpec:
    """Freeze a :class:`workload.skyrl.recipe.Recipe` into the job's settings."""
    values = recipe.resolved()
    return JobSpec(
        recipe=recipe.name,
        run_id=recipe.run_id,
        run_dir=recipe.run_dir,
        overrides=recipe.overrides(),
        tickets=spec_from_recipe(recipe),
        model_hub_id=recipe.model.hub_id,
        model_subfolder=recipe.model.subfolder,
        model_path=str(values["trainer.policy.model.path"]),
        strict_metric=recipe.fixes.strict_solve_metric,
        trajectories_per_step=int(values["trainer.train_batch_size"]) * int(values["generator.n_samples_per_prompt"]),
    )


def prepare_data(spec: JobSpec) -> str:
    """Build the ticket files unless this run already has them for the same settings."""
    marker = spec.data_dir / "tickets.json"
    wanted = json.dumps(asdict(spec.tickets), sort_keys=True)
    have = all((spec.data_dir / f).is_file() for f in ("train.parquet", "eval.parquet"))
    if have and marker.is_file() and marker.read_text() == wanted:
        return f"data: reusing {spec.data_dir}"
    build_dataset(spec.tickets, spec.data_dir)
    marker.write_text(wanted)
    return f"data: wrote {spec.data_dir}/train.parquet ({spec.tickets.train_rows} tickets) and eval.parquet"


def prepare_model(spec: JobSpec, *, download: bool) -> str:
    """Fetch the starting checkpoint to ``model_path`` on first use (the blog's train_job.sh did the same),
    complete or not at all: the hub client downloads into a staging folder beside it (resuming there what an
    interrupted job left, by its own per-file metadata), which is renamed into place once it has returned."""
    path = Path(spec.model_path)
    suffix = f"/{spec.model_subfolder}" if spec.model_subfolder else ""
    local_dir = Path(str(path)[: -len(suffix)] if suffix and str(path).endswith(suffix) else str(path))
    staging = local_dir.with_name(local_dir.name + MODEL_STAGING_SUFFIX)
    if (path / "config.json").is_file() and not _unfinished_download(local_dir):
        return f"model: reusing {path}"
    if not download:
        return f"model: {path} missing; the job downloads {spec.model_hub_id}/{spec.model_subfolder} there"
    from huggingface_hub import snapshot_download

    if local_dir.exists():  # written in place by an earlier version and unfinished: finish it in staging
        if staging.exists():
            raise SystemExit(f"model: both {local_dir} (an unfinished download) and {staging} exist; move one away "
                             "and submit again")
        local_dir.rename(staging)
    patterns = [f"{spec.model_subfolder}/*"] if spec.model_subfolder else None
    snapshot_download(spec.model_hub_id, local_dir=str(staging), allow_patterns=patterns)
    staging.rename(local_dir)
    return f"model: downloaded {spec.model_hub_id} to {local_dir}"


MODEL_STAGING_SUFFIX = ".download"
"""A model downloads to ``<folder>.download`` beside its final folder and is renamed when complete."""


def _unfinished_download(local_dir: Path) -> bool:
    """Whether the hub client left a file unfinished in ``local_dir``. huggingface_hub keeps, under
    ``.cache/huggingface/download/``, a ``FILE.lock`` for every file it starts, the ``.incomplete`` part while
    it is written, and ``FILE.metadata`` (commit and etag) only once the file is whole (_local_folder.py
    get_local_download_paths, file_download.py _download_to_tmp_and_move)."""
    download = local_dir / ".cache" / "huggingface" / "download"
    return any(download.rglob("*.incomplete")) or any(
        not lock.with_suffix(".metadata").is_file() for lock in download.rglob("*.lock"))


def require_skyrl() -> None:
    """Fail before any download when SkyRL is not installed (not the trainer image)."""
    try:
        import skyrl.train.entrypoints.main_base  # noqa: F401
        import skyrl_gym  # noqa: F401
    except ImportError as error:
        raise SystemExit(NOT_IN_IMAGE.format(error=error)) from None


SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD", re.IGNORECASE)
"""Env var names whose values never appear in the job's log (HF_TOKEN, WANDB_API_KEY, ...)."""
MIN_SECRET_CHARS = 8
"""Shorter values (``1``, ``true``) are not masked: they would blank unrelated text."""
MASK = "***"


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """Values of the variables named like secrets, longest first (a value inside another is masked too)."""
    values = {v for k, v in environ.items() if SECRET_NAME.search(k) and len(v) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)


def mask_secrets(text: str, secrets: list[str]) -> str:
    for value in secrets:
        text = text.replace(value, MASK)
    return text


def mask_secrets_in_skyrl_logs(environ: Mapping[str, str]) -> None:
    """Mask secret values in every loguru record of this process (SkyRL 0.4.0's ``initialize_ray``
    logs ``Exporting `HF_TOKEN` to ray runtime env: <value>``)."""
    from loguru import logger

    secrets = secret_values(environ)
    if secrets:
        logger.configure(patcher=lambda record: record.update(message=mask_secrets(record["message"], secrets)))


TICKET_TOKENIZE_WORKERS = 1
"""Processes SkyRL's ``PromptDataset`` tokenizes the tickets with (SkyRL's entrypoint uses 8). A
ticket's prompt is one short placeholder message, so 600 tokenize in well under a second in the
task itself, while each loader process imports torch and transformers again: 8 of them took 2.5
min of the job's start on a 2-core head (measured), for nothing."""


class StageFailed(RuntimeError):
    """A start-up stage raised; ``stage`` names it (survives Ray's task-error wrapping and pickling)."""

    def __init__(self, stage: str, detail: str, reached: tuple[str, ...] = ()) -> None:
        super().__init__(stage, detail, reached)
        self.stage, self.detail, self.reached = stage, detail, tuple(reached)

    @classmethod
    def of(cls, stage: str, error: BaseException, reached: tuple[str, ...] = ()) -> StageFailed:
        return cls(stage, f"{type(error).__name__}: {error}", reached)

    def __str__(self) -> str:
        return f"{self.stage}: {self.detail}"


class Stages:
    """Marks each start-up stage on stdout as it begins; re-raises a failure as :class:`StageFailed`."""

    def __init__(self) -> None:
        self.current = ""
        self.reached: list[str] = []

    def enter(self, stage: str) -> None:
        assert stage in STARTUP_STAGES, stage
        self.current = stage
        self.reached.append(stage)
        print(f"{STAGE_MARKER} {stage}", flush=True)

    @contextmanager
    def running(self, stage: str) -> Iterator[None]:
        self.enter(stage)
        try:
            yield
        except StageFailed:
            raise
        except Exception as error:
            raise StageFailed.of(stage, error, tuple(self.reached)) from error


def failed_stage(error: BaseException | None) -> StageFailed | None:
    """The :class:`StageFailed` behind ``error``, if any (its fields: ``stage``, ``detail``, ``reached``).

    Ray hands the task's error to the driver as a ``RayTaskError`` whose ``cause`` is the
    remote exception; matched by its fields, not its class, because the driver runs this
    module as ``__main__`` while the task raised ``workload.skyrl.entrypoint.StageFailed``.
    """
    while error is not None:
        if isinstance(getattr(error, "stage", None), str) and isinstance(getattr(error, "detail", None), str):
            return error  # type: ignore[return-value]
        error = getattr(error, "cause", None) or error.__cause__
    return None


def _stop_log_forwarding() -> None:
    """Disconnect from Ray so no worker line is forwarded after the driver's last line."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def run_skyrl(spec: JobSpec, stages: Stages) -> None:
    """Validate the overrides with SkyRL itself, then run the experiment in a Ray task."""
    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils.utils import initialize_ray, validate_cfg

    # Imported by module path so Ray ships a reference, not a pickled copy of __main__.
    from workload.skyrl.entrypoint import _experiment

    mask_secrets_in_skyrl_logs(os.environ)
    with stages.running("config"):
        cfg = SkyRLTrainConfig.from_cli_overrides(spec.overrides)
    with stages.running("validate"):
        validate_cfg(cfg)
    with stages.running("ray-init"):
        # Under `ray job submit` the job's env vars are already in this process's environment and
        # in every worker's (the job's runtime_env); SkyRL re-sends some of them (see the constant).
        os.environ[OVERRIDE_JOB_RUNTIME_ENV] = "1"
        initialize_ray(cfg)
    # num_cpus=1 and off the driver, as SkyRL's own entrypoint does.
    stages.enter("experiment-task")
    ray.get(ray.remote(num_cpus=1)(_experiment).remote(cfg, spec))


def _tickets(paths: Any, tokenizer: Any, cfg: Any) -> Any:
    """SkyRL's ``PromptDataset`` over ticket files, tokenized in this process."""
    from skyrl.train.dataset import PromptDataset

    return PromptDataset(datasets=paths, tokenizer=tokenizer, max_prompt_length=cfg.trainer.max_prompt_length,
                         num_workers=TICKET_TOKENIZE_WORKERS)


def _experiment(cfg: Any, spec: JobSpec) -> None:
    """Runs inside the Ray task: the env registry and the trainer live in this process."""
    import ray

    from workload.skyrl.env import register_maze_env

    mask_secrets_in_skyrl_logs(os.environ)
    stages = Stages()
    job_env = sorted((ray.get_runtime_context().runtime_env or {}).get("env_vars", {}))
    print(f"skymaze: env vars of the job's runtime_env in this worker: {', '.join(job_env) or '-'}", flush=True)
    with stages.running("env-registry"):
        register_maze_env(ENV_CLASS)
    try:
        _maze_experiment_class(stages, spec)(cfg).run()
    except StageFailed:
        raise
    except Exception as error:
        raise StageFailed.of(stages.current, error, tuple(stages.reached)) from error


def _maze_callback(spec: JobSpec) -> Any:
    """The callback that logs the maze metrics and writes the run's files (workload/skyrl/callback.py)."""
    from workload.skyrl.callback import MazeTrainingCallback

    return MazeTrainingCallback(run_dir=spec.run_dir, run_id=spec.run_id, eval_set=spec.tickets.eval_set,
                                strict_metric=spec.strict_metric, trajectories_per_step=spec.trajectories_per_step)


def _maze_experiment_class(stages: Stages, spec: JobSpec) -> type:
    """SkyRL's ``BasePPOExp`` with the maze callback, the ticket datasets and a stage marker at each start-up step."""
    from skyrl.train.entrypoints.main_base import BasePPOExp

    class MazeExp(BasePPOExp):
        """SkyRL's experiment with the maze callback and a marker at each start-up stage."""

        def __init__(self, cfg: Any) -> None:
            stages.enter("tokenizer")  # BasePPOExp.__init__ loads the tokenizer first
            super().__init__(cfg)

        def get_train_dataset(self) -> Any:
            with stages.running("train-dataset"):
                dataset = _tickets(self.cfg.data.train_data, self.tokenizer, self.cfg)
                # BasePPOExp.get_train_dataset's own check
                if len(dataset) < self.cfg.trainer.train_batch_size:
                    raise ValueError(f"dataset should be at least as large as `train_batch_size` "
                                     f"{self.cfg.trainer.train_batch_size}, got size {len(dataset)}")
                return dataset

        def get_eval_dataset(self) -> Any:
            with stages.running("eval-dataset"):
                if self.cfg.trainer.eval_interval > 0 and self.cfg.data.val_data:
                    return _tickets(self.cfg.data.val_data, self.tokenizer, self.cfg)
                return None

        def get_colocate_pg(self, *args: Any, **kwargs: Any) -> Any:
            with stages.running("placement-group"):
                return super().get_colocate_pg(*args, **kwargs)

        def get_tracker(self) -> Any:
            with stages.running("tracker"):
                return super().get_tracker()

        def get_inference_client(self) -> Any:
            with stages.running("inference-client"):
                return super().get_inference_client()

        def get_generator(self, *args: Any, **kwargs: Any) -> Any:
            with stages.running("generator"):
                return super().get_generator(*args, **kwargs)

        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            with stages.running("trainer"):
                trainer = super().get_trainer(*args, **kwargs)
                trainer.add_callback(_maze_callback(spec))
            stages.enter("build-models")  # BasePPOExp._setup_trainer builds the FSDP workers next
            return trainer

        def _setup_trainer(self) -> Any:
            # imports the FSDP workers (flash-attn's CUDA kernels), then the tracker, engines, trainer
            stages.enter("trainer-setup")
            trainer = super()._setup_trainer()
            stages.enter("train")  # BasePPOExp.run: asyncio.run(trainer.train())
            return trainer

    return MazeExp


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, prepare /shared, then train (or stop after the preparation)."""
    parser = argparse.ArgumentParser(prog="python -m workload.skyrl.entrypoint", description=__doc__.splitlines()[0])
    parser.add_argument("--job-spec", type=Path, required=True, help="job.json written by skymaze submit")
    parser.add_argument("--preflight", action="store_true",
                        help="stage the tickets and the model on /shared, report, do not train")
    args = parser.parse_args(argv)
    spec = JobSpec.from_json(args.job_spec.read_text())
    print(f"run {spec.run_id} (recipe {spec.recipe}) in {spec.run_dir}", flush=True)
    if not args.preflight:
        require_skyrl()
    print(prepare_data(spec), flush=True)
    # The preflight stages the model too: the endpoint's replicas wait for it there (workload/serve/node_init.py).
    print(prepare_model(spec, download=True), flush=True)
    print("skyrl overrides:", flush=True)
    for line in spec.overrides:
        print(f"  {line}", flush=True)
    if args.preflight:
        print("preflight: ok", flush=True)
        return 0
    refused = check_gpu_nodes()  # before SkyRL places anything on a GPU
    if refused:
        for line in refused:
            print(f"error: {line}", file=sys.stderr, flush=True)
        print(f"{FAILED_MARKER} gpu-driver: {refused[0]}", file=sys.stderr, flush=True)
        return 1
    stages = Stages()
    try:
        run_skyrl(spec, stages)
    except Exception as error:
        traceback.print_exc()
        failed = failed_stage(error)
        stage, detail = (failed.stage, failed.detail) if failed else (stages.current, f"{type(error).__name__}: {error}")
        reached = [*stages.reached, *(s for s in (failed.reached if failed else ()) if s not in stages.reached)]
        _stop_log_forwarding()
        # The job log's last lines: Ray's job message (the log's last lines) names the stage.
        print(f"{REACHED_MARKER} {' '.join(reached)}", file=sys.stderr, flush=True)
        print(f"{FAILED_MARKER} {stage}: {detail}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
