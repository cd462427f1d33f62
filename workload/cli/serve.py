"""``skymaze serve`` (local OpenAI endpoint with LoRA adapters) and ``skymaze evaluate`` (held-out set via an endpoint)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer

from workload import config
from workload.cli._common import (
    EXIT_USAGE,
    JSON_OPTION,
    doc_help,
    fail,
    next_step,
    print_json,
    setting_option,
)
from workload.config import ConfigError
from workload.evaluate.adapter_facts import ADAPTER_SETTINGS
from workload.evaluate.settings import EvaluateSettings
from workload.serve.settings import ServeSettings

SIGNAL_POLL_S = 0.5  # how often the main thread wakes to notice a stop signal


def serve(
    model: Path = setting_option(ServeSettings, "model"),
    adapters: Path = setting_option(ServeSettings, "adapters"),
    model_id: str | None = setting_option(ServeSettings, "model_id"),
    max_adapters: int = setting_option(ServeSettings, "max_adapters"),
    port: int = setting_option(ServeSettings, "port"),
    once: bool = typer.Option(False, "--once", help="start, list the models, stop (a smoke test)"),
) -> None:
    """Serve a base model and its LoRA adapters with the OpenAI API on a local Ray Serve, on 127.0.0.1.

    Model ids: BASE and BASE:ADAPTER (ADAPTER = a sub-folder of --adapters). Ray's own ports stay on 127.0.0.1
    behind Ray's token auth. Ctrl-C or SIGTERM stops the server and its Ray (exit 0).

    Example:  skymaze serve --model runs/latest/models/sft --model-id maze-sft --adapters runs/latest/served --port 8000
    """
    from workload.localhost import LOOPBACK
    from workload.serve.local import LocalServer

    values = {"model": model, "adapters": adapters, "model_id": model_id, "max_adapters": max_adapters, "port": port}
    try:
        settings = config.validate_flat(ServeSettings, values, what="serve settings")
    except ConfigError as error:
        fail(f"{error} (each setting KEY is the option --KEY, e.g. max_adapters is --max-adapters)", code=EXIT_USAGE)
    _refuse_taken_port(LOOPBACK, settings.port)
    for name, reason in unserved_adapters(settings):
        typer.echo(f"not serving adapter {name!r}: {reason}", err=True)
    stop = threading.Event()
    previous = _handle_signals(stop)  # before Ray starts: a signal during start-up also stops cleanly
    try:
        with LocalServer(settings) as server:
            _handle_signals(stop)  # again: starting Ray installs its own SIGTERM handler, which aborts
            models = _list_models(server.url)
            typer.echo(f"serving at {server.url}/v1 (OpenAI API)")
            typer.echo("models: " + ", ".join(models))
            next_step(_evaluate_hint(server.url, models[-1], adapters) + ("" if once else "   # in another shell"))
            if not once:
                typer.echo("\nCtrl-C stops the server.")
                while not stop.wait(SIGNAL_POLL_S):
                    pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _evaluate_hint(url: str, model_id: str, adapters: Path) -> str:
    """The evaluate command for one served id; an adapter brings its own prompt settings and set."""
    out = f"--out evals/{model_id.replace(':', '-')}"
    _, _, adapter = model_id.partition(":")
    if adapter:
        return f"skymaze evaluate --endpoint {url} --model {model_id} --adapter {adapters / adapter} {out}"
    return f"skymaze evaluate --endpoint {url} --model {model_id} --heldout easy-64 {out}"


def _list_models(url: str) -> list[str]:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=3)
    return [m.id for m in client.models.list().data]


def _handle_signals(stop: threading.Event) -> dict:
    """SIGTERM (a process manager) and SIGINT (Ctrl-C) set ``stop``; the handlers they replaced."""
    return {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}


def _refuse_taken_port(host: str, port: int) -> None:
    """Exit 1 when something listens on host:port: a second server would share the port silently."""
    from workload.cli._common import port_taken

    if port_taken(host, port):
        fail(f"port {port} on {host} is already in use (another `skymaze serve`?); stop it or pass --port N "
             "(0 picks a free one)")


def unserved_adapters(settings: ServeSettings) -> list[tuple[str, str]]:
    """``(name, why)`` of each adapter in --adapters the server refuses (it is not listed and answers 400):
    broken files, a rule it breaks, or a recorded base that is another model folder here."""
    from workload.serve.adapters import scan

    return sorted(scan(settings.adapters, settings.model)[1].items())


# The settings an adapter's trainer_config.json sets (workload/evaluate/adapter_facts.py), with the model's defaults.
EVALUATE_DEFAULTS = {key: config.field_named(EvaluateSettings, key).default for key in ADAPTER_SETTINGS}


def evaluate(
    endpoint: str = setting_option(EvaluateSettings, "endpoint"),
    model: str = setting_option(EvaluateSettings, "model"),
    adapter: Path | None = typer.Option(
        None, "--adapter",
        help="the adapter's folder: its trainer_config.json sets every option below it knows (style, cell px, "
             "image history, reply length, turns, held-out set); a contradicting option is refused"),
    set_name: str | None = setting_option(EvaluateSettings, "heldout", explicit=True),
    style: str | None = setting_option(EvaluateSettings, "style", explicit=True),
    max_turns: int | None = setting_option(EvaluateSettings, "max_turns", explicit=True),
    image_history: int | None = setting_option(EvaluateSettings, "image_history", explicit=True),
    cell_px: int | None = setting_option(EvaluateSettings, "cell_px", explicit=True),
    max_tokens: int | None = setting_option(EvaluateSettings, "max_tokens", explicit=True),
    concurrency: int = setting_option(EvaluateSettings, "concurrency"),
    limit: int | None = setting_option(EvaluateSettings, "limit"),
    out: Path | None = typer.Option(None, "--out", help="folder for report.json and the episode picture"),
    wait_s: float = typer.Option(
        0.0, "--wait-s", min=0,
        help="wait up to this many seconds for the endpoint to serve --model (a server still starting); 0: fail at once"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Play a frozen held-out set through an OpenAI-compatible endpoint; print and save the report.

    Greedy, multi-turn with the image history; strict pass@1 with its 95% interval and the ceiling. Shows progress on stderr. With --adapter, the settings the adapter was trained with are used (an adapter played with other settings scores near zero).

    Example:  skymaze evaluate --endpoint http://127.0.0.1:8000 --model maze-sft:selected --adapter runs/latest/served/selected --wait-s 300 --out evals/selected
    """
    from workload.evaluate.endpoint import evaluate_endpoint

    given = {"style": style, "max_turns": max_turns, "image_history": image_history, "cell_px": cell_px,
             "max_tokens": max_tokens, "set_name": set_name}
    # The folder first: a missing or unreadable --adapter is known at once, not after waiting --wait-s.
    facts = _adapter_facts(adapter)
    if wait_s > 0:
        _wait_for_model(endpoint, model, wait_s)
    settings = _evaluate_settings(endpoint, model, facts, given)
    try:
        with _progress(f"{model} on {settings['set_name']}", quiet=as_json) as on_episode:
            report = evaluate_endpoint(endpoint=endpoint, model=model, concurrency=concurrency, limit=limit,
                                       out_dir=out, on_episode=on_episode, **settings)
    except ConfigError as error:  # a setting the model refuses (heldout is --heldout); a damaged set exits 1 as
        fail(f"{error} (`skymaze evaluate --help` lists the options)", code=EXIT_USAGE)  # under `maze heldout`
    if as_json:
        print_json(report)
        return
    _print_report(report, out, endpoint, model, settings)


