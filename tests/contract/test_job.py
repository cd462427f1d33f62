"""``skymaze submit`` for real: the Ray Jobs API of a local head, the job's real entrypoint and SkyRL 0.4.0.

A Ray head on 127.0.0.1 with token auth declares the GPUs the recipe asks for (``--num-gpus``:
Ray schedules them as a count, nothing uses CUDA before the inference engines start). The
job runs ``python -m workload.skyrl.entrypoint`` as on the cluster: tickets, config,
``validate_cfg``, SkyRL's ``initialize_ray``, the env registry, the tiny model's tokenizer,
SkyRL's datasets, the colocated placement group and the tracker; it must stop at the first
call that needs vLLM (``inference-client``) and its error must name that stage.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.workload.skyrl.ray_head import _pids_naming, local_ray_head
from workload.cli.main import app
from workload.localhost import RAY_LOOPBACK_ENV
from workload.skyrl.entrypoint import FAILED_MARKER, REACHED_MARKER, STAGE_MARKER, STARTUP_STAGES

# The blog recipe's colocated placement group: 6 bundles of {GPU: 1, CPU: 1}; one more CPU for
# SkyRL's experiment task (skyrl_entrypoint is num_cpus=1) and two for the job's own actors.
FAKE_GPUS = 6
LOGICAL_CPUS = FAKE_GPUS + 3
# `ray start` gives the dashboard 60 s to come up (RAY_DASHBOARD_STARTUP_TIMEOUT_S,
# ray/_private/ray_constants.py) and the dashboard waits 30 s for each of its module subprocesses
# (RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT, ray/dashboard/consts.py); on a loaded 2-core
# machine (load average 16 measured) importing the modules alone takes longer, and the head never starts.
DASHBOARD_START_S = 240
HEAD_START_TIMEOUT_S = DASHBOARD_START_S + 60
# Ray 2.57's raylet gives the dashboard agent a fixed 15 s to write its port files
# (NodeManager::WaitForDashboardAgentPorts) and aborts the node otherwise; a starved machine can miss it.
HEAD_START_ATTEMPTS = 3
JOB_TIMEOUT_S = 300
FIRST_STAGE_NEEDING_VLLM = "inference-client"
SECRET = "not-a-real-secret-9f1c"


@pytest.fixture(scope="module")
def head(tmp_path_factory, tiny_model_dir, monkeypatch_module) -> Iterator[dict]:
    """The head, its token in this process's environment (the CLI's client reads it), and /shared.

    Every process the head starts is stopped with it (its process group, then anything naming its
    temp dir: tests/workload/skyrl/ray_head.py); the jobs have ended by then."""
    token = secrets.token_hex(32)
    shared = tmp_path_factory.mktemp("shared")
    model = shared / "models" / "visgym_model" / "mixed_qwen3vl"
    shutil.copytree(tiny_model_dir, model)
    repo = Path(__file__).resolve().parents[2]
    machine_env = {
        # The trainer image installs the workload package; here the repository is on the path, and
        # job_site/sitecustomize.py serves flash-attn without CUDA kernels (as conftest.py does here).
        "PYTHONPATH": os.pathsep.join([str(repo), str(Path(__file__).with_name("job_site"))]),
        # every Ray process on 127.0.0.1 (workload/localhost.py says why)
        **RAY_LOOPBACK_ENV,
        # the raylet starts no idle workers ahead of the jobs (less CPU while the node comes up)
        "RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0",
        "RAY_DASHBOARD_STARTUP_TIMEOUT_S": str(DASHBOARD_START_S),
        "RAY_DASHBOARD_SUBPROCESS_MODULE_WAIT_READY_TIMEOUT": str(DASHBOARD_START_S),
        # Nothing leaves the machine: no hub, no tracker service.
        "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false",
        # SkyRL's tracker and datasets write under the job's working dir otherwise.
        "SKYRL_RAY_PG_TIMEOUT_IN_S": "60",
    }
    for key in ("RAY_ADDRESS", "WANDB_API_KEY", "HF_TOKEN", "HF_HOME"):
        monkeypatch_module.delenv(key, raising=False)
    with local_ray_head(num_cpus=LOGICAL_CPUS, num_gpus=FAKE_GPUS, token=token, extra_env=machine_env,
                        start_timeout_s=HEAD_START_TIMEOUT_S, start_attempts=HEAD_START_ATTEMPTS) as ray_head:
        monkeypatch_module.setenv("RAY_AUTH_MODE", "token")
        monkeypatch_module.setenv("RAY_AUTH_TOKEN", token)
        _reload_ray_auth()
        try:
            yield {"url": ray_head.dashboard_url, "shared": shared}
        finally:
            monkeypatch_module.undo()
            _reload_ray_auth()
    assert _pids_naming(str(ray_head.temp_dir)) == [], "Ray processes outlived the head"


def _reload_ray_auth() -> None:
    """Ray reads its auth mode and token once per process; another test may have imported it first."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _submit(head: dict, *args: str, shell: dict[str, str] | None = None) -> tuple[dict, str]:
    """``skymaze submit --json`` until the job ends; its JSON result and the job's log."""
    from ray.job_submission import JobSubmissionClient

    runner = CliRunner()
    result = runner.invoke(app, ["submit", *args, "--address", head["url"], "--set", f"shared_root={head['shared']}",
                                 "--wait-s", str(JOB_TIMEOUT_S), "--json"], env=shell or {})
    start = result.stdout.find("\n{")
    assert start >= 0 or result.stdout.startswith("{"), f"exit {result.exit_code}: {result.output}"
    outcome = json.loads(result.stdout[start + 1 if start >= 0 else 0:])
    return outcome, JobSubmissionClient(head["url"]).get_job_logs(outcome["job_id"])


