"""Resubmission spec: resume_mode=latest whatever the recipe said."""

from __future__ import annotations

from workload.skyrl.entrypoint import job_spec
from workload.skyrl.recipe import load_recipe
from workload.supervise.ray_jobs import with_resume_latest


def test_resubmission_resumes_from_the_latest_checkpoint():
    spec = job_spec(load_recipe("blog", sets=["trainer.resume_mode=none"]))
    assert "trainer.resume_mode=none" in spec.overrides
    again = with_resume_latest(spec)
    assert [o for o in again.overrides if o.startswith("trainer.resume_mode=")] == ["trainer.resume_mode=latest"]
    assert len(again.overrides) == len(spec.overrides)
