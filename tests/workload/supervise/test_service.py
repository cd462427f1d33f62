"""Watch mode's choice of runs, and the checkpoint marker reader."""

from __future__ import annotations

from ray.job_submission import JobDetails, JobStatus, JobType

from workload.supervise.service import _checkpoint_reader, roots_to_supervise
from workload.supervise.settings import SUPERVISE_KEY


def _job(job_id: str, start: int, supervise: str | None) -> JobDetails:
    metadata = {SUPERVISE_KEY: supervise} if supervise else {}
    return JobDetails(type=JobType.SUBMISSION, submission_id=job_id, entrypoint="python -m x", status=JobStatus.RUNNING,
                      start_time=start, metadata=metadata)


def test_only_user_submitted_supervised_jobs_not_yet_handled_oldest_first():
    jobs = [_job("c", 3, "root"), _job("a", 1, "root"), _job("r", 2, "resubmit"), _job("plain", 0, None), _job("done", 0, "root")]
    assert roots_to_supervise(jobs, handled={"done"}) == ["a", "c"]


def test_checkpoint_reader_reads_skyrls_marker_and_tolerates_a_partial_write(tmp_path):
    read = _checkpoint_reader(tmp_path)
    assert read() is None
    (tmp_path / "latest_ckpt_global_step.txt").write_text("40\n")
    assert read() == 40
    (tmp_path / "latest_ckpt_global_step.txt").write_text("")
    assert read() is None


def test_a_restarted_supervisor_finds_the_runs_resubmissions():
    from workload.supervise.service import successors
    from workload.supervise.settings import ROOT_KEY

    jobs = [_job("root", 1, "root"), _job("second", 5, "resubmit"), _job("first", 3, "resubmit"), _job("other", 4, "resubmit")]
    jobs[1].metadata[ROOT_KEY] = "root"
    jobs[2].metadata[ROOT_KEY] = "root"
    jobs[3].metadata[ROOT_KEY] = "another-root"
    assert successors(jobs, "root") == ["first", "second"]
