"""Job env vars, secrets, runtime_env and tracker: the merge rules, then real jobs on a local Ray head."""

from __future__ import annotations

import json

import pytest
from ray.job_submission import JobSubmissionClient
from typer.testing import CliRunner

from tests.staged_model import stage_model
from workload.cli.main import app
from workload.skyrl.job_env import JobEnvError, build_job_env, parse_env, runtime_env_for

SECRET = "s3cr3t-value-that-must-not-leak"


def _build(**changes):
    args = {"env": [], "env_from_shell": [], "runtime_env_json": None, "tracker": "console",
            "run_dir": "/shared/runs/r", "environ": {}}
    return build_job_env(**{**args, **changes})


def test_flags_win_over_runtime_env_json_and_secrets_are_marked():
    job_env = _build(env=["A=flag", "B=x=y"], env_from_shell=["HF_TOKEN"], environ={"HF_TOKEN": SECRET},
                     runtime_env_json='{"env_vars": {"A": "json", "C": "json"}, "config": {"setup_timeout_seconds": 60}}')
    assert dict(job_env.env_vars) == {"A": "flag", "B": "x=y", "C": "json", "HF_TOKEN": SECRET}
    assert job_env.describe() == "job env: A, B, C; HF_TOKEN (from the shell, not shown)"
    merged = runtime_env_for(job_env, "/tmp/job")
    assert merged == {"config": {"setup_timeout_seconds": 60}, "working_dir": "/tmp/job",
                      "env_vars": {"A": "flag", "B": "x=y", "C": "json", "HF_TOKEN": SECRET}}


@pytest.mark.parametrize(("changes", "message"), [
    ({"env": ["A"]}, "--env 'A': expected NAME=VALUE"),
    ({"env": ["1A=x"]}, "--env '1A': expected NAME=VALUE"),
    ({"env_from_shell": ["HF_TOKEN"]}, "--env-from-shell HF_TOKEN: HF_TOKEN is not set in this shell"),
    ({"runtime_env_json": "{"}, "--runtime-env-json is not JSON"),
    ({"runtime_env_json": "[1]"}, "must be a JSON object"),
    ({"runtime_env_json": '{"working_dir": "."}'}, "--runtime-env-json working_dir: skymaze sets it"),
    ({"tracker": "neptune"}, "--tracker 'neptune': SkyRL's trainer.logger is one of console, tensorboard, wandb"),
    ({"tracker": "wandb"}, "--tracker wandb needs WANDB_API_KEY in the job: export WANDB_API_KEY=..."),
    ({"tracker": "mlflow"}, "--tracker mlflow needs MLFLOW_TRACKING_URI"),
])
def test_bad_input_names_the_flag_and_the_fix(changes, message):
    with pytest.raises(JobEnvError) as caught:
        _build(**changes)
    assert message in str(caught.value)


def test_wandb_takes_its_key_from_the_shell_as_a_secret_and_tensorboard_writes_into_the_run():
    wandb = _build(tracker="wandb", environ={"WANDB_API_KEY": SECRET, "WANDB_ENTITY": "team"})
    assert wandb.env_vars["WANDB_API_KEY"] == SECRET and "WANDB_API_KEY" in wandb.secret_keys
    assert SECRET not in wandb.describe()
    assert _build(tracker="tensorboard").env_vars == {"TENSORBOARD_DIR": "/shared/runs/r/tensorboard"}


def test_parse_env_keeps_equals_signs_in_values():
    assert parse_env(["URL=http://h/?a=b"]) == {"URL": "http://h/?a=b"}


