"""The OpenAI endpoint: `skymaze serve` on a real local Ray Serve (127.0.0.1), through real HTTP and the
official openai client."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

import openai
import pytest

from tests.workload.serve.fixtures import LISTED_REFUSED, RECIPE, UNLISTED
from workload.maze import Maze2D
from workload.maze.prompts import build_user_message
from workload.serving_rules import TRAINER_CONFIG_FIELD

pytestmark = pytest.mark.slow


def _maze_turn() -> list[dict]:
    frame, _ = Maze2D(7, cell_px=10).reset(seed=3)
    return [build_user_message(style="compact", frame=frame, first=True, size=7)]


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _complete(server, model: str, **kw) -> str:
    kw = {"max_tokens": 8, "temperature": 0, **kw}
    return _client(server).chat.completions.create(model=model, messages=_maze_turn(), **kw).choices[0].message.content


def _request(server, path: str, body: bytes | None = None, method: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(server.url + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_lists_the_base_and_the_adapters_it_serves_with_their_recipes(serve_endpoint):
    models = {m.id: m for m in _client(serve_endpoint).models.list().data}
    assert list(models) == ["tiny", "tiny:a0", "tiny:a1", "tiny:a2", f"tiny:{LISTED_REFUSED}"]  # not UNLISTED
    assert getattr(models["tiny:a2"], TRAINER_CONFIG_FIELD) == RECIPE
    assert not hasattr(models["tiny:a1"], TRAINER_CONFIG_FIELD)


def test_base_and_adapters_answer_differently_and_the_same_again_after_eviction(serve_endpoint):
    first = {model: _complete(serve_endpoint, model) for model in ("tiny", "tiny:a0", "tiny:a1", "tiny:a2")}
    assert len(set(first.values())) == 4 and all(first.values()), first
    # Two adapters at a time: a0 was evicted by a2 and is reloaded; greedy decoding repeats itself.
    assert {model: _complete(serve_endpoint, model) for model in first} == first


def test_sampled_decoding_is_seeded_and_max_tokens_is_honoured(serve_endpoint):
    first = _complete(serve_endpoint, "tiny:a1", temperature=1.0, seed=7, max_tokens=12)
    assert _complete(serve_endpoint, "tiny:a1", temperature=1.0, seed=7, max_tokens=12) == first
    assert len({_complete(serve_endpoint, "tiny:a1", temperature=1.5, seed=s, max_tokens=12) for s in range(4)}) > 1
    reply = _client(serve_endpoint).chat.completions.create(model="tiny", messages=_maze_turn(), max_tokens=3,
                                                            temperature=0)
    assert reply.usage.completion_tokens <= 3 and reply.choices[0].finish_reason in {"stop", "length"}


@pytest.mark.parametrize(
    ("model", "status", "code"),
    [
        ("tiny:missing", 404, "model_not_found"),
        ("other-base", 404, "model_not_found"),
        ("tiny:../a0", 400, "invalid_adapter_name"),
        (f"tiny:{UNLISTED}", 400, "invalid_adapter"),
        (f"tiny:{LISTED_REFUSED}", 400, "invalid_adapter"),
    ],
)
def test_unknown_unsafe_and_refused_models_get_openai_errors_and_the_base_is_unchanged(serve_endpoint, model,
                                                                                          status, code):
    base = _complete(serve_endpoint, "tiny")
    with pytest.raises(openai.APIStatusError) as caught:
        _complete(serve_endpoint, model)
    assert (caught.value.status_code, caught.value.body["code"]) == (status, code)
    assert str(serve_endpoint.adapters_dir) not in caught.value.body["message"]  # no server paths
    assert _complete(serve_endpoint, "tiny") == base


def test_an_adapter_changed_on_disk_is_reloaded_and_a_deleted_one_is_not_found(serve_endpoint):
    folder, adapters = serve_endpoint.adapters_dir / "mutable", serve_endpoint.adapters_dir
    shutil.copytree(adapters / "a0", folder)
    try:
        assert _complete(serve_endpoint, "tiny:mutable") == _complete(serve_endpoint, "tiny:a0")
        staging = adapters / ".mutable-new"
        shutil.copytree(adapters / "a1", staging)
        shutil.rmtree(folder)
        staging.rename(folder)
        assert _complete(serve_endpoint, "tiny:mutable") == _complete(serve_endpoint, "tiny:a1")
    finally:
        shutil.rmtree(folder)
    with pytest.raises(openai.NotFoundError) as caught:
        _complete(serve_endpoint, "tiny:mutable")
    assert caught.value.body["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (json.dumps({"model": "tiny"}).encode(), 400, "messages"),
        (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]}).encode(),
         400, "messages[0].content[0].image_url"),
        (json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**6}).encode(),
         400, "max_tokens"),  # over the model's positions
    ],
)
def test_malformed_requests_get_openai_errors_naming_the_field(serve_endpoint, body, status, param):
    code, payload = _request(serve_endpoint, "/v1/chat/completions", body)
    assert (code, set(payload["error"]), payload["error"]["param"]) == (status, {"message", "type", "param", "code"},
                                                                          param)


@pytest.mark.parametrize(("method", "path", "status"), [("POST", "/v1/completions", 404),
                                                        ("GET", "/v1/chat/completions", 405)])
def test_other_routes_and_methods_answer_in_openai_shape(serve_endpoint, method, path, status):
    code, payload = _request(serve_endpoint, path, b"{}" if method == "POST" else None, method)
    assert (code, payload["error"]["code"]) == (status, "unknown_url")
    assert "serves GET /v1/models and POST /v1/chat/completions" in payload["error"]["message"]
