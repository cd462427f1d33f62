"""A bad adapter never touches the base model: every refusal leaves base outputs bit-identical.

The corpus holds what a careless or hostile adapter folder can carry: initialisations that
rewrite the base (PiSSA, OLoRA), LoRA on the vision tower, ranks over the cap, shapes of
another base, truncated or malformed files, features vLLM does not serve.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workload.serve.bad_adapters import BAD_ADAPTERS, ENGINE_ONLY, write_bad_adapters
from workload.serving_rules import AdapterRuleError, inspect_adapter, served_lora_config


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from workload.serve.engine import GenerationEngine

    return GenerationEngine(tiny_model_dir, torch_threads=1)


def _request():
    from workload.serve.protocol import parse_chat_request

    body = {"model": "tiny", "messages": [{"role": "user", "content": "go left"}], "max_tokens": 6, "temperature": 0}
    return parse_chat_request(json.dumps(body).encode())


@pytest.fixture(scope="module")
def bad_adapters(serve_adapters_dir, tmp_path_factory) -> dict[str, Path]:
    return write_bad_adapters(serve_adapters_dir / "a0", tmp_path_factory.mktemp("bad-adapters"))


def _base_state(engine) -> dict:
    return {k: v.clone() for k, v in engine._model.state_dict().items() if "lora_" not in k}


@pytest.mark.parametrize("name", [*BAD_ADAPTERS, *ENGINE_ONLY])
def test_bad_adapter_is_refused_and_the_base_is_bit_identical(engine, bad_adapters, name):
    import torch

    request = _request()
    before_text = engine.generate(request)
    before_state = _base_state(engine)
    with pytest.raises(AdapterRuleError) as caught:
        engine.load_adapter(name, bad_adapters[name])
    assert (BAD_ADAPTERS | ENGINE_ONLY)[name][1] in caught.value.field + str(caught.value)
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
        shapes = bad_adapters["other-base-shapes"]  # passes every check that does not know the base
        engine._attach("shapes", str(shapes), served_lora_config(inspect_adapter(shapes)))  # skips the base check
    assert not engine._has_lora_layers() and engine.unhealthy is None
    assert engine.generate(request) == before_text
    assert all(torch.equal(v, _base_state(engine)[k]) for k, v in before_state.items())
    a0 = serve_adapters_dir / "a0"  # a good adapter still loads and changes the answer
    assert engine.generate(request, adapter="a0", folder=a0) != before_text
    assert engine.generate(request) == before_text
    engine.unload_adapter("a0")


def test_promote_applies_the_same_rules(bad_adapters, serve_adapters_dir):
    """`inspect_adapter` without a base (as promote runs it) refuses all but the base-specific cases."""
    inspect_adapter(serve_adapters_dir / "a0")
    base_specific = {"other-base-shapes", *ENGINE_ONLY}
    for name, folder in bad_adapters.items():
        if name in base_specific:
            continue
        with pytest.raises(AdapterRuleError):
            inspect_adapter(folder)


def test_modules_without_tensors_get_no_lora_layer(engine, serve_adapters_dir, tmp_path):
    """target_modules naming vision modules the file holds no tensors for: peft adds nothing there
    (with init_lora_weights=false it would add random LoRA to the vision tower)."""
    import shutil

    from peft.tuners.lora import LoraLayer

    folder = tmp_path / "vision-targets"
    shutil.copytree(serve_adapters_dir / "a0", folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["init_lora_weights"] is False
    config["target_modules"] = [*config["target_modules"], "qkv", "linear_fc1"]  # vision-tower module names
    (folder / "adapter_config.json").write_text(json.dumps(config))
    engine.load_adapter("vision-targets", folder)
    try:
        wrapped = [name for name, module in engine._model.named_modules() if isinstance(module, LoraLayer)]
        assert wrapped and all(".language_model." in name for name in wrapped), wrapped
    finally:
        engine.unload_adapter("vision-targets")
