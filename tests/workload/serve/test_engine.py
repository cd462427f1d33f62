"""The transformers + peft engine in process: one base model, adapters loaded, evicted, reloaded."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from workload.maze import Maze2D
from workload.maze.prompts import build_user_message
from workload.serve.protocol import ApiError, parse_chat_request


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from workload.serve.engine import GenerationEngine

    return GenerationEngine(tiny_model_dir, max_adapters=2, torch_threads=1)


def _request(**overrides):
    frame, _ = Maze2D(7, cell_px=10).reset(seed=1)
    body = {"model": "tiny", "messages": [build_user_message(style="compact", frame=frame, first=True, size=7)],
            "max_tokens": 8, "temperature": 0, **overrides}
    return parse_chat_request(json.dumps(body).encode())


def test_adapters_change_the_answer_and_the_least_recently_used_is_evicted(engine, serve_adapters_dir):
    request = _request()
    base = engine.generate(request).text
    answers = {name: engine.generate(request, adapter=name, folder=serve_adapters_dir / name).text
               for name in ("a0", "a1", "a2")}
    assert len({base, *answers.values()}) == 4
    assert engine.loaded_adapters() == ["a1", "a2"]  # two at a time: a0, the least recently used, went first
    assert engine.generate(request).text == base  # the base with adapters loaded: their layers are off
    count = engine.load_count["a0"]
    assert engine.generate(request, adapter="a0", folder=serve_adapters_dir / "a0").text == answers["a0"]
    assert (engine.load_count["a0"], engine.loaded_adapters()) == (count + 1, ["a2", "a0"])
    for name in ("a0", "a2"):
        engine.unload_adapter(name)
    assert engine.loaded_adapters() == [] and engine.generate(request).text == base


def test_an_adapter_whose_files_change_is_reloaded_and_a_gone_one_is_not_found(engine, serve_adapters_dir, tmp_path):
    from workload.serve.adapters import AdapterNotFoundError

    request, folder = _request(), tmp_path / "mutable"
    shutil.copytree(serve_adapters_dir / "a0", folder)
    as_a0 = engine.generate(request, adapter="mutable", folder=folder).text
    shutil.rmtree(folder)
    shutil.copytree(serve_adapters_dir / "a1", folder)
    assert engine.generate(request, adapter="mutable", folder=folder).text != as_a0
    assert engine.generate(request, adapter="a1", folder=serve_adapters_dir / "a1").text == \
        engine.generate(request, adapter="mutable", folder=folder).text
    shutil.rmtree(folder)
    with pytest.raises(AdapterNotFoundError):
        engine.generate(request, adapter="mutable", folder=folder)
    for name in engine.loaded_adapters():
        engine.unload_adapter(name)


def test_token_accounting_stop_strings_and_seeded_sampling(engine):
    request = _request(max_tokens=6)
    completion = engine.generate(request)
    assert completion.completion_tokens <= 6 and completion.prompt_tokens > 0
    assert completion.finish_reason == ("length" if completion.completion_tokens == 6 else "stop")
    if len(completion.text) > 1:
        cut = engine.generate(dataclasses.replace(request, stop=(completion.text[1],)))
        assert cut.text == completion.text[: completion.text.index(completion.text[1])]
        assert cut.finish_reason == "stop"
    sampled = dataclasses.replace(request, temperature=1.0, seed=11, max_tokens=12)
    assert engine.generate(sampled).text == engine.generate(sampled).text


def test_a_default_reply_length_is_cut_to_the_context_left_and_an_explicit_one_is_refused(engine):
    def request(words: int, **fields):
        body = {"model": "tiny", "messages": [{"role": "user", "content": "go " * words}], "temperature": 0, **fields}
        return parse_chat_request(json.dumps(body).encode())

    def prompt_tokens(words: int) -> int:
        return engine._inputs(request(words, max_tokens=1))[0]["input_ids"].shape[1]

    # Words for a prompt 20 positions short of the model's end (the tokens grow linearly with the words).
    words = 100 + (engine.max_positions - 20 - prompt_tokens(100)) * 100 // (prompt_tokens(200) - prompt_tokens(100))
    near_full = request(words)
    assert near_full.max_tokens_defaulted
    completion = engine.generate(near_full)
    assert completion.prompt_tokens + completion.completion_tokens <= engine.max_positions
    assert completion.completion_tokens < near_full.max_tokens
    with pytest.raises(ApiError, match="exceeds the model's 2048 positions") as caught:
        engine.generate(request(words, max_tokens=near_full.max_tokens))
    assert (caught.value.status, caught.value.param) == (400, "max_tokens")
