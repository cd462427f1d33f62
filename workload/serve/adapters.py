"""The adapters folder: one PEFT LoRA sub-folder an adapter, named by the ``ADAPTER`` of ``BASE:ADAPTER``.

Standard library only: ``skymaze serve`` lists what it will not serve before Ray starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workload.serving_rules import ADAPTER_CONFIG, DEFAULT_MAX_LORA_RANK, AdapterRuleError, check_servable

# The recipe a rehearsal adapter was trained with (its exports carry it); GET /v1/models states it.
TRAINER_CONFIG = "trainer_config.json"


class AdapterNotFoundError(LookupError):
    """The adapters folder has no adapter of that name (no ``adapter_config.json`` there)."""


def scan(folder: Path, served_model: Path) -> tuple[list[str], dict[str, str]]:
    """The names of the adapters in ``folder`` that the serving rules accept for ``served_model``, and
    ``{name: why}`` of the others (they are not listed, and a request for one answers 400)."""
    servable, refused = [], {}
    for config in sorted(folder.glob(f"*/{ADAPTER_CONFIG}")):
        try:
            check_servable(config.parent, served_model=served_model, max_lora_rank=DEFAULT_MAX_LORA_RANK)
        except (AdapterRuleError, OSError) as error:
            refused[config.parent.name] = str(error)
        else:
            servable.append(config.parent.name)
    return servable, refused


def fingerprint(adapter: Path) -> tuple:
    """What changes when the adapter's files change (ctime too: a rewrite in place that keeps size and
    mtime still moves it); `AdapterNotFoundError` once it is gone."""
    try:
        stats = [(p.name, p.stat()) for p in sorted(adapter.iterdir()) if p.is_file()]
    except FileNotFoundError as exc:
        raise AdapterNotFoundError(adapter.name) from exc
    if ADAPTER_CONFIG not in {name for name, _ in stats}:
        raise AdapterNotFoundError(adapter.name)
    return tuple((name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) for name, st in stats)


def trainer_config(adapter: Path) -> dict[str, Any] | None:
    """The recipe the adapter was trained with (its trainer_config.json), or None when it has none."""
    path = adapter / TRAINER_CONFIG
    return json.loads(path.read_text()) if path.is_file() else None