def _wait_for_model(endpoint: str, model: str, wait_s: float) -> None:
    """Wait up to ``wait_s`` for ``endpoint`` to list ``model`` (a server still starting); exit 1 if it does not."""
    from workload.evaluate.endpoint import wait_for_model

    typer.echo(f"waiting up to {wait_s:g} s for {endpoint} to serve {model}", err=True)
    waited_s = wait_for_model(endpoint, model, timeout_s=wait_s)
    typer.echo(f"{endpoint} serves {model} (waited {waited_s:.0f} s)", err=True)


def _adapter_facts(adapter: Path | None):
    """What the --adapter folder says (None without one); a bad folder exits 2 (``AdapterFolderError``)."""
    from workload.evaluate.adapter_facts import read_adapter_facts

    return None if adapter is None else read_adapter_facts(adapter)


def _evaluate_settings(endpoint: str, model: str, facts, given: dict) -> dict:
    """The adapter-specific settings: the options given, else what the adapter (``facts`` of its folder, or the
    endpoint's listing) was trained with, else the defaults; an option the adapter contradicts exits 2
    (``AdapterMismatch``)."""
    from workload.evaluate.adapter_facts import AdapterFacts, endpoint_facts, settle

    if facts is None:  # a skymaze endpoint states how each adapter was trained (GET /v1/models)
        facts = endpoint_facts(endpoint, model) or AdapterFacts(Path("."), None, {})
        if facts.settings:
            shown = ", ".join(f"{key} {value}" for key, value in sorted(facts.settings.items()))
            typer.echo(f"{model} is played as it was trained, as {endpoint} states: {shown}", err=True)
    return settle(facts, given, EVALUATE_DEFAULTS)


def _print_report(report: dict, out: Path | None, endpoint: str, model: str, settings: dict) -> None:
    """The report, the files written, and the base model's evaluation with the same settings as the next step."""
    from workload.evaluate.report import format_report

    typer.echo(format_report(report))
    if out is not None:
        typer.echo(f"wrote {out / 'report.json'} and {out / report['picture']}")
    same = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in settings.items()
                    if value is not None and key != "set_name")
    next_step(
        f"skymaze evaluate --endpoint {endpoint} --model {model.split(':')[0]} --heldout {settings['set_name']} {same}"
        "  # the base model, to compare"
    )


def _progress(label: str, *, quiet: bool):
    """A context giving ``on_episode(done, total, solved)``: a rich bar on a terminal, else a line a tenth."""
    import contextlib
    import sys

    @contextlib.contextmanager
    def bar():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("solved {task.fields[solved]}"), TimeElapsedColumn(), transient=True) as progress:
            task = progress.add_task(label, total=None, solved=0)
            yield lambda done, total, solved: progress.update(task, completed=done, total=total, solved=solved)

    @contextlib.contextmanager
    def lines():
        def report(done: int, total: int, solved: int) -> None:
            if done == total or done % max(1, total // 10) == 0:
                typer.echo(f"{label}: {done}/{total} played, {solved} solved", err=True)
        yield report

    @contextlib.contextmanager
    def silent():
        yield None

    if quiet:
        return silent()
    return bar() if sys.stderr.isatty() else lines()


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``evaluate`` to ``skymaze``."""
    app.command("serve", help=doc_help(serve.__doc__))(serve)
    app.command("evaluate", help=doc_help(evaluate.__doc__))(evaluate)
