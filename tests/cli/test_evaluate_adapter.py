"""`skymaze evaluate --adapter` and serve's refusals, against a real loopback HTTP endpoint and real files."""

from __future__ import annotations

import json
import re
import socket

import pytest
from typer.testing import CliRunner

from tests.workload.evaluate.test_endpoint import solver_endpoint  # noqa: F401 - fixture
from workload.cli.main import app

runner = CliRunner()
SCRIPTED = ["--model", "scripted", "--limit", "3", "--concurrency", "1"]


def _adapter(folder, base: str):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "r": 16}))
    (folder / "trainer_config.json").write_text(json.dumps({
        "environment": {"heldout_set": "rehearsal-7x7-64", "maze": {"cell_px": 8, "size": 7}},
        "generator": {"image_history": 1, "max_turns": 15, "eval_sampling_params": {"max_generate_length": 2}},
    }))
    return folder


def test_the_adapter_sets_the_play_settings_progress_goes_to_stderr_and_the_hint_keeps_them(
        solver_endpoint, tmp_path):  # noqa: F811
    url, handler = solver_endpoint
    adapter = _adapter(tmp_path / "adapters" / "maze-rehearsal", str(tmp_path / "sft"))
    result = runner.invoke(app, ["evaluate", "--endpoint", url, *SCRIPTED, "--adapter", str(adapter)])
    assert result.exit_code == 0, result.output
    assert {request["max_tokens"] for request in handler.requests} == {2}  # the adapter's reply length
    assert "rehearsal-7x7-64" in result.stdout
    assert "scripted on rehearsal-7x7-64: 3/3 played, " in result.stderr
    assert ("--heldout rehearsal-7x7-64 --style compact --max-turns 15 --image-history 1 --cell-px 8 --max-tokens 2"
            in result.stdout)


def test_an_option_the_adapter_contradicts_is_refused_before_playing(solver_endpoint, tmp_path):  # noqa: F811
    url, handler = solver_endpoint
    adapter = _adapter(tmp_path / "a", "base")
    result = runner.invoke(app, ["evaluate", "--endpoint", url, *SCRIPTED, "--adapter", str(adapter),
                                 "--cell-px", "25"])
    assert result.exit_code == 2
    assert "--cell-px 25 but the adapter in" in result.stderr and "trained with 8" in result.stderr
    assert handler.requests == []


