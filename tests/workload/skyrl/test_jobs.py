"""Ray Jobs submission: address rules, and real jobs on a private local Ray head."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.staged_model import stage_model
from workload.cli.main import app
from workload.skyrl import jobs
from workload.skyrl.entrypoint import JobSpec, job_spec
from workload.skyrl.recipe import load_recipe


def test_address_flag_wins_over_environment_and_default():
    assert jobs.resolve_address("http://a:1", "http://b:2") == "http://a:1"
    assert jobs.resolve_address(None, "https://b:2") == "https://b:2"
    assert jobs.resolve_address(None, None) == jobs.DEFAULT_ADDRESS


def test_sagemaker_scheme_without_its_package_names_the_package():
    with pytest.raises(ValueError, match=r"needs the 'sagemaker_ray' module.*pip install toolkit-for-ray-on-sagemaker-ai"):
        jobs.resolve_address("sagemaker_ray://skyrl-visgym/ray", None)


def test_address_without_scheme_or_with_an_unknown_one_is_rejected():
    with pytest.raises(ValueError, match=r"has no scheme"):
        jobs.resolve_address("127.0.0.1:8265", None)
    with pytest.raises(ValueError, match=r"scheme 'ray' is not supported"):
        jobs.resolve_address("ray://127.0.0.1:10001", None)


def test_job_spec_round_trips_through_json():
    spec = job_spec(load_recipe("blog"))
    assert JobSpec.from_json(spec.to_json()) == spec
    assert spec.trajectories_per_step == 240
    assert spec.model_path == "/shared/models/visgym_model/mixed_qwen3vl"


def test_entrypoint_command_is_the_module_with_the_spec_file():
    assert jobs.entrypoint_command(preflight=True) == "python -m workload.skyrl.entrypoint --job-spec job.json --preflight"


@pytest.mark.slow
@pytest.mark.e2e
def test_preflight_job_prepares_the_run_on_shared_storage(skyrl_ray_head, tmp_path):
    stage_model(tmp_path)  # the model a preflight would download (no network here)
    address = ["--address", skyrl_ray_head.dashboard_url]
    runner = CliRunner()
    result = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}", "--preflight", "--wait-s", "120", *address])
    assert result.exit_code == 0, result.output
    job_id = result.stdout.split()[1]
    assert f"skymaze status {job_id}" in result.stdout

    data = tmp_path / "runs" / "maze-blog" / "data"
    assert pq.read_metadata(data / "train.parquet").num_rows == 600
    assert pq.read_metadata(data / "eval.parquet").num_rows == 64
    assert json.loads((data / "tickets.json").read_text())["seeded_groups"] is True

    status = runner.invoke(app, ["status", job_id, *address])
    assert status.exit_code == 0 and f"{job_id}: SUCCEEDED" in status.stdout
    logs = runner.invoke(app, ["logs", job_id, *address])
    assert logs.exit_code == 0
    assert "preflight: ok" in logs.stdout
    assert f"  trainer.ckpt_path={tmp_path}/runs/maze-blog/ckpts" in logs.stdout
    followed = runner.invoke(app, ["logs", job_id, "--follow", *address])  # a finished job: streams, then ends
    assert followed.exit_code == 0 and "preflight: ok" in followed.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_training_job_outside_the_image_fails_saying_why(skyrl_ray_head, tmp_path):
    address = ["--address", skyrl_ray_head.dashboard_url]
    runner = CliRunner()
    result = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}", "--wait-s", "120", *address])
    assert result.exit_code == 1
    job_id = result.stdout.split()[1]
    assert "FAILED" in result.stdout
    status = runner.invoke(app, ["status", job_id, *address])
    assert status.exit_code == 1 and "failed" in status.stderr
    assert "SkyRL is not importable here" in runner.invoke(app, ["logs", job_id, *address]).stdout
    assert not (tmp_path / "runs" / "maze-blog" / "data").exists()  # failed before preparing anything
    unknown = runner.invoke(app, ["status", "raysubmit_nosuchjob", *address])
    assert unknown.exit_code == 1 and "no job 'raysubmit_nosuchjob'" in unknown.stderr
