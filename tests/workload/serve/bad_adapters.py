"""A corpus of bad LoRA adapters, each made from a good one by one change (tests only)."""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / WEIGHTS)


def _save(folder: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, folder / WEIGHTS)


def _config(folder: Path, **changes) -> None:
    config = json.loads((folder / CONFIG).read_text())
    config.update(changes)
    (folder / CONFIG).write_text(json.dumps(config))


def _rename_to_vision(folder: Path) -> None:
    tensors = _tensors(folder)
    name = next(k for k in tensors if k.endswith("q_proj.lora_A.weight"))
    module = name.removesuffix(".lora_A.weight")
    vision = "base_model.model.model.visual.blocks.0.attn.qkv"
    tensors[f"{vision}.lora_A.weight"] = tensors.pop(f"{module}.lora_A.weight")
    tensors[f"{vision}.lora_B.weight"] = tensors.pop(f"{module}.lora_B.weight")
    _save(folder, tensors)


def _rank(folder: Path, rank: int) -> None:
    import torch

    tensors = _tensors(folder)
    for name, tensor in list(tensors.items()):
        tensors[name] = (
            torch.zeros((rank, tensor.shape[1]))
            if ".lora_A." in name
            else torch.zeros((tensor.shape[0], rank))
        )
    _save(folder, tensors)
    _config(folder, r=rank, lora_alpha=rank)


def _wrong_fan_in(folder: Path) -> None:
    import torch

    tensors = _tensors(folder)
    name = next(k for k in tensors if ".lora_A." in k)
    tensors[name] = torch.zeros((tensors[name].shape[0], tensors[name].shape[1] + 1))
    _save(folder, tensors)


def _drop_b(folder: Path) -> None:
    tensors = _tensors(folder)
    tensors.pop(next(k for k in tensors if ".lora_B." in k))
    _save(folder, tensors)


def _truncate(folder: Path) -> None:
    path = folder / WEIGHTS
    path.write_bytes(path.read_bytes()[:-64])


def _huge_header(folder: Path) -> None:
    path = folder / WEIGHTS
    path.write_bytes(struct.pack("<Q", 2**40) + path.read_bytes()[8:])


def _extra_tensor(folder: Path) -> None:
    import torch

    tensors = _tensors(folder)
    tensors["base_model.model.model.language_model.norm.weight"] = torch.ones(4)
    _save(folder, tensors)


def _rewrite_header(folder: Path, change: Callable[[dict], None]) -> None:
    """Change the safetensors header in place, keeping its length (safetensors pads it with spaces)."""
    path = folder / WEIGHTS
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    change(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= length, "the changed header must not grow"
    path.write_bytes(raw[:8] + text.ljust(length) + raw[8 + length :])


def _overlap(header: dict) -> None:
    """The second of two same-sized tensors points at the first one's bytes."""
    names = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])
    first, second = next(
        (a, b) for a in names for b in names
        if a < b and header[a]["shape"] == header[b]["shape"] and header[a]["dtype"] == header[b]["dtype"]
    )
    header[second]["data_offsets"] = list(header[first]["data_offsets"])


def _sparse_tail(folder: Path, size: int = 2 * 2**30) -> None:
    """A valid file followed by a 2 GiB tail (sparse: it takes no disk)."""
    with (folder / WEIGHTS).open("r+b") as handle:
        handle.truncate(handle.seek(0, 2) + size)


def _without_peft_type(folder: Path) -> None:
    config = json.loads((folder / CONFIG).read_text())
    del config["peft_type"]
    (folder / CONFIG).write_text(json.dumps(config))


def _nan_weights(folder: Path) -> None:
    tensors = _tensors(folder)
    name = next(k for k in sorted(tensors) if ".lora_B." in k)
    tensors[name][0, 0] = float("nan")
    _save(folder, tensors)


# A pattern that backtracks exponentially on a module name of 30+ characters: (a+)+ against "aaa...b".
BACKTRACKING_PATTERN = "(.*a+)+$"

BAD_ADAPTERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "pissa": (lambda f: _config(f, init_lora_weights="pissa"), "init_lora_weights"),
    "olora": (lambda f: _config(f, init_lora_weights="olora"), "init_lora_weights"),
    "loftq": (lambda f: _config(f, init_lora_weights="loftq"), "init_lora_weights"),
    "vision-tower": (_rename_to_vision, "visual"),
    "rank-256": (lambda f: _rank(f, 256), "r"),
    "rank-pattern-128": (lambda f: _config(f, rank_pattern={"q_proj": 128}), "rank_pattern.q_proj"),
    "header-rank-over-config": (lambda f: (_rank(f, 128), _config(f, r=8)), "lora_A"),
    "other-base-shapes": (_wrong_fan_in, "self_attn"),
    "a-without-b": (_drop_b, "self_attn"),
    "truncated-weights": (_truncate, ""),
    "header-length-lies": (_huge_header, WEIGHTS),
    "non-lora-tensor": (_extra_tensor, "norm.weight"),
    "dora": (lambda f: _config(f, use_dora=True), "use_dora"),
    "modules-to-save": (lambda f: _config(f, modules_to_save=["lm_head"]), "modules_to_save"),
    "bias-all": (lambda f: _config(f, bias="all"), "bias"),
    "not-lora": (lambda f: _config(f, peft_type="IA3"), "peft_type"),
    "config-not-json": (lambda f: (f / CONFIG).write_text("{'r': 8"), CONFIG),
    "config-nan-alpha": (lambda f: (f / CONFIG).write_text('{"r": 8, "lora_alpha": NaN}'), CONFIG),
    "no-weights": (lambda f: (f / WEIGHTS).unlink(), WEIGHTS),
    "config-rank-differs": (lambda f: (_rank(f, 16), _config(f, r=8)), "r"),
    "rank-pattern-differs": (lambda f: _config(f, rank_pattern={"q_proj": 4}), "rank_pattern.q_proj"),
    "overlapping-offsets": (lambda f: _rewrite_header(f, _overlap), "invalid offset"),
    "trailing-tail": (_sparse_tail, "file not fully covered"),
    "no-peft-type": (_without_peft_type, "peft_type"),
    "regex-target-modules": (lambda f: _config(f, target_modules=BACKTRACKING_PATTERN), "target_modules"),
    "regex-rank-pattern": (lambda f: _config(f, rank_pattern={BACKTRACKING_PATTERN: 8}), "rank_pattern"),
    "regex-alpha-pattern": (lambda f: _config(f, alpha_pattern={BACKTRACKING_PATTERN: 8}), "alpha_pattern"),
}
# Refused when the server loads them (they need the base model or the tensors' values), not by promote.
ENGINE_ONLY = {"nan-weights": (_nan_weights, "lora_B")}


def write_bad_adapters(good: Path, root: Path, names: list[str] | None = None) -> dict[str, Path]:
    """Copies of the adapter ``good`` under ``root``, one a bad adapter of ``BAD_ADAPTERS``."""
    folders = {}
    for name in names or [*BAD_ADAPTERS, *ENGINE_ONLY]:
        folder = root / name
        shutil.copytree(good, folder)
        (BAD_ADAPTERS | ENGINE_ONLY)[name][0](folder)
        folders[name] = folder
    return folders
