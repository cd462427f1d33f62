"""``skymaze promote``: ship a run's LoRA export to where the serving endpoint loads adapters."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import EXIT_USAGE, PROFILE_OPTION, deploy_setting, fail, next_step


def promote(
    run: Path = typer.Option(..., "--run", help="Run folder (runs/<id> locally, /shared/runs/<id> on the cluster)."),
    step: int = typer.Option(..., "--step", min=0, help="Global step of the export (exports/global_step_N/policy)."),
    to: str = typer.Option(..., "--to", help="s3://BUCKET/adapters/NAME or a folder; NAME becomes the model id suffix."),
    max_lora_rank: int = typer.Option(None, "--max-lora-rank", help="Endpoint's max_lora_rank (default: the deploy profile's)."),
    profile: str = PROFILE_OPTION,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an adapter already promoted under NAME."),
) -> None:
    """Copy exports/global_step_N/policy (adapter files, then manifest.json) to S3 or a folder.

    Refuses adapters with LoRA on the vision tower or a rank above the endpoint's max_lora_rank.

    Example:  skymaze promote --run /shared/runs/maze-blog --step 160 --to s3://my-bucket/adapters/maze-grpo
    """
    from workload.skyrl.promote import PromoteError
    from workload.skyrl.promote import promote as run_promote

    if max_lora_rank is None:
        max_lora_rank = deploy_setting(profile, "max_lora_rank")
    try:
        manifest = run_promote(run, step, to, max_lora_rank=max_lora_rank, overwrite=overwrite)
    except PromoteError as err:
        fail(str(err), code=EXIT_USAGE)
    except OSError as err:
        fail(f"promote failed: {err}")
    except Exception as err:  # botocore errors: credentials, bucket, permissions
        if type(err).__module__.startswith(("botocore", "boto3")):
            fail(f"promote failed: {err}")
        raise
    strict = (manifest["eval"] or {}).get("strict_pass_at_1")
    typer.echo(f"promoted {manifest['name']} (rank {manifest['rank']}, {len(manifest['files'])} files) to {to}")
    typer.echo(f"base model: {manifest['base_model']}; strict pass@1 at step {step}: {'n/a' if strict is None else strict}")
    endpoint = _cluster_endpoint(profile) if to.startswith("s3://") else None
    next_step(*_next_commands(manifest, to, run / "exports" / f"global_step_{step}" / "policy", endpoint))


LOCAL_ENDPOINT_PORT = 8000  # skymaze serve's default port


def _cluster_endpoint(profile: str) -> tuple[str, str]:
    """(port-forward command, base model id) of the profile's serving endpoint."""
    from workload.deployment.settings import load_settings

    settings = load_settings({"profile": profile})
    # infra/stacks/serving.py names the RayService NAME-serve; KubeRay's Serve service is <rayservice>-serve-svc.
    forward = (f"kubectl -n {settings.ray_namespace} port-forward svc/{settings.name}-serve-serve-svc "
               f"{LOCAL_ENDPOINT_PORT}:{LOCAL_ENDPOINT_PORT} &")
    return forward, settings.base_model_id


def _next_commands(manifest: dict, to: str, export: Path, endpoint: tuple[str, str] | None = None) -> list[str]:
    """Serve and evaluate the promoted adapter; evaluate reads the adapter's own settings (--adapter).

    An adapter promoted to S3 is served by the cluster's endpoint (``endpoint``: its port-forward and base id).
    """
    name = manifest["name"]
    base = manifest["base_model"]
    url = f"http://127.0.0.1:{LOCAL_ENDPOINT_PORT}"
    if to.startswith("s3://") or not base:
        forward, base_id = endpoint or ("", "BASE_MODEL_ID")
        evaluate = f"skymaze evaluate --endpoint {url} --model {base_id}:{name} --adapter {export} --out evals/{name}"
        return [forward, evaluate] if forward else [evaluate]
    base_id = Path(base).name  # skymaze serve names the base model after its folder
    return [
        f"skymaze serve --model {base} --adapters {Path(to).parent} --port {LOCAL_ENDPOINT_PORT} &",
        f"skymaze evaluate --endpoint {url} --model {base_id}:{name} --adapter {to} --out evals/{name}",
    ]


def register(app: typer.Typer) -> None:
    """Add ``promote``."""
    app.command("promote")(promote)
