"""``skymaze submit|status|logs|stop``: input errors and an unreachable cluster (real jobs: tests/workload/skyrl/test_jobs.py)."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from tests.staged_model import stage_model
from workload.cli.main import app

runner = CliRunner()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_submit_refuses_a_recipe_that_would_fail_on_the_cluster():
    result = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", "generator.inference_engine.num_engines=4"])
    assert result.exit_code == 2
    assert "error: generator.inference_engine.num_engines" in result.stderr
    assert "`skymaze recipe show blog --fields` lists them" in result.stderr


def test_submit_refuses_a_malformed_env_before_reaching_the_cluster():
    result = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--env", "NOT A PAIR",
                                 "--address", f"http://127.0.0.1:{_closed_port()}"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --env 'NOT A PAIR': expected NAME=VALUE with NAME like HF_HOME; ")


def test_sagemaker_address_without_the_toolkit_is_a_usage_error():
    result = runner.invoke(app, ["status", "raysubmit_x", "--address", "sagemaker_ray://skyrl-visgym/ray"])
    assert result.exit_code == 2
    assert "pip install toolkit-for-ray-on-sagemaker-ai" in result.stderr


def test_address_comes_from_ray_address_when_no_flag():
    result = runner.invoke(app, ["logs", "raysubmit_x"], env={"RAY_ADDRESS": "ftp://nowhere"})
    assert result.exit_code == 2
    assert "scheme 'ftp' is not supported" in result.stderr


def test_unreachable_dashboard_fails_with_a_hint():
    result = runner.invoke(app, ["stop", "raysubmit_x", "--address", f"http://127.0.0.1:{_closed_port()}"])
    assert result.exit_code == 1
    assert "cannot reach the Ray dashboard" in result.stderr
    # the port-forward `skymaze deploy` prints (README step 2), namespace included, pasteable as shown
    assert "(kubectl -n ray port-forward svc/skymaze-train-head-svc 8265:8265 &, the command" in result.stderr


def test_commands_document_an_example():
    for command in ("submit", "status", "logs", "stop", "supervise"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0 and "Example:" in result.stdout, command


def test_without_a_job_id_the_job_commands_need_a_ray_to_find_the_newest_job():
    for command in ("status", "logs", "stop", "supervise"):
        result = runner.invoke(app, [command, "--address", "http://127.0.0.1:9"])
        assert result.exit_code == 1 and "cannot reach the Ray dashboard" in result.stderr, command


def test_in_cluster_outside_a_pod_is_refused_up_front_in_one_line(tmp_path):
    from workload.supervise.kube import SERVICE_ACCOUNT_DIR, in_cluster_problem

    if (SERVICE_ACCOUNT_DIR / "token").is_file():
        pytest.skip("runs inside a Kubernetes pod: the service account is there")
    result = runner.invoke(app, ["supervise", "--watch", "--in-cluster", "--once", "--handled-file",
                                 str(tmp_path / "handled.txt"), "--address", f"http://127.0.0.1:{_closed_port()}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: {in_cluster_problem()}"]
    assert "drop --in-cluster" in result.stderr
    (tmp_path / "token").write_text("t")
    assert in_cluster_problem(tmp_path) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "max_submissions=0"], "max_submissions=0: Input should be greater than or equal to 1"),
        (["--set", "max_submisions=3"], "unknown setting 'max_submisions'; did you mean max_submissions?"),
        (["--set", "backoff_base_s=5"], "unknown setting 'backoff_base_s'"),
        (["--hyperpod-cluster", "skymaze", "--set", "group_idle_s=60", "--set", "group_idle_count=-1"],
         "group_idle_count=-1: Input should be greater than or equal to 0"),
    ],
)
def test_supervise_refuses_bad_settings_naming_the_key(args, message):
    result = runner.invoke(app, ["supervise", "raysubmit_x", *args, "--address", f"http://127.0.0.1:{_closed_port()}"])
    assert result.exit_code == 2 and message in result.stderr, result.output


def test_supervise_takes_its_limits_as_set_pairs_only():
    """The limits are one model on one grammar: --set KEY=VALUE, no option per limit."""
    result = runner.invoke(app, ["supervise", "raysubmit_x", "--max-submissions", "3"])
    assert result.exit_code == 2 and "No such option: --max-submissions" in result.stderr
    assert "max_submissions (8)" in runner.invoke(app, ["supervise", "--help"], terminal_width=400).stdout


@pytest.fixture(scope="module")
def ray_head():
    from tests.workload.skyrl.ray_head import local_ray_head

    with local_ray_head() as head:
        yield head


@pytest.mark.slow
@pytest.mark.e2e
def test_a_supervised_preflight_is_watched_to_the_end_once(ray_head, tmp_path):
    stage_model(tmp_path)  # the model a preflight would download (no network here)
    address = ["--address", ray_head.dashboard_url]
    # No supervised job yet (no test of this module submits one before): one error line, not a second one
    # from the supervision loop's own failure handler.
    none = runner.invoke(app, ["supervise", "--metrics-port", "0", *address])
    assert none.exit_code == 1 and none.stderr.splitlines() == [
        "error: no job submitted with `skymaze submit --supervise` on this Ray cluster; submit one, or name the job id"]
    submitted = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}", "--preflight", "--supervise", *address])
    assert submitted.exit_code == 0, submitted.output
    job_id = submitted.stdout.split()[1]
    assert f"skymaze supervise {job_id}" in submitted.stdout

    flags = ["--set", "release_workers=false", "--poll-s", "0.2", "--metrics-port", "0", *address]
    one = runner.invoke(app, ["supervise", *flags])  # no job id: the newest job submitted with --supervise
    assert one.exit_code == 0, one.output
    assert f"job {job_id} (the newest supervised one; run maze-blog)" in one.stderr
    decisions = [json.loads(line) for line in one.stdout.splitlines() if line.startswith("{")]
    assert decisions[-1]["action"] == "done" and decisions[-1]["run"] == "maze-blog"
    assert all(d["action"] in ("wait", "done") for d in decisions)
    assert f"run maze-blog finished in 1 submission(s): {job_id}" in one.stdout

    handled = tmp_path / "handled.txt"
    watched = runner.invoke(app, ["supervise", "--watch", "--once", "--handled-file", str(handled), *flags])
    assert watched.exit_code == 0, watched.output
    assert f"supervised 1 run(s): {job_id}" in watched.stdout
    from workload.supervise.service import read_handled

    assert read_handled(handled) == {job_id: "done after 1 submission(s)"}
    again = runner.invoke(app, ["supervise", "--watch", "--once", "--handled-file", str(handled), *flags])
    assert "supervised 0 run(s)" in again.stdout


@pytest.mark.slow
@pytest.mark.e2e
def test_a_job_submitted_without_supervise_cannot_be_supervised(ray_head, tmp_path):
    stage_model(tmp_path)  # the model a preflight would download (no network here)
    address = ["--address", ray_head.dashboard_url]
    submitted = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}", "--preflight", *address])
    job_id = submitted.stdout.split()[1]
    result = runner.invoke(app, ["supervise", job_id, "--metrics-port", "0", *address])
    assert result.exit_code == 2 and "carries no 'skymaze_job_spec' metadata" in result.stderr
    assert "skymaze submit --supervise" in result.stderr
    newest = runner.invoke(app, ["status", *address])  # no job id: the newest job skymaze submitted
    assert newest.stdout.startswith(f"{job_id}: ") and f"job {job_id} (the newest one; run maze-blog)" in newest.stderr


def _supervised_preflight(ray_head, tmp_path) -> str:
    stage_model(tmp_path)  # the model a preflight would download (no network here)
    submitted = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}",
                                    "--preflight", "--supervise", "--address", ray_head.dashboard_url])
    assert submitted.exit_code == 0, submitted.output
    return submitted.stdout.split()[1]


@pytest.mark.slow
@pytest.mark.e2e
def test_a_root_whose_job_spec_does_not_parse_is_recorded_and_the_next_run_is_still_supervised(ray_head, tmp_path):
    from ray.job_submission import JobSubmissionClient

    from workload.supervise.service import read_handled
    from workload.supervise.settings import JOB_SPEC_KEY, SUPERVISE_KEY

    client = JobSubmissionClient(ray_head.dashboard_url)
    broken = client.submit_job(entrypoint="python -c pass", metadata={SUPERVISE_KEY: "root", JOB_SPEC_KEY: "{not json"})
    good = _supervised_preflight(ray_head, tmp_path)  # submitted after the broken one: watched after it
    handled = tmp_path / "handled.txt"
    watched = runner.invoke(app, ["supervise", "--watch", "--once", "--handled-file", str(handled), "--set",
                                  "release_workers=false", "--poll-s", "0.2", "--metrics-port", "0",
                                  "--address", ray_head.dashboard_url])
    assert watched.exit_code == 0, watched.output
    summary = next(line for line in watched.stdout.splitlines() if line.startswith("supervised "))
    assert good in summary.split() and broken not in summary.split(), summary
    reasons = read_handled(handled)
    assert reasons[good] == "done after 1 submission(s)"
    assert reasons[broken].startswith(f"skipped: job {broken}'s 'skymaze_job_spec' metadata is not a job spec")
    skipped = [json.loads(line) for line in watched.stderr.splitlines() if '"root_skipped"' in line]
    assert [line["job_id"] for line in skipped] == [broken]


@pytest.mark.slow
@pytest.mark.e2e
def test_a_run_the_supervisor_gave_up_is_recorded_as_given_up_with_why_not_as_done(ray_head, tmp_path):
    """Training submitted where SkyRL is not importable (this machine) fails as a bad recipe: the supervisor gives
    it up, and the handled file says so, never "done"."""
    from workload.supervise.service import read_handled

    submitted = runner.invoke(app, ["submit", "--recipe", "blog", "--size", "blog", "--set", f"shared_root={tmp_path}",
                                    "--supervise", "--address", ray_head.dashboard_url])
    assert submitted.exit_code == 0, submitted.output
    root = submitted.stdout.split()[1]
    handled = tmp_path / "handled.txt"
    watched = runner.invoke(app, ["supervise", "--watch", "--once", "--handled-file", str(handled), "--set",
                                  "release_workers=false", "--poll-s", "0.2", "--metrics-port", "0",
                                  "--address", ray_head.dashboard_url])
    assert watched.exit_code == 0, watched.output
    reason = read_handled(handled)[root]
    assert reason.startswith("gave up after ") and ": " in reason, reason
    give_ups = [json.loads(line) for line in watched.stdout.splitlines() if '"give_up"' in line]
    assert give_ups and reason.endswith(give_ups[-1]["reason"]), (reason, give_ups)


@pytest.mark.slow
@pytest.mark.e2e
def test_watch_retries_the_ray_api_while_the_head_is_unreachable(ray_head, tmp_path):
    """The dashboard refuses connections (a head restarting) for two calls: watch waits 2 s, then 4 s, then goes
    on, instead of exiting."""
    from ray.job_submission import JobSubmissionClient

    from workload.supervise.service import backoff_s, watch
    from workload.supervise.settings import SupervisorSettings
    from workload.supervise.telemetry import Telemetry

    client = JobSubmissionClient(ray_head.dashboard_url)
    reachable = client._address
    client._address = f"http://127.0.0.1:{_closed_port()}"  # real HTTP to a port nobody listens on
    waits = []

    def head_comes_back(seconds):
        waits.append(seconds)
        if len(waits) == 2:
            client._address = reachable

    import io

    settings = SupervisorSettings(address=ray_head.dashboard_url, metrics_port=None, poll_s=0.2)
    watch(settings, client, tmp_path / "handled.txt", Telemetry("", io.StringIO()), forever=False,
          sleep=head_comes_back)
    assert waits == [backoff_s(1), backoff_s(2)] == [2.0, 4.0]


@pytest.mark.slow
@pytest.mark.e2e
def test_of_two_supervisors_of_one_run_only_the_first_resubmits(ray_head, tmp_path):
    """Ray refuses a second job with the same submission id: the run's second submission is made once."""
    from ray.job_submission import JobSubmissionClient

    from workload.supervise.service import AnotherSupervisor, build_edges, resubmission_id
    from workload.supervise.settings import SupervisorSettings

    client = JobSubmissionClient(ray_head.dashboard_url)
    root = _supervised_preflight(ray_head, tmp_path)
    settings = SupervisorSettings(address=ray_head.dashboard_url, metrics_port=None)
    laptop, in_cluster = (build_edges(settings, client, root) for _ in range(2))
    assert laptop.submit() == resubmission_id(root, 2)
    with pytest.raises(AnotherSupervisor, match=rf"resubmission {root}-r2 already exists, made by another supervisor"):
        in_cluster.submit()
    made = [j.submission_id for j in client.list_jobs() if j.submission_id.startswith(f"{root}-r")]
    assert made == [f"{root}-r2"]
    # the resubmission of a preflight root is a preflight again (it ran the training entrypoint before)
    assert client.get_job_info(made[0]).entrypoint == client.get_job_info(root).entrypoint
    assert client.get_job_info(made[0]).entrypoint.endswith(" --preflight")
