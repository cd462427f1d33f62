"""What a trained LoRA adapter knows about itself, and the evaluation settings that must match it.

An adapter folder holds ``adapter_config.json`` (PEFT: ``base_model_name_or_path``) and, when the
rehearsal trained it, ``trainer_config.json`` (the recipe it was trained with: frame size, image
history, reply length, turn cap, held-out set). An evaluation that plays with other settings
scores near zero without any error (measured: 11/64 with the adapter's settings, 0/64 without),
so each setting is taken from the adapter, and an explicit contradicting value is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload.errors import UsageError

TRAINER_CONFIG = "trainer_config.json"
ADAPTER_CONFIG = "adapter_config.json"
REHEARSAL_STYLE = "compact"
"""The rehearsal's policy always prompts in the compact style (workload/local/policy.py)."""

# Evaluation option -> (where in trainer_config.json, the flag that sets it)
_SOURCES = {
    "style": ("(rehearsal adapters use the compact prompt)", "--style"),
    "max_turns": ("generator.max_turns", "--max-turns"),
    "image_history": ("generator.image_history", "--image-history"),
    "cell_px": ("environment.maze.cell_px", "--cell-px"),
    "max_tokens": ("generator.eval_sampling_params.max_generate_length", "--max-tokens"),
    "set_name": ("environment.heldout_set", "--heldout"),
}
ADAPTER_SETTINGS = tuple(_SOURCES)
"""The evaluation settings an adapter trained by the rehearsal sets itself."""


class AdapterMismatch(UsageError):
    """An explicit setting contradicts what the adapter was trained with (exit 2); the message names both."""


class AdapterFolderError(UsageError):
    """``--adapter`` names no readable PEFT adapter folder (exit 2)."""


@dataclass(frozen=True)
class AdapterFacts:
    folder: Path | str  # the adapter's folder, or the endpoint URL that described it
    base_model: str | None
    settings: dict[str, Any]  # evaluation option name -> the adapter's value (only those it knows)


def _dig(data: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def read_adapter_facts(folder: str | Path) -> AdapterFacts:
    """Read ``folder``'s adapter_config.json (required) and trainer_config.json (when present); a missing or
    unreadable one raises :class:`AdapterFolderError`."""
    path = Path(folder)
    config_path = path / ADAPTER_CONFIG
    if not config_path.is_file():
        raise AdapterFolderError(f"--adapter {path}: no {ADAPTER_CONFIG} there; pass the folder of a PEFT adapter "
                                 "(exports/global_step_N/policy or a promoted adapter)")
    base = _read_json(config_path).get("base_model_name_or_path")
    trainer_path = path / TRAINER_CONFIG
    trainer = _read_json(trainer_path) if trainer_path.is_file() else None
    return AdapterFacts(folder=path, base_model=base, settings=settings_of(trainer))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except ValueError as err:  # not JSON, or not UTF-8 text
        raise AdapterFolderError(f"--adapter {path.parent}: {path.name} is not JSON ({err}); export the adapter "
                                 "again, or pass another folder") from None


def settings_of(trainer: dict | None) -> dict[str, Any]:
    """The evaluation settings a rehearsal adapter's trainer_config.json fixes (none without one)."""
    if not trainer:
        return {}
    settings: dict[str, Any] = {"style": REHEARSAL_STYLE}
    for option, (key, _) in _SOURCES.items():
        value = _dig(trainer, key)
        if value is not None and option != "style":
            settings[option] = value
    return settings


def endpoint_facts(endpoint: str, model: str, *, api_key: str = "EMPTY", timeout_s: float = 30.0) -> AdapterFacts | None:
    """What ``endpoint``'s ``GET /v1/models`` states about ``model``'s training (its recipe), or None.

    A skymaze endpoint lists each adapter's trainer_config.json (``TRAINER_CONFIG_FIELD``); another
    endpoint (vLLM's) states nothing, and the defaults, the cluster recipe's, apply.
    """
    import urllib.request

    from workload.serving_rules import TRAINER_CONFIG_FIELD

    root = endpoint.rstrip("/")
    url = (root if root.endswith("/v1") else root + "/v1") + "/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            listed = json.loads(answer.read()).get("data", [])
    except (OSError, ValueError):
        return None  # unreachable or not JSON: the evaluation's own check says so in one line
    entry = next((m for m in listed if isinstance(m, dict) and m.get("id") == model), None)
    trainer = entry.get(TRAINER_CONFIG_FIELD) if entry else None
    if not isinstance(trainer, dict):
        return None
    return AdapterFacts(folder=url, base_model=None, settings=settings_of(trainer))


def settle(facts: AdapterFacts, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The evaluation settings: the adapter's where it knows them, else ``given``, else ``defaults``.

    ``given`` holds what the user passed explicitly (None: not passed). A passed value that differs
    from the adapter's raises :class:`AdapterMismatch` naming the flag, both values and the source.
    """
    settled = {}
    problems = []
    for option, default in defaults.items():
        explicit = given.get(option)
        known = facts.settings.get(option)
        if known is not None and explicit is not None and explicit != known:
            key, flag = _SOURCES[option]
            problems.append(f"{flag} {explicit} but the adapter in {facts.folder} was trained with {known} "
                            f"({TRAINER_CONFIG} {key}); drop {flag} to use the adapter's value")
        settled[option] = known if known is not None else (explicit if explicit is not None else default)
    if problems:
        raise AdapterMismatch("; ".join(problems))
    return settled


def same_base(adapter_base: str | None, served_model: str | Path) -> bool:
    """Whether the adapter was trained on ``served_model`` (a folder or a hub id); unknown bases pass."""
    if not adapter_base:
        return True
    served = Path(served_model)
    trained = Path(adapter_base)
    if served.exists() and trained.exists():
        return served.resolve() == trained.resolve()
    return str(adapter_base).rstrip("/") == str(served_model).rstrip("/")
