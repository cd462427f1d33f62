"""End to end on a real local Ray cluster: the supervisor keeps a checkpointing job running
through a killed worker actor and, separately, a killed driver, and the resumed run ends with
the same weights as an uninterrupted one.

Figures (kill -> resubmit decision, kill -> resumed driver running, steps lost, runtime against
the uninterrupted run measured in the same session) are printed for the report; nothing here
asserts a duration.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.workload.skyrl.ray_head import local_ray_head
from workload.supervise import ray_jobs
from workload.supervise.loop import Edges, supervise
from workload.supervise.machine import Kind, Policy
from workload.supervise.telemetry import Telemetry

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

STEPS, CKPT_INTERVAL, STEP_S = 30, 5, 0.25
KILL_AT_STEP = 12  # two steps past the checkpoint at 10: a resume redoes 11 and 12
JOB_TIMEOUT_S = 240
POLICY = Policy(max_submissions=3, max_failures_at_same_step=2, backoff_base_s=0.5, backoff_cap_s=2, node_wait_timeout_s=60,
                release_workers=True)
POLL_S = 0.2


@pytest.fixture(scope="module")
def head():
    with local_ray_head(num_cpus=3) as running:
        yield running


@pytest.fixture(scope="module")
def client(head):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(head.dashboard_url)


def _submit(client, run_dir: Path) -> str:
    command = [sys.executable, "-m", "workload.supervise.drill", "--run-dir", str(run_dir), "--steps", str(STEPS),
               "--ckpt-interval", str(CKPT_INTERVAL), "--workers", "2", "--min-step-s", str(STEP_S), "--resume-mode", "latest"]
    return client.submit_job(entrypoint=" ".join(command), runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _poll(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout_s} s")


def _edges(client, head, run_dir: Path, released: list) -> Edges:
    from ray.util.state import list_nodes

    def workers():
        alive = [n for n in list_nodes(address=head.dashboard_url) if n.state == "ALIVE"]
        return len(alive), 1

    def checkpoint_step():
        marker = run_dir / "ckpts" / "latest_ckpt_global_step.txt"
        return int(marker.read_text()) if marker.is_file() else None

    return Edges(
        submit=lambda: _submit(client, run_dir),
        job=lambda job_id: ray_jobs.observe(client, job_id),
        workers=workers,
        checkpoint_step=checkpoint_step,
        release=lambda: released.append(time.monotonic()) or "released",
    )


@pytest.fixture(scope="module")
def uninterrupted(client, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("drill-baseline")
    began = time.monotonic()
    job_id = _submit(client, run_dir)
    _poll(lambda: client.get_job_status(job_id).is_terminal(), JOB_TIMEOUT_S, "baseline job did not end")
    assert str(client.get_job_status(job_id).value) == "SUCCEEDED", client.get_job_logs(job_id)
    return _read(run_dir / "final.json"), time.monotonic() - began


def _drill(client, head, tmp_path, victim: str):
    run_dir = tmp_path / "run"
    released: list = []
    stream = io.StringIO()
    began = time.monotonic()
    first = _submit(client, run_dir)
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(outcome=supervise(first, _edges(client, head, run_dir, released), POLICY, Telemetry("drill", stream), poll_s=POLL_S)),
        daemon=True,
    )
    thread.start()
    _poll(lambda: (_read(run_dir / "progress.json") or {}).get("step", 0) >= KILL_AT_STEP, JOB_TIMEOUT_S, "drill never reached the kill step")
    pids = _read(run_dir / "drill.json")
    target = pids["workers"][0] if victim == "worker" else pids["driver"]
    step_at_kill = _read(run_dir / "progress.json")["step"]
    killed_at = time.monotonic()
    os.kill(target, signal.SIGKILL)
    resumed = _poll(lambda: (d := _read(run_dir / "drill.json")) and d["driver"] != pids["driver"] and d, JOB_TIMEOUT_S, "no resumed driver")
    resumed_at = time.monotonic()
    thread.join(JOB_TIMEOUT_S)
    assert not thread.is_alive(), "supervisor did not finish"
    outcome = result["outcome"]
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    resubmit = next(r for r in records if r["action"] == Kind.RESUBMIT.value)
    failure = next(r for r in records if r["cause"])
    return {
        "outcome": outcome, "records": records, "released": released, "failure": failure, "resumed": resumed,
        "step_at_kill": step_at_kill, "final": _read(run_dir / "final.json"), "runtime_s": time.monotonic() - began,
        "kill_to_resubmit_s": next(t for t in _record_times(outcome, records, began) if t[0] == "resubmit")[1] - (killed_at - began),
        "kill_to_resumed_s": resumed_at - killed_at, "resubmit": resubmit,
        "message": client.get_job_info(first).message or "",
    }


def _record_times(outcome, records, began):
    # records carry the supervisor's monotonic clock (Edges.clock = time.monotonic)
    return [(r["action"], r["t_s"] - began) for r in records]


@pytest.mark.parametrize(("victim", "cause"), [("worker", "actor_died"), ("driver", "driver_killed")])
def test_supervisor_resumes_a_killed_run_to_the_uninterrupted_result(client, head, tmp_path, uninterrupted, victim, cause):
    baseline, baseline_s = uninterrupted
    drill = _drill(client, head, tmp_path, victim)
    assert drill["failure"]["cause"] == cause, drill["message"][-3000:]
    assert drill["outcome"].state.submissions == 2 and len(drill["outcome"].job_ids) == 2
    assert drill["resumed"]["resumed_from"] == (drill["step_at_kill"] // CKPT_INTERVAL) * CKPT_INTERVAL
    lost = drill["step_at_kill"] - drill["resumed"]["resumed_from"]
    assert lost <= CKPT_INTERVAL
    assert drill["final"]["sha256"] == baseline["sha256"]  # bit-identical weights
    assert drill["final"]["step"] == STEPS
    assert [r["action"] for r in drill["records"]][-2:] == ["release", "done"] and len(drill["released"]) == 1
    print(
        f"\nfault drill ({victim} killed at step {drill['step_at_kill']}): cause {cause}; "
        f"kill -> resubmit decision {drill['kill_to_resubmit_s']:.2f} s; kill -> resumed driver {drill['kill_to_resumed_s']:.2f} s; "
        f"lost steps {lost} (ckpt_interval {CKPT_INTERVAL}); runtime {drill['runtime_s']:.1f} s vs uninterrupted {baseline_s:.1f} s"
    )


def test_a_job_the_head_does_not_know_is_missing(client):
    assert ray_jobs.observe(client, "raysubmit_nosuchjob").status == "MISSING"
