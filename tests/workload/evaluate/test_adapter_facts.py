"""Adapter facts: read from real adapter files, settle evaluation settings, refuse contradictions."""

from __future__ import annotations

import json

import pytest

from workload.evaluate.adapter_facts import (
    AdapterFolderError,
    AdapterMismatch,
    read_adapter_facts,
    same_base,
    settle,
)

DEFAULTS = {"style": "visgym", "cell_px": 25, "image_history": None, "max_tokens": 1024, "max_turns": 15,
            "set_name": "easy-64"}


@pytest.fixture
def rehearsal_adapter(tmp_path):
    base = tmp_path / "models" / "sft"
    base.mkdir(parents=True)
    folder = tmp_path / "exports" / "global_step_6" / "policy"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base), "r": 16}))
    (folder / "trainer_config.json").write_text(json.dumps({
        "environment": {"heldout_set": "rehearsal-7x7-64", "maze": {"cell_px": 8, "size": 7}},
        "generator": {"image_history": 1, "max_turns": 15, "eval_sampling_params": {"max_generate_length": 2}},
    }))
    return folder, base


def test_a_rehearsal_adapter_sets_every_evaluation_setting(rehearsal_adapter):
    folder, base = rehearsal_adapter
    facts = read_adapter_facts(folder)
    assert facts.base_model == str(base)
    assert settle(facts, {}, DEFAULTS) == {"style": "compact", "cell_px": 8, "image_history": 1, "max_tokens": 2,
                                           "max_turns": 15, "set_name": "rehearsal-7x7-64"}
    assert settle(facts, {"cell_px": 8, "max_tokens": 2}, DEFAULTS)["cell_px"] == 8  # agreeing flags are fine


def test_a_contradicting_flag_is_refused_naming_flag_values_and_source(rehearsal_adapter):
    folder, _ = rehearsal_adapter
    with pytest.raises(AdapterMismatch) as caught:
        settle(read_adapter_facts(folder), {"cell_px": 25, "style": "visgym"}, DEFAULTS)
    message = str(caught.value)
    assert "--style visgym but the adapter in" in message and "trained with compact" in message
    assert "--cell-px 25 but the adapter" in message and "(trainer_config.json environment.maze.cell_px)" in message


def test_an_adapter_without_trainer_config_keeps_flags_and_defaults(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen3-VL-8B"}))
    facts = read_adapter_facts(tmp_path)
    assert settle(facts, {"cell_px": 30}, DEFAULTS) == {**DEFAULTS, "cell_px": 30}
    with pytest.raises(ValueError, match=r"no adapter_config\.json there"):
        read_adapter_facts(tmp_path / "missing")
    (tmp_path / "trainer_config.json").write_text("generator: {max_turns: 15}")
    with pytest.raises(AdapterFolderError, match=r"trainer_config\.json is not JSON \(Expecting value: line 1"):
        read_adapter_facts(tmp_path)


def test_same_base_compares_folders_by_path_and_ids_by_name(rehearsal_adapter, tmp_path):
    _, base = rehearsal_adapter
    other = tmp_path / "models" / "base"
    other.mkdir()
    assert same_base(str(base), base) and not same_base(str(base), other)
    assert same_base("Qwen/Qwen3-VL-8B", "Qwen/Qwen3-VL-8B") and not same_base("Qwen/Qwen3-VL-8B", "Qwen/Qwen3-VL-2B")
    assert same_base(None, other)


def test_a_skymaze_endpoint_states_how_each_adapter_was_trained(rehearsal_adapter):
    """A bare `skymaze evaluate --endpoint URL --model ID` plays the adapter as it was trained (GET /v1/models)."""
    import http.server

    from tests.loopback_http import serve_in_thread
    from workload.evaluate.adapter_facts import endpoint_facts
    from workload.serving_rules import TRAINER_CONFIG_FIELD

    folder, _ = rehearsal_adapter
    trainer = json.loads((folder / "trainer_config.json").read_text())
    listing = json.dumps({"object": "list", "data": [
        {"id": "maze-sft", "object": "model"},
        {"id": "maze-sft:selected", "object": "model", TRAINER_CONFIG_FIELD: trainer}]}).encode()

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(listing)))
            self.end_headers()
            self.wfile.write(listing)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    serve_in_thread(server)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        stated = endpoint_facts(url, "maze-sft:selected")
        assert stated.settings == read_adapter_facts(folder).settings  # what --adapter FOLDER would set
        assert stated.settings["cell_px"] == 8 and stated.settings["style"] == "compact"
        assert endpoint_facts(url, "maze-sft") is None  # the base model states nothing: the defaults apply
    finally:
        server.shutdown()
        server.server_close()  # closed, not only stopped: a listening socket would take the request and never answer
    assert endpoint_facts(url, "maze-sft:selected") is None  # unreachable: evaluate's own check says so
