"""A bad adapter never touches the base model: every refusal leaves base outputs bit-identical.

The corpus holds what a careless or hostile adapter folder can carry: initialisations that
rewrite the base (PiSSA, OLoRA), LoRA on the vision tower, ranks over the cap, shapes of
another base, truncated or malformed files, features vLLM does not serve.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from workload.serving_rules import AdapterRuleError, inspect_adapter

WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from workload.serve.engine import GenerationEngine

    return GenerationEngine(tiny_model_dir, torch_threads=1)


def _request():
    from workload.serve.protocol import RequestLimits, parse_chat_request

    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "go left"}],
        "max_tokens": 6,
        "temperature": 0,
    }
    return parse_chat_request(json.dumps(body).encode(), limits=RequestLimits())


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
}


@pytest.fixture(scope="module")
def bad_adapters(serve_adapters_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-adapters")
    folders = {}
    for name, (corrupt, _) in BAD_ADAPTERS.items():
        folder = root / name
        shutil.copytree(serve_adapters_dir / "a0", folder)
        corrupt(folder)
        folders[name] = folder
    return folders


def _base_state(engine) -> dict:
    return {k: v.clone() for k, v in engine._model.state_dict().items() if "lora_" not in k}


@pytest.mark.parametrize("name", list(BAD_ADAPTERS))
def test_bad_adapter_is_refused_and_the_base_is_bit_identical(engine, bad_adapters, name):
    import torch

    request = _request()
    before_text = engine.generate(request)
    before_state = _base_state(engine)
    with pytest.raises(AdapterRuleError) as caught:
        engine.load_adapter(name, bad_adapters[name])
    assert BAD_ADAPTERS[name][1] in caught.value.field + str(caught.value)
    assert str(bad_adapters[name]) not in str(caught.value)  # no server paths in what clients see
    assert engine.generate(request) == before_text
    after_state = _base_state(engine)
    assert before_state.keys() == after_state.keys()
    assert all(torch.equal(before_state[k], after_state[k]) for k in before_state)
    assert name not in engine.loaded_adapters() and engine.unhealthy is None


def test_a_failure_inside_peft_is_undone(engine, bad_adapters, serve_adapters_dir):
    """Past the checks, peft itself fails (a shape mismatch): its LoRA layers are removed again."""
    import torch

    request = _request()
    before_text, before_state = engine.generate(request), _base_state(engine)
    with pytest.raises(RuntimeError, match="size mismatch"):
        engine._attach("shapes", str(bad_adapters["other-base-shapes"]))  # skips the checks on purpose
    assert not engine._has_lora_layers() and engine.unhealthy is None
    assert engine.generate(request) == before_text
    assert all(torch.equal(v, _base_state(engine)[k]) for k, v in before_state.items())
    engine.load_adapter("a0", serve_adapters_dir / "a0")  # a good adapter still loads and changes the answer
    assert engine.generate(request, adapter="a0") != before_text
    assert engine.generate(request) == before_text
    engine.unload_adapter("a0")


def test_promote_applies_the_same_rules(bad_adapters, serve_adapters_dir):
    """`inspect_adapter` without a base (as promote runs it) refuses all but the base-specific cases."""
    inspect_adapter(serve_adapters_dir / "a0")
    base_specific = {"other-base-shapes"}
    for name, folder in bad_adapters.items():
        if name in base_specific:
            continue
        with pytest.raises(AdapterRuleError):
            inspect_adapter(folder)