def test_tracker_without_its_key_is_a_usage_error_before_any_connection(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    result = CliRunner().invoke(app, ["submit", "--tracker", "wandb", "--address", "http://127.0.0.1:1"])
    assert result.exit_code == 2
    assert "--tracker wandb needs WANDB_API_KEY" in result.output


@pytest.mark.slow
@pytest.mark.e2e
def test_env_secrets_runtime_env_and_tracker_reach_the_ray_job_and_jobs_list_shows_it(
        skyrl_ray_head, tmp_path, monkeypatch):
    stage_model(tmp_path)  # the model a preflight would download (no network here)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    address = ["--address", skyrl_ray_head.dashboard_url]
    runner = CliRunner()
    result = runner.invoke(app, [
        "submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}", "--preflight", "--wait-s", "120",
        "--env", "HF_HOME=/shared/hf", "--env-from-shell", "WANDB_API_KEY", "--tracker", "wandb",
        "--runtime-env-json", '{"env_vars": {"FROM_JSON": "1"}, "config": {"setup_timeout_seconds": 300}}',
        *address])
    assert result.exit_code == 0, result.output
    job_id = result.stdout.split()[1]
    assert "job env: FROM_JSON, HF_HOME; WANDB_API_KEY (from the shell, not shown)" in result.stdout
    # --wait-s reports each status change on stderr while it waits
    assert f"{job_id}: SUCCEEDED after " in result.stderr
    changes = [line.split()[1] for line in result.stderr.splitlines() if line.startswith(f"{job_id}: ")]
    assert changes[-1] == "SUCCEEDED" and len(changes) == len(set(changes))
    info = JobSubmissionClient(skyrl_ray_head.dashboard_url).get_job_info(job_id)
    assert info.runtime_env["env_vars"] == {"FROM_JSON": "1", "HF_HOME": "/shared/hf", "WANDB_API_KEY": SECRET}
    assert info.runtime_env["config"]["setup_timeout_seconds"] == 300
    logs = runner.invoke(app, ["logs", job_id, *address]).stdout
    assert "trainer.logger=wandb" in logs
    assert SECRET not in result.output + logs
    job_spec = (tmp_path / "runs" / "maze-blog").rglob("*.json")
    assert not any(SECRET in path.read_text() for path in job_spec)

    listed = runner.invoke(app, ["jobs", "list", "--json", *address])
    assert listed.exit_code == 0, listed.output
    rows = {row["job_id"]: row for row in json.loads(listed.stdout)}
    assert rows[job_id]["status"] == "SUCCEEDED" and rows[job_id]["recipe"] == "blog"
    assert rows[job_id]["run_id"] == "maze-blog"
    table = runner.invoke(app, ["jobs", "list", *address])
    assert table.exit_code == 0 and job_id in table.stdout and "SUCCEEDED" in table.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_submit_and_status_json(skyrl_ray_head, tmp_path):
    stage_model(tmp_path)  # the model a preflight would download (no network here)
    address = ["--address", skyrl_ray_head.dashboard_url]
    runner = CliRunner()
    result = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}", "--preflight",
                                 "--wait-s", "120", "--json", *address])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["status"] == "SUCCEEDED" and document["run_id"] == "maze-blog" and document["env"] == []
    status = runner.invoke(app, ["status", document["job_id"], "--json", *address])
    assert status.exit_code == 0 and json.loads(status.stdout)["status"] == "SUCCEEDED"


@pytest.mark.slow
@pytest.mark.e2e
def test_a_supervised_resubmission_keeps_the_jobs_env_secrets_and_runtime_env(skyrl_ray_head, tmp_path, monkeypatch):
    stage_model(tmp_path)  # the model a preflight would download (no network here)
    from workload.skyrl import jobs
    from workload.supervise.service import job_env_of, job_spec_of

    monkeypatch.setenv("HF_TOKEN", SECRET)
    address = ["--address", skyrl_ray_head.dashboard_url]
    result = CliRunner().invoke(app, [
        "submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}", "--preflight", "--wait-s", "120",
        "--supervise", "--env", "HF_HOME=/shared/hf", "--env-from-shell", "HF_TOKEN",
        "--runtime-env-json", '{"config": {"setup_timeout_seconds": 300}}', *address])
    assert result.exit_code == 0, result.output
    root = result.stdout.split()[1]
    client = JobSubmissionClient(skyrl_ray_head.dashboard_url)
    kept = job_env_of(client, root)
    assert "working_dir" not in kept.runtime_env and kept.secret_keys == {"HF_HOME", "HF_TOKEN"}
    again = jobs.submit(client, job_spec_of(client, root), preflight=True, job_env=kept)
    first, second = client.get_job_info(root).runtime_env, client.get_job_info(again).runtime_env
    assert second["env_vars"] == first["env_vars"] == {"HF_HOME": "/shared/hf", "HF_TOKEN": SECRET}
    assert second["config"]["setup_timeout_seconds"] == 300
    assert jobs.wait(client, again, timeout_s=120).status == "SUCCEEDED"