def _reached_and_stopped_at_the_inference_engine(outcome: dict, log: str) -> None:
    # The driver's summary: the task's own marker lines reach the driver's log late (prefixed
    # "(_experiment pid=...) "), after its error, or not at all once it disconnects.
    (reached,) = re.findall(rf"^{re.escape(REACHED_MARKER)} (.*)$", log, flags=re.MULTILINE)
    last = STARTUP_STAGES.index(FIRST_STAGE_NEEDING_VLLM)
    assert reached.split() == list(STARTUP_STAGES[: last + 1]), log[-6000:]
    live = re.findall(rf"{re.escape(STAGE_MARKER)} ([a-z-]+)$", log, flags=re.MULTILINE)
    assert live and live == list(STARTUP_STAGES[: len(live)])  # the live markers, in order, as far as they came
    assert outcome["status"] == "FAILED", outcome
    failed = [line for line in outcome["message"].splitlines() if line.startswith(FAILED_MARKER)]
    assert failed and failed[-1].startswith(f"{FAILED_MARKER} {FIRST_STAGE_NEEDING_VLLM}: "), outcome["message"][-3000:]
    # no vLLM in this environment: the import of SkyRL's vLLM server side is what stops it
    assert "vllm" in failed[-1].lower(), failed[-1]


def _worker_env(log: str) -> set[str]:
    found = re.search(r"env vars of the job's runtime_env in this worker: (.*)$", log, flags=re.MULTILINE)
    assert found, log[-6000:]
    return set(found.group(1).split(", "))


def test_submit_small_runs_skyrls_startup_up_to_the_inference_engine(head):
    outcome, log = _submit(head, "--profile", "small")
    _reached_and_stopped_at_the_inference_engine(outcome, log)
    assert "(recipe small)" in log and "trainer.placement.policy_num_nodes=1" in log


def test_submit_blog_with_every_documented_env_form_reaches_the_inference_engine(head):
    # --env, --env-from-shell and --tracker wandb's key each name a variable SkyRL's initialize_ray
    # copies into ray.init's runtime_env again (HF_HOME, HF_TOKEN, WANDB_API_KEY): each one alone
    # failed the job at ray-init ("Failed to merge the Job's runtime env") before the entrypoint
    # set RAY_OVERRIDE_JOB_RUNTIME_ENV.
    hf_home = str(head["shared"] / "hf")
    outcome, log = _submit(head, "--profile", "blog", "--env", f"HF_HOME={hf_home}", "--env-from-shell", "HF_TOKEN",
                           "--tracker", "wandb", shell={"HF_TOKEN": SECRET, "WANDB_API_KEY": SECRET})
    _reached_and_stopped_at_the_inference_engine(outcome, log)
    assert "(recipe blog)" in log and "trainer.logger=wandb" in log
    assert {"HF_HOME", "HF_TOKEN", "WANDB_API_KEY"} <= _worker_env(log)  # what the experiment's worker received
    assert "wandb: Tracking run with wandb" in log  # SkyRL's tracker started (offline here)
    assert sorted(outcome["env"]) == ["HF_HOME", "HF_TOKEN", "WANDB_API_KEY"]
    # SkyRL 0.4.0 logs HF_TOKEN's value when it forwards it; the entrypoint masks it
    assert SECRET not in log and SECRET not in json.dumps(outcome)
