"""``skymaze promote``: ship a run's LoRA export to where the serving endpoint loads adapters."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import EXIT_USAGE, PROFILE_OPTION, fail, next_step, resolve_size
from workload.deployment.names import RAY_NAMESPACE
from workload.serving_rules import DEFAULT_MAX_LORA_RANK


def promote(
    run: Path = typer.Option(..., "--run", help="Run folder (runs/<id> locally, /shared/runs/<id> on the cluster)."),
    step: int = typer.Option(
        None, "--step", min=0,
        help="Global step of the export (exports/global_step_N/policy); default: a rehearsal's step selected on "
             "validation, else the newest export."),
    to: str = typer.Option(None, "--to",
                           help="s3://BUCKET/adapters/NAME or a folder; NAME becomes the model id suffix."),
    name: str = typer.Option(
        None, "--name",
        help="On the cluster's pods: promote to s3://<artifacts bucket>/adapters/NAME (instead of --to)."),
    max_lora_rank: int = typer.Option(DEFAULT_MAX_LORA_RANK, "--max-lora-rank",
                                      help="Endpoint's max_lora_rank (default: the cluster endpoint's)."),
    profile: str | None = PROFILE_OPTION,
    overwrite: bool = typer.Option(
        False, "--overwrite",
        help="Replace an adapter already promoted in a folder (on S3 a served name is promoted once)."),
) -> None:
    """Copy exports/global_step_N/policy (weights, manifest.json, then adapter_config.json) to S3 or a folder.

    Refuses adapters with LoRA on the vision tower or a rank above the endpoint's max_lora_rank.

    Example:  skymaze promote --run /shared/runs/maze-blog --name maze-grpo
    """
    import os

    from workload.skyrl.promote import artifacts_destination, default_step
    from workload.skyrl.promote import promote as run_promote

    if (to is None) == (name is None):
        fail("give --to (s3://BUCKET/adapters/NAME or a folder) or, on the cluster's pods, --name NAME",
             code=EXIT_USAGE)
    to = to or artifacts_destination(name, dict(os.environ))  # a PromoteError exits 2
    step = default_step(run) if step is None else step

    try:
        manifest = run_promote(run, step, to, max_lora_rank=max_lora_rank, overwrite=overwrite)
    except OSError as err:
        fail(f"promote failed: {err}")
    except Exception as err:  # botocore errors: credentials, bucket, permissions
        if type(err).__module__.startswith(("botocore", "boto3")):
            fail(f"promote failed: {err}")
        raise
    strict = (manifest["eval"] or {}).get("strict_pass_at_1")
    if manifest.get("already_promoted"):
        typer.echo(f"{to} already holds this adapter (same files and sha256s): nothing copied")
    typer.echo(f"promoted {manifest['name']} (rank {manifest['rank']}, {len(manifest['files'])} files) to {to}")
    strict_shown = "n/a" if strict is None else strict
    typer.echo(f"base model: {manifest['base_model']}; strict pass@1 at step {step}: {strict_shown}")
    endpoint = _cluster_endpoint(resolve_size(profile)[0]) if to.startswith("s3://") else None
    next_step(*_next_commands(manifest, to, run / "exports" / f"global_step_{step}" / "policy", endpoint))


LOCAL_ENDPOINT_PORT = 8000  # skymaze serve's default port
SERVER_START_WAIT_S = 300  # a local `skymaze serve` is ready in 1-2 min on 2 busy cores: evaluate waits for it


def _cluster_endpoint(profile: str) -> tuple[str, str]:
    """(port-forward command, base model id) of the profile's serving endpoint."""
    from workload.deployment.settings import load_settings
    from workload.skyrl.recipe import load_recipe

    settings = load_settings({"profile": profile})
    # infra/stacks/serving.py names the RayService NAME-serve; KubeRay's Serve service is <rayservice>-serve-svc.
    forward = (f"kubectl -n {RAY_NAMESPACE} port-forward svc/{settings.name}-serve-serve-svc "
               f"{LOCAL_ENDPOINT_PORT}:{LOCAL_ENDPOINT_PORT} &")
    return forward, load_recipe(settings.serve_recipe).model.base_model_id


def _next_commands(manifest: dict, to: str, export: Path, endpoint: tuple[str, str] | None = None) -> list[str]:
    """Serve and evaluate the promoted adapter; evaluate reads the adapter's own settings (--adapter).

    An adapter promoted to S3 is served by the cluster's endpoint (``endpoint``: its port-forward and base id).
    """
    from workload.local.pipeline import SERVED_BASE_ID
    from workload.local.rundir import is_rehearsal_sft_model

    name = manifest["name"]
    base = manifest["base_model"]
    url = f"http://127.0.0.1:{LOCAL_ENDPOINT_PORT}"
    wait = f"--wait-s {SERVER_START_WAIT_S}"
    if to.startswith("s3://") or not base:
        forward, base_id = endpoint or ("", "BASE_MODEL_ID")
        # Evaluate runs where the port-forward is, which does not see the export's folder (on the cluster, a path
        # only the pods have): the settings the adapter was trained with travel as options instead of --adapter.
        evaluate = (f"skymaze evaluate --endpoint {url} --model {base_id}:{name}{_trained_with(manifest, export)} "
                    f"{wait} --out evals/{name}")
        return [forward, evaluate] if forward else [evaluate]
    # One model-id scheme: a rehearsal's SFT model is `maze-sft` wherever it is served (the rehearsal's own
    # endpoint names it so); another base model is named after its folder, as `skymaze serve` does by default.
    rehearsal = is_rehearsal_sft_model(Path(base))
    base_id = SERVED_BASE_ID if rehearsal else Path(base).name
    model_id = f" --model-id {SERVED_BASE_ID}" if rehearsal else ""
    return [
        f"skymaze serve --model {base}{model_id} --adapters {Path(to).parent} --port {LOCAL_ENDPOINT_PORT} &",
        f"skymaze evaluate --endpoint {url} --model {base_id}:{name} --adapter {to} {wait} --out evals/{name}",
    ]


def _trained_with(manifest: dict, export: Path) -> str:
    """`` --heldout SET --OPTION VALUE ...``: what the adapter in ``export`` was trained with (its
    trainer_config.json), the held-out set of its run's evaluation else; empty when neither says."""
    from workload.evaluate.adapter_facts import AdapterFolderError, read_adapter_facts

    try:
        settings = dict(read_adapter_facts(export).settings)
    except AdapterFolderError:
        settings = {}
    heldout = settings.pop("set_name", None) or (manifest.get("eval") or {}).get("set")
    options = [f"--{key.replace('_', '-')} {value}" for key, value in sorted(settings.items())]
    return "".join(f" {option}" for option in ([f"--heldout {heldout}"] if heldout else []) + options)


def register(app: typer.Typer) -> None:
    """Add ``promote``."""
    app.command("promote")(promote)
