"""Held-out evaluation through any OpenAI-compatible endpoint (local Ray Serve or the cluster's).

Each maze of a frozen set is played by `workload.maze.conversation.MazeConversation`, the
game the SkyRL plugin's env trains on (same prompts, feedback, action extraction and strict
reward), with the model
answering over HTTP: multi-turn, the conversation carrying the image history, greedy
decoding. Episodes run concurrently (a bounded thread pool); the report is
`workload.maze.metrics.build_report`'s, the same as the in-process evaluator's.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload import config
from workload.errors import SkymazeError
from workload.evaluate.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_TOKENS,
    DEFAULT_STYLE,
    EvaluateSettings,
)
from workload.files import write_json_atomic
from workload.maze.conversation import DEFAULT_MAX_TURNS, MazeConversation
from workload.maze.metrics import Episode, build_report
from workload.maze.render import DEFAULT_CELL_PX

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MAX_RETRIES = 4  # the openai client retries 408/409/429/5xx and dropped connections with backoff
REPORT_NAME = "report.json"


class EndpointError(SkymazeError, RuntimeError):
    """The endpoint cannot evaluate this model (unreachable, the model is not served, or a turn is refused): exit 1."""


@dataclass
class PlayedEpisode:
    """One episode: the metrics record and its frames (first frame, then one per turn)."""

    episode: Episode
    frames: list[Any]


def window(messages: list[dict], image_history: int | None) -> list[dict]:
    """The last ``image_history`` user turns of ``messages`` and the replies between them."""
    if image_history is None:
        return messages
    user_at = [i for i, m in enumerate(messages) if m["role"] == "user"]
    start = user_at[-image_history] if len(user_at) > image_history else 0
    return messages[start:]


def _frame(message: dict) -> Any:
    from workload.maze.prompts import data_uri_to_image

    (part,) = [p for p in message["content"] if p["type"] == "image_url"]
    return data_uri_to_image(part["image_url"]["url"])


def play_episode(client: Any, entry: dict, size: int, options: EvaluateSettings, *,
                 reuse_replies: bool = False) -> PlayedEpisode:
    """Play one held-out maze through ``client`` (an ``openai.OpenAI``) until stop or the turn cap.

    A refused or lost request raises `EndpointError` naming the maze, the turn and the server's reason.
    ``reuse_replies``: see `evaluate_endpoint`.
    """
    import openai

    env = MazeConversation(
        env_config={"cell_px": options.cell_px, "prompt_style": options.style},
        extras={
            "seed": entry["seed"],
            "init_state": entry["init_state"],
            "maze_size": size,
            "max_turns": options.max_turns,
        },
    )
    messages, _ = env.init()
    frames = [_frame(messages[0])]
    replies: dict[str, str] = {}
    done = False
    while not done:
        shown = window(messages, options.image_history)
        key = json.dumps(shown) if reuse_replies else ""
        if key in replies:
            reply = replies[key]
        else:
            try:
                response = client.chat.completions.create(
                    model=options.model, messages=shown, max_tokens=options.max_tokens, temperature=0.0
                )
            except openai.APIStatusError as error:  # e.g. 413: the prompt and max_tokens exceed the model's positions
                raise EndpointError(
                    f"the endpoint refused turn {len(frames)} of maze seed {entry['seed']} with {error.status_code}: "
                    f"{_error_message(error)}"
                ) from None
            except openai.APIConnectionError as error:
                raise EndpointError(
                    f"lost the endpoint at turn {len(frames)} of maze seed {entry['seed']}: {error}"
                ) from None
            reply = response.choices[0].message.content or ""
            if reuse_replies:
                replies[key] = reply
        step = env.step(reply)
        done = step["done"]
        messages.append({"role": "assistant", "content": reply})
        messages.extend(step["observations"])
        frames.append(env.maze.render())
    return PlayedEpisode(env.episode(), frames)


def _error_message(error: Any) -> str:
    """The server's own message of an OpenAI-shaped error body (``{"error": {"message"}}``), else the client's."""
    body = error.body if isinstance(error.body, dict) else {}
    detail = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
    return str(detail.get("message") or error.message)


def _check_model(client: Any, endpoint: str, model: str) -> None:
    import openai

    try:
        served = [m.id for m in client.models.list().data]
    except openai.APIConnectionError as error:
        raise EndpointError(f"cannot reach {endpoint} ({str(error).rstrip('.')}); is the server running? "
                            "(--wait-s N waits for one still starting)") from error
    except openai.APIStatusError as error:
        raise EndpointError(f"{endpoint}/models answered {error.status_code}: {error.message}") from error
    if model not in served:
        raise EndpointError(f"{endpoint} does not serve {model!r}; it serves {served}")


WAIT_POLL_S = 1.0  # how often a waiting evaluate asks /v1/models again (a local server starts in about a minute)


def wait_for_model(endpoint: str, model: str, *, timeout_s: float, poll_s: float = WAIT_POLL_S,
                   api_key: str = "EMPTY", on_wait: Callable[[str], None] | None = None) -> float:
    """Poll ``endpoint``'s ``/v1/models`` until it lists ``model``; the seconds waited.

    For a server still starting (connection refused, 503 while Ray Serve deploys) or one that has not
    loaded the adapter yet. ``on_wait(why)`` is called after each unanswered poll. Raises
    :class:`EndpointError` naming the last answer once ``timeout_s`` has passed.
    """
    import json
    import time
    import urllib.error
    import urllib.request

    root = endpoint.rstrip("/")
    url = (root if root.endswith("/v1") else root + "/v1") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(request, timeout=max(poll_s, 1.0)) as answer:
                served = [m.get("id") for m in json.loads(answer.read()).get("data", [])]
            why = f"it serves {served}, not yet {model!r}"
            if model in served:
                return time.monotonic() - started
        except urllib.error.HTTPError as error:
            why = f"it answered {error.code}"
        except (OSError, ValueError) as error:  # refused, reset, timed out, not JSON yet
            why = f"no answer ({getattr(error, 'reason', error)})"
        if time.monotonic() - started >= timeout_s:
            raise EndpointError(f"{url} did not serve {model!r} within {timeout_s:g} s ({why}); is the server "
                                "running? `skymaze serve` prints `serving at URL` when it is ready")
        if on_wait is not None:
            on_wait(why)
        time.sleep(poll_s)


def _picture(played: list[PlayedEpisode], out_dir: Path) -> Path:
    from workload.maze.pictures import episode_strip

    shown = next((p for p in played if p.episode.solved), played[0])
    path = out_dir / f"episode-seed{shown.episode.seed}.png"
    episode_strip(shown.frames, list(shown.episode.actions)).save(path)
    return path


def evaluate_endpoint(
    *,
    endpoint: str,
    model: str,
    set_name: str,
    max_turns: int = DEFAULT_MAX_TURNS,
    style: str = DEFAULT_STYLE,
    image_history: int | None = None,
    cell_px: int = DEFAULT_CELL_PX,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    concurrency: int = DEFAULT_CONCURRENCY,
    limit: int | None = None,
    out_dir: str | Path | None = None,
    api_key: str = "EMPTY",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_episode: Callable[[int, int, int], None] | None = None,
    reuse_replies: bool = False,
) -> dict:
    """Play the frozen set ``set_name`` through ``endpoint`` (``http://host:port`` or ``.../v1``).

    Returns the ``build_report`` dict (plus ``endpoint`` and ``model``). With ``out_dir`` it
    also writes ``report.json`` and ``episode-seed<N>.png`` (a solved episode when there is one).
    ``on_episode(done, total, solved)`` is called as each episode finishes (a progress display).
    ``reuse_replies`` sends a request repeated within an episode (a wall bump, a loop) once and
    replays its reply: exact only for a server whose greedy replies depend on the request alone, which
    the caller must know (the rehearsal does, for its own server; `skymaze evaluate` sends every request).
    The settings are :class:`EvaluateSettings`'s; a bad one raises `workload.config.ConfigError`
    before anything is played.
    """
    import openai

    from workload.maze.heldout import load_set

    options = config.validate_flat(EvaluateSettings, {
        "endpoint": endpoint, "model": model, "set_name": set_name, "max_turns": max_turns, "style": style,
        "image_history": image_history, "cell_px": cell_px, "max_tokens": max_tokens, "concurrency": concurrency,
        "limit": limit}, what="evaluate settings")
    held = load_set(options.set_name)
    entries = list(held.entries)[: options.limit]
    root = options.endpoint.rstrip("/")
    base_url = root if root.endswith("/v1") else root + "/v1"
    client = openai.OpenAI(
        base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=DEFAULT_MAX_RETRIES
    )
    _check_model(client, base_url, options.model)
    played = _play_all(client, entries, held.size, options, on_episode, reuse_replies=reuse_replies)
    report = build_report([p.episode for p in played], max_turns=options.max_turns, set_name=held.name)
    report.update(endpoint=base_url, model=options.model)
    if out_dir is not None:
        _save(report, played, Path(out_dir))
    return report


def _play_all(client, entries: list, size: int, options: EvaluateSettings,
              on_episode: Callable[[int, int, int], None] | None, *, reuse_replies: bool) -> list[PlayedEpisode]:
    """Every episode, ``options.concurrency`` at a time, in the set's order; progress to ``on_episode``."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=options.concurrency) as pool:
        futures = [pool.submit(play_episode, client, e, size, options, reuse_replies=reuse_replies) for e in entries]
        solved = 0
        try:
            for done, future in enumerate(concurrent.futures.as_completed(futures), start=1):
                solved += bool(future.result().episode.solved)
                if on_episode is not None:
                    on_episode(done, len(futures), solved)
        except BaseException:  # one refused episode ends the evaluation: do not play the queued ones
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        return [future.result() for future in futures]  # the set's order, whatever finished first


def _save(report: dict, played: list[PlayedEpisode], out: Path) -> None:
    """``out/report.json`` (atomically) and the picture of one episode, named in the report."""
    out.mkdir(parents=True, exist_ok=True)
    report["picture"] = _picture(played, out).name
    write_json_atomic(out / REPORT_NAME, report)
