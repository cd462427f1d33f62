"""Held-out evaluation through the local OpenAI endpoint (real Ray Serve, real HTTP)."""

from __future__ import annotations

import json

import pytest

from workload.evaluate.endpoint import EndpointError, PlayOptions, evaluate_endpoint, window

# The rehearsal's play settings: 7x7 mazes, 8 px cells, compact prompt, short replies.
REHEARSAL = {"set_name": "rehearsal-7x7-64", "style": "compact", "cell_px": 8, "max_tokens": 4}


def _messages(turns: int) -> list[dict]:
    out = []
    for t in range(turns):
        out.append({"role": "user", "content": f"u{t}"})
        if t < turns - 1:
            out.append({"role": "assistant", "content": f"a{t}"})
    return out


def test_window_keeps_the_last_user_turns_and_replies_between():
    messages = _messages(4)
    assert window(messages, None) == messages
    assert [m["content"] for m in window(messages, 2)] == ["u2", "a2", "u3"]
    assert [m["content"] for m in window(messages, 1)] == ["u3"]
    assert window(messages, 9) == messages


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_turns": 0}, "max_turns must be >= 1"),
        ({"image_history": 0}, "image_history must be >= 1"),
        ({"max_tokens": 0}, "max_tokens must be >= 1"),
        ({"style": "chatty"}, "prompt style must be one of"),
    ],
)
def test_play_options_are_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PlayOptions("tiny", **kwargs)


@pytest.mark.slow
@pytest.mark.e2e
def test_plays_the_heldout_set_through_the_endpoint(serve_endpoints, tmp_path):
    server = serve_endpoints.folder
    report = evaluate_endpoint(
        endpoint=server.url,
        model="tiny:a1",
        max_turns=3,
        image_history=2,
        concurrency=2,
        limit=3,
        out_dir=tmp_path,
        **REHEARSAL,
    )
    assert (report["set"], report["total"], report["max_turns"], report["model"]) == (
        "rehearsal-7x7-64",
        3,
        3,
        "tiny:a1",
    )
    assert 0.0 <= report["strict_pass_at_1"] <= 1.0 and len(report["ci95"]) == 2
    for episode in report["episodes"]:
        assert 1 <= episode["turns"] <= 3
        assert len(episode["actions"]) == episode["turns"]
    assert report["parse_failures"] == sum(e["parse_failures"] for e in report["episodes"])
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert (tmp_path / report["picture"]).stat().st_size > 0
    # Greedy decoding over HTTP is deterministic: the same set plays the same episodes.
    again = evaluate_endpoint(
        endpoint=server.url + "/v1", model="tiny:a1", max_turns=3, image_history=2, limit=3, **REHEARSAL
    )
    assert again["episodes"] == report["episodes"]


@pytest.mark.slow
def test_unserved_model_and_unreachable_endpoint_fail_early(serve_endpoints):
    from workload.serve.local import free_port

    with pytest.raises(EndpointError, match=r"does not serve 'tiny:missing'"):
        evaluate_endpoint(endpoint=serve_endpoints.folder.url, model="tiny:missing", limit=1, **REHEARSAL)
    with pytest.raises(EndpointError, match="cannot reach"):
        evaluate_endpoint(
            endpoint=f"http://127.0.0.1:{free_port()}", model="tiny", limit=1, timeout_s=5, **REHEARSAL
        )
