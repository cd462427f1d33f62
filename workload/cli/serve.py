"""``skymaze serve`` (local OpenAI endpoint with LoRA adapters) and ``skymaze evaluate`` (held-out set via an endpoint)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer

from workload.cli._common import EXIT_USAGE, fail, next_step

DEFAULT_PORT = 8000  # Ray Serve's default HTTP port, also the cluster's serve port
API_KEY_ENV = "SKYMAZE_API_KEY"
SIGNAL_POLL_S = 0.5  # how often the main thread wakes to notice a stop signal


def serve(
    model: Path = typer.Option(..., "--model", help="base model folder (Hugging Face format)"),
    adapters: str = typer.Option(
        ..., "--adapters", help="folder or s3://bucket/prefix of adapter sub-folders"
    ),
    host: str = typer.Option("127.0.0.1", help="address to listen on (loopback by default)"),
    port: int = typer.Option(DEFAULT_PORT, help="HTTP port; 0 picks a free one"),
    model_id: str | None = typer.Option(
        None, help="id of the base model in requests (default: the folder name)"
    ),
    max_adapters: int = typer.Option(4, help="adapters kept in memory per replica (LRU eviction beyond)"),
    cache_dir: Path = typer.Option(
        Path.home() / ".cache" / "skymaze" / "adapters", help="where adapters from S3 are cached"
    ),
    s3_endpoint_url: str | None = typer.Option(None, help="S3-compatible endpoint (default: AWS)"),
    num_cpus: int = typer.Option(2, help="CPUs of the local Ray instance"),
    replica_cpus: float = typer.Option(1.0, help="CPUs reserved by the model replica"),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        envvar=API_KEY_ENV,
        show_default=False,
        help=f"require 'Authorization: Bearer KEY' on every request (or set {API_KEY_ENV})",
    ),
    once: bool = typer.Option(False, "--once", help="start, list the models, stop (a smoke test)"),
) -> None:
    """Serve a base model and its LoRA adapters with the OpenAI API on a local Ray Serve.

    Model ids: BASE and BASE:ADAPTER (ADAPTER = a sub-folder of --adapters). Ray's own ports stay
    on 127.0.0.1 behind Ray's token auth. Stop with Ctrl-C or SIGTERM (exits 0).

    Example:  skymaze serve --model runs/latest/base --adapters runs/latest/exports --port 8000
    """
    from workload.serve.local import LocalServer

    if port < 0 or port > 65535:
        fail(f"--port must be 0-65535, got {port}", code=EXIT_USAGE)
    try:
        server = LocalServer(
            model,
            adapters,
            host=host,
            port=port,
            base_model_id=model_id,
            max_num_adapters_per_replica=max_adapters,
            cache_dir=cache_dir,
            s3_endpoint_url=s3_endpoint_url,
            num_cpus=num_cpus,
            replica_num_cpus=replica_cpus,
            api_key=api_key,
        )
    except ValueError as error:
        fail(f"{error} (--model / --adapters / --model-id / --max-adapters / --api-key)", code=EXIT_USAGE)
    stop, previous = _stop_on_signals()  # before Ray starts: a signal during start-up also stops cleanly
    try:
        example = _serve_until_stopped(server, api_key, stop, once=once)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    next_step(
        f"skymaze evaluate --endpoint {server.url} --model {example} --heldout easy-64 --out evals/{example.replace(':', '-')}"
    )


def _serve_until_stopped(server, api_key: str | None, stop: threading.Event, *, once: bool) -> str:
    with server:
        _handle_signals(stop)  # again: starting Ray installs its own SIGTERM handler, which aborts
        models = _list_models(server.url, api_key)
        typer.echo(f"serving at {server.url}/v1 (OpenAI API)" + (" with an API key" if api_key else ""))
        typer.echo("models: " + ", ".join(models))
        example = models[-1]
        if not once:
            typer.echo("Ctrl-C stops the server.")
            while not stop.wait(SIGNAL_POLL_S):
                pass
    return example


def _list_models(url: str, api_key: str | None) -> list[str]:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=api_key or "EMPTY", max_retries=3)
    return [m.id for m in client.models.list().data]


def _stop_on_signals() -> tuple[threading.Event, dict]:
    """An event set by SIGTERM (a process manager) or SIGINT (Ctrl-C), and the handlers it replaced."""
    stop = threading.Event()
    return stop, _handle_signals(stop)


def _handle_signals(stop: threading.Event) -> dict:
    return {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}


def evaluate(
    endpoint: str = typer.Option(..., help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000"),
    model: str = typer.Option(..., help="BASE or BASE:ADAPTER"),
    set_name: str = typer.Option("easy-64", "--heldout", help="frozen held-out set: easy-64 | rehearsal-7x7-64"),
    style: str = typer.Option(
        "visgym", help="prompt style: visgym (cluster model) | compact (rehearsal model)"
    ),
    max_turns: int = typer.Option(15, help="turn cap an episode (the published run: 15)"),
    image_history: int | None = typer.Option(None, help="user turns kept in the context (default: all)"),
    cell_px: int = typer.Option(25, help="pixels a maze cell (VisGym: 25; the rehearsal: 8)"),
    max_tokens: int = typer.Option(1024, help="reply length cap a turn"),
    concurrency: int = typer.Option(4, help="episodes played at once"),
    limit: int | None = typer.Option(None, help="play only the first N mazes of the set"),
    out: Path | None = typer.Option(None, "--out", help="folder for report.json and the episode picture"),
) -> None:
    """Play a frozen held-out set through an OpenAI-compatible endpoint; print and save the report.

    Greedy, multi-turn with the image history; strict pass@1 with its 95% interval and the ceiling.

    Example:  skymaze evaluate --endpoint http://127.0.0.1:8000 --model base:step-20 --heldout easy-64 --out evals/step-20
    """
    from workload.evaluate.endpoint import EndpointError, evaluate_endpoint
    from workload.evaluate.report import format_report

    try:
        report = evaluate_endpoint(
            endpoint=endpoint,
            model=model,
            set_name=set_name,
            max_turns=max_turns,
            style=style,
            image_history=image_history,
            cell_px=cell_px,
            max_tokens=max_tokens,
            concurrency=concurrency,
            limit=limit,
            out_dir=out,
        )
    except EndpointError as error:
        fail(str(error))
    except ValueError as error:
        fail(
            f"{error} (--heldout / --style / --max-turns / --image-history / --concurrency / --limit)",
            code=EXIT_USAGE,
        )
    typer.echo(format_report(report))
    if out is not None:
        typer.echo(f"wrote {out / 'report.json'} and {out / report['picture']}")
    next_step(
        f"skymaze evaluate --endpoint {endpoint} --model {model.split(':')[0]} --heldout {set_name}  # the base model, to compare"
    )


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``evaluate`` to ``skymaze``."""
    app.command("serve")(serve)
    app.command("evaluate")(evaluate)