@pytest.mark.parametrize(("config_text", "message"), [
    (None, r"^error: --adapter .*: no adapter_config\.json there; pass the folder of a PEFT adapter"),
    ("{'r': 8", r"^error: --adapter .*: adapter_config\.json is not JSON \(Expecting property name .*\); export"),
])
def test_a_folder_that_holds_no_readable_adapter_is_bad_input_before_the_endpoint_is_asked(tmp_path, config_text, message):
    if config_text is not None:
        (tmp_path / "adapter_config.json").write_text(config_text)
    with socket.socket() as free:  # nothing listens there: the refusal comes before any request
        free.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{free.getsockname()[1]}"
    result = runner.invoke(app, ["evaluate", "--endpoint", url, *SCRIPTED, "--adapter", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert re.match(message, result.stderr), result.stderr


def test_a_missing_adapter_folder_is_refused_before_waiting_for_the_endpoint(tmp_path):
    """The promote hint's --wait-s 300 against a port-forward not yet up: the folder is checked first."""
    with socket.socket() as free:  # nothing listens there
        free.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{free.getsockname()[1]}"
    result = runner.invoke(app, ["evaluate", "--endpoint", url, *SCRIPTED, "--adapter", str(tmp_path / "absent"),
                                 "--wait-s", "20"])
    assert result.exit_code == 2, result.output
    assert "waiting up to" not in result.stderr, result.stderr
    assert re.match(r"^error: --adapter .*absent: no adapter_config\.json there", result.stderr), result.stderr


def test_json_report(solver_endpoint, tmp_path):  # noqa: F811
    url, _ = solver_endpoint
    adapter = _adapter(tmp_path / "a", "base")
    result = runner.invoke(app, ["evaluate", "--endpoint", url, *SCRIPTED, "--adapter", str(adapter), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["total"] == 3 and report["set"] == "rehearsal-7x7-64" and report["model"] == "scripted"


def test_a_changed_held_out_set_exits_1_as_under_maze_heldout_before_any_maze_is_played(
        solver_endpoint, tmp_path, monkeypatch):  # noqa: F811
    import shutil

    from workload.maze import heldout

    url, handler = solver_endpoint
    copy = shutil.copytree(heldout.HELDOUT_DIR, tmp_path / "heldout")
    changed = copy / "rehearsal-7x7-64.json"
    changed.write_bytes(changed.read_bytes() + b" ")
    load_set = heldout.load_set
    monkeypatch.setattr(heldout, "load_set", lambda name: load_set(name, copy))
    result = runner.invoke(app, ["evaluate", "--endpoint", url, *SCRIPTED, "--heldout", "rehearsal-7x7-64"])
    assert result.exit_code == 1, result.output
    assert "a frozen held-out set must not change" in result.stderr
    assert "lists the options" not in result.stderr  # not worded as a bad option
    assert handler.requests == []


def _copy_with_base(good, folder, base: str):
    import shutil

    shutil.copytree(good, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": base}))
    return folder


def test_serve_lists_the_adapters_it_will_not_serve_and_serves_the_rest(tiny_model_dir, serve_adapters_dir, tmp_path):
    import shutil

    from workload.cli.serve import unserved_adapters
    from workload.serve.settings import ServeSettings

    other = tmp_path / "models" / "sft"
    shutil.copytree(tiny_model_dir, other)
    adapters = tmp_path / "adapters"
    shutil.copytree(serve_adapters_dir / "a0", adapters / "good")
    _copy_with_base(serve_adapters_dir / "a0", adapters / "foreign", str(other))
    (adapters / "broken").mkdir()
    (adapters / "broken" / "adapter_config.json").write_text("{'r': 8")
    settings = ServeSettings(model=tiny_model_dir, adapters=str(adapters))
    refused = dict(unserved_adapters(settings))
    assert sorted(refused) == ["broken", "foreign"]  # listed, not fatal: `serve` starts with "good"
    assert refused["foreign"].startswith("base_model_name_or_path: the adapter was trained on the model folder 'sft'")
    assert refused["broken"].startswith("adapter_model.safetensors: is missing")


def test_a_relative_base_is_found_from_the_adapters_run_wherever_serve_runs(tiny_model_dir, serve_adapters_dir, tmp_path):
    """The rehearsal records its base relative to the project folder (runs/<id>/models/sft)."""
    import shutil

    from workload.cli.serve import unserved_adapters
    from workload.serve.settings import ServeSettings

    project = tmp_path / "project"
    base = project / "runs" / "r1" / "models" / "sft"
    shutil.copytree(tiny_model_dir, base)
    exports = project / "runs" / "r1" / "exports" / "global_step_1"
    _copy_with_base(serve_adapters_dir / "a0", exports / "policy", "runs/r1/models/sft")
    assert unserved_adapters(ServeSettings(model=base, adapters=str(exports))) == []  # the cwd is not the project
    foreign = ServeSettings(model=tiny_model_dir, adapters=str(exports))
    assert [name for name, _ in unserved_adapters(foreign)] == ["policy"]


@pytest.mark.parametrize("once", [[], ["--once"]])
def test_serve_on_a_port_in_use_exits_1_before_starting(tiny_model_dir, serve_adapters_dir, once):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["serve", "--model", str(tiny_model_dir), "--adapters", str(serve_adapters_dir),
                                     "--port", str(port), *once])
    assert result.exit_code == 1
    assert f"port {port} on 127.0.0.1 is already in use (another `skymaze serve`?)" in result.stderr
