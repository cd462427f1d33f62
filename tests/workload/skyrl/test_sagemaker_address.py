"""``sagemaker_ray://`` addresses: Ray hands them to the module named by the scheme (the toolkit's hook).

A stand-in ``sagemaker_ray`` module plays the toolkit's part here (its real hook needs an EKS
cluster with the endpoint operator): it either fails the way the toolkit fails (errors that
derive from ``Exception`` only) or hands Ray the local head's dashboard, as the toolkit does
once it holds a session. The Ray side (address parsing, module import, Jobs API) is real.
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from workload.cli.main import app
from workload.skyrl import jobs

ADDRESS = "sagemaker_ray://skymaze-train/ray"
HOOK = textwrap.dedent('''
    import os
    import pathlib

    from ray.dashboard.modules import dashboard_sdk


    class KubeconfigError(Exception):
        """Like the toolkit's: not a RuntimeError, ValueError or ConnectionError."""


    def get_job_submission_client_cluster_info(address, *args, **kwargs):
        pathlib.Path(os.environ["HOOK_SEEN"]).write_text(address)
        target = os.environ.get("HOOK_DASHBOARD")
        if not target:
            raise KubeconfigError("No current-context set in kubeconfig.")
        return dashboard_sdk.get_job_submission_client_cluster_info(target, *args, **kwargs)
''')


@pytest.fixture
def toolkit_hook(tmp_path, monkeypatch):
    """Put a ``sagemaker_ray`` module on the path; returns the file where it records the address it got."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sagemaker_ray.py").write_text(HOOK)
    monkeypatch.syspath_prepend(str(tmp_path / "hook"))
    importlib.invalidate_caches()
    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("HOOK_SEEN", str(seen))
    monkeypatch.delenv("HOOK_DASHBOARD", raising=False)
    yield seen
    sys.modules.pop("sagemaker_ray", None)  # later tests see the package as absent again
    importlib.invalidate_caches()


def test_a_toolkit_failure_is_a_jobs_error_with_what_to_check(toolkit_hook):
    assert jobs.resolve_address(ADDRESS, None) == ADDRESS
    with pytest.raises(jobs.JobsError, match=r"refused sagemaker_ray://skymaze-train/ray: KubeconfigError: "
                                             r"No current-context.*update-kubeconfig.*ray_endpoint=true"):
        jobs.connect(ADDRESS)
    assert toolkit_hook.read_text() == "skymaze-train/ray"  # Ray passed the rest of the address on


def test_the_cli_reports_a_toolkit_failure_without_a_traceback(toolkit_hook):
    result = CliRunner().invoke(app, ["status", "raysubmit_x", "--address", ADDRESS])
    assert result.exit_code == 1, result.output
    assert "raydashboardconnections" in result.stderr and "user_principal_arns" in result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.slow
@pytest.mark.e2e
def test_status_and_logs_reach_a_real_head_through_the_scheme(toolkit_hook, skyrl_ray_head, monkeypatch):
    from ray.job_submission import JobSubmissionClient

    direct = JobSubmissionClient(skyrl_ray_head.dashboard_url)
    job_id = direct.submit_job(entrypoint="echo endpoint-ok")
    assert jobs.wait(direct, job_id, timeout_s=120).status == "SUCCEEDED"
    monkeypatch.setenv("HOOK_DASHBOARD", skyrl_ray_head.dashboard_url.removeprefix("http://"))
    runner = CliRunner()
    status = runner.invoke(app, ["status", job_id, "--address", ADDRESS])
    assert status.exit_code == 0, status.output
    assert "SUCCEEDED" in status.stdout
    logs = runner.invoke(app, ["logs", job_id, "--address", ADDRESS])
    assert logs.exit_code == 0 and "endpoint-ok" in logs.stdout, logs.output
