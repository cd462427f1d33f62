"""The loop survives failing edges: a dashboard or API server that does not answer is waited out."""

from __future__ import annotations

import io
import json

from workload.supervise.loop import Edges, supervise
from workload.supervise.machine import Policy
from workload.supervise.ray_jobs import JobView
from workload.supervise.telemetry import Telemetry


def test_edges_that_raise_read_as_unreachable_and_the_run_still_ends():
    clock = iter(range(1000))
    answers = iter([ConnectionError("dashboard down"), JobView("RUNNING"), JobView("SUCCEEDED")])
    readiness = iter([OSError("API server down"), (3, 3), (3, 3)])

    def job(_job_id):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def workers():
        answer = next(readiness)
        if isinstance(answer, Exception):
            raise answer
        return answer

    released = []
    edges = Edges(submit=lambda: "never", job=job, workers=workers, checkpoint_step=lambda: 160,
                  release=lambda: released.append(1), clock=lambda: float(next(clock)), sleep=lambda _s: None)
    stream = io.StringIO()
    outcome = supervise("raysubmit_1", edges, Policy(release_workers=True), Telemetry("r", stream), poll_s=0.01, submissions=2)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["job_status"] for line in lines[:3]] == ["UNREACHABLE", "RUNNING", "SUCCEEDED"]
    assert lines[0]["workers_ready"] == 0 and lines[0]["workers_expected"] == 1
    assert [line["action"] for line in lines] == ["wait", "wait", "release", "done"]
    assert released == [1] and outcome.state.submissions == 2
