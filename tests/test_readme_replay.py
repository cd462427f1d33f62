"""Every `skymaze` command README and the docs pages show, run end to end as a user without AWS or a GPU would run it.

The walk runs in a fresh folder (its own HOME, no AWS credentials, AWS_* cleared) whose ``runs/`` is
the session's tiny rehearsal, through the console entry point, and checks what each command prints
or writes against the real thing: the rehearsal's in-process scores, the committed pictures and
held-out sets, the deploy profiles, the outputs README shows. Commands meant for the cluster run
against the local parts that stand in for it: a real Ray head on 127.0.0.1 for the job commands, a
moto server for the AWS APIs it emulates (STS, S3, SageMaker HyperPod), and a local `skymaze serve`
holding the promoted adapter under the cluster's model id. `deploy`, `diff` and `teardown` need a
real account; without one they must refuse in one line.

Commands run as written (tests/test_readme_commands.py refuses placeholders and step numbers), but for
`SUBSTITUTIONS`: the one path only the cluster's pods have and the port 8000 a shared machine may already
use; `ADDED` flags keep a local run off the machine's shared places. A documented command that is not
replayed must be in `NOT_REPLAYED` with its reason; one in neither fails
`test_every_readme_command_is_replayed_or_excused`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import docs
from tests.staged_model import stage_model
from tests.test_readme_commands import readme_commands
from tests.workload.local.fixtures import SMOKE_OVERRIDES

ROOT = Path(__file__).resolve().parents[1]
COMMAND_TIMEOUT_S = 600
SERVE_START_TIMEOUT_S = 300
JOB_END_TIMEOUT_S = 120
POLL_S = 0.2
# pytest-timeout's limit counts fixture setup: the first test to ask for the walk pays for the rehearsal, the Ray
# head, moto and every command (about 210 s alone here, 2-3x that beside the rest of the suite on 2 cores)
pytestmark = pytest.mark.timeout(1800)
MOTO_ACCOUNT = "123456789012"  # moto's default account id
REGION = "us-west-2"
ARTIFACTS_BUCKET = f"skymaze-artifacts-{MOTO_ACCOUNT}-{REGION}"  # workload/deployment/settings.py: NAME-artifacts-ACCOUNT-REGION
HYPERPOD_CLUSTER = "skymaze-hyperpod"  # infra/stacks/cluster.py: f"{settings.name}-hyperpod"
CREDENTIALS_REFUSAL = ("error: no AWS credentials found; configure credentials (aws configure, aws sso login, or "
                       "AWS_PROFILE=NAME) and check them with `aws sts get-caller-identity`")
STANDIN_MODEL_ID = "VisGym/visgym_model/mixed_qwen3vl"  # the cluster endpoint's base model id (recipe blog's model.base_model_id)

# README text -> what the replay runs instead, and why. Applied in order, to every command (a
# `when` restricts an entry to commands containing it); values in braces come from the walk.
SUBSTITUTIONS: tuple[tuple[str | None, str, str, str], ...] = (
    (None, "/shared/runs/maze-blog", "{run_root}", "the cluster run on FSx, a path only its pods have: the rehearsal's run"),
    (STANDIN_MODEL_ID, "http://127.0.0.1:8000", "http://127.0.0.1:{cluster_port}",
     "the cluster endpoint's port-forward: the stand-in endpoint's free port"),
    (None, "http://127.0.0.1:8000", "http://127.0.0.1:{port}", "8000 may be taken on a shared machine: a free port"),
    (None, "--port 8000", "--port {port}", "8000 may be taken on a shared machine: a free port"),
)
# Flags a command needs here and not on the cluster, by the command's start (after substitution).
ADDED: tuple[tuple[str, str, str], ...] = (
    ("skymaze submit", "--set shared_root={shared}", "/shared is the cluster's FSx mount: a fresh folder here"),
    ("skymaze supervise", "--poll-s 1 --metrics-port 0",
     "the pod's 15 s poll and fixed metrics port, on a shared machine: a short poll, no metrics port"),
    ("skymaze maze freeze", "--dir {heldout_dir}", "the default writes the committed set in the package"),
)
# README commands not replayed, each with its reason.
NOT_REPLAYED = {
    "skymaze cost": "prose naming the command; its forms with --hours are replayed",
    "skymaze evaluate": "prose naming the command; its complete forms are replayed",
    "skymaze promote": "prose naming the command; its complete forms are replayed",
    "skymaze serve": "prose naming the command; its complete form is replayed",
    "skymaze submit/status/logs/stop": "prose naming four commands; each is replayed on its own",
    "skymaze submit --preflight": "prose naming the staging command a replica's failure names; its complete forms "
                                  "(--size, --wait-s) are replayed",
    "skymaze rehearse": "a whole default rehearsal (minutes); the walk reruns the session's rehearsal instead "
                        "(test_a_rerun_rehearsal_resumes_and_keeps_its_report)",
    "skymaze study": "the whole pre-registered study (6 seeds, ~35 CPU minutes); a tiny study runs through the "
                     "command in tests/cli/test_study.py",
    "skymaze study --seeds 0-5": "the same whole study, its seeds named",
}


@dataclass
class Ran:
    """One replayed command: what ran, where, and what came back."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float = 0.0


@dataclass
class Walk:
    """The replay's folders, stand-ins and results (README command -> `Ran`)."""

    root: Path
    home: Path
    run_root: Path
    step: int
    values: dict[str, str]
    ray_url: str
    moto_url: str
    ran: dict[str, Ran] = field(default_factory=dict)
    dry_runs: dict[str, Ran] = field(default_factory=dict)  # the same command with --dry-run (no account needed)


def normalized(command: str) -> str:
    return " ".join(command.split())


def as_run(command: str, values: dict[str, str]) -> str:
    """README's command as the walk runs it: placeholders substituted, local flags added."""
    for when, old, new, _why in SUBSTITUTIONS:
        if (when is None or when in command) and old in command:
            command = command.replace(old, new)
    command = normalized(command.format_map(values))
    for start, flags, _why in ADDED:
        if command.startswith(start):
            command = f"{command} {flags.format_map(values)}"
    return command


def shown_output(command: str) -> list[str]:
    """The lines README shows under ``$ command`` in a text block (up to the next prompt or the block's end)."""
    lines = docs.text().splitlines()
    start = next(i for i, line in enumerate(lines) if normalized(line.removeprefix("$ ")) == command
                 and line.startswith("$ "))
    shown = []
    for line in lines[start + 1:]:
        if line.startswith(("$ ", "```")):
            break
        shown.append(line)
    return shown


def path_without_venvs(path: str) -> str:
    """``PATH`` less every folder of a Python virtual environment: a fresh shell, before README's setup."""
    return os.pathsep.join(folder for folder in path.split(os.pathsep)
                           if folder and not (Path(folder).parent / "pyvenv.cfg").is_file())


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A user's fresh shell without AWS credentials: own HOME, AWS_* cleared, no instance metadata, no virtual
    environment on PATH (README's setup activates it)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_") and key != "VIRTUAL_ENV"}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT), SHELL="/bin/bash", AWS_EC2_METADATA_DISABLED="true",
               AWS_SHARED_CREDENTIALS_FILE=str(home / ".aws" / "credentials"),
               AWS_CONFIG_FILE=str(home / ".aws" / "config"), PATH=path_without_venvs(os.environ["PATH"]))
    return {**env, **extra}


def _moto_env(walk: Walk) -> dict[str, str]:
    return _env(walk.home, AWS_ENDPOINT_URL=walk.moto_url, AWS_ACCESS_KEY_ID="testing",
                AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION, RAY_ADDRESS=walk.ray_url)


# README's setup lines the replay does not run, each with its reason; it runs the others (`source .venv/bin/activate`).
SETUP_NOT_RUN = {
    "make install": "the suite runs inside the installed environment; a reinstall is `make`'s own business",
    "skymaze --version": "a command like the others, replayed and checked under CHECKS",
}


def readme_setup() -> list[str]:
    """The lines of README's Setup block (```bash under `## Setup`), as a user pastes them into a new shell."""
    section = docs.page("README.md").split("\n## Setup\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line.strip() for line in block.splitlines() if line.strip()]


def in_setup_shell(command: str, cwd: Path) -> list[str]:
    """``bash -c``: README's setup in the clone, then ``command`` in ``cwd`` as pasted (exec'd: signals reach it)."""
    setup = [line for line in readme_setup() if line not in SETUP_NOT_RUN]
    script = " && ".join([f"cd {shlex.quote(str(ROOT))}", *setup, f"cd {shlex.quote(str(cwd))}", f"exec {command}"])
    return ["bash", "-c", script]


def _argv(command: str, cwd: Path) -> list[str]:
    assert shlex.split(command)[0] == "skymaze", command
    return in_setup_shell(command, cwd)


def _run(command: str, cwd: Path, env: dict[str, str]) -> Ran:
    started = time.monotonic()
    done = subprocess.run(_argv(command, cwd), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL)
    return Ran(done.args, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


# ---------------------------------------------------------------- the order a user walks README in

def _kind(command: str) -> str:
    """Which stand-in a README command runs against."""
    words = command.split()
    verb = " ".join(words[1:3]) if words[1] in {"cluster", "jobs", "recipe", "maze"} else words[1]
    if verb in {"deploy", "diff", "preflight"} or (verb == "teardown" and "--dry-run" not in words):
        return "no-account"
    if verb in {"submit", "status", "logs", "stop", "supervise", "jobs list"}:
        return "ray"
    if verb == "cluster status" or (verb == "promote" and ("s3://" in command or "--name" in command)):
        return "moto"
    if verb in {"serve", "evaluate", "promote"}:
        return "endpoint"
    if verb == "rehearse":
        return "rehearse"
    if verb == "use":
        return "context"
    return "local"


def _wait_for_job_end(url: str, job_id: str) -> None:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(url)
    deadline = time.monotonic() + JOB_END_TIMEOUT_S
    while not client.get_job_status(job_id).is_terminal():
        assert time.monotonic() < deadline, f"job {job_id} did not end within {JOB_END_TIMEOUT_S} s"
        time.sleep(POLL_S)


def _walk_ray(walk: Walk, commands: list[str]) -> None:
    """Submits first, as README orders them (the preflight before the run; `skymaze submit --size blog` last,
    so it is the newest job the job commands find), then the commands that read the jobs."""
    env = _env(walk.home, RAY_ADDRESS=walk.ray_url)
    order = {"skymaze submit --size small --preflight --wait-s 600": -3,  # deploy.md's `small` try, in its order
             "skymaze submit --size small --keep-run-name --set trainer.max_training_steps=2 --wait-s 5400": -2,
             "skymaze submit": 0, "skymaze submit --size blog --preflight --wait-s 600": 1,
             "skymaze submit --size blog --supervise": 2, "skymaze submit --size blog": 3}
    submits = sorted((c for c in commands if c.split()[1] == "submit"), key=lambda c: order.get(c, -1))
    for command in submits:
        ran = _run(as_run(command, walk.values), walk.root, env)
        walk.ran[command] = ran
        found = re.search(r"^submitted (raysubmit_\w+)", ran.stdout, re.M)
        if found and command == "skymaze submit --size blog":
            walk.values["job"] = found.group(1)
        if found and command == "skymaze submit --size blog --supervise":
            walk.values["supervised_job"] = found.group(1)
    for job in (walk.values.get("job"), walk.values.get("supervised_job")):
        assert job, {c: walk.ran[c].stdout + walk.ran[c].stderr for c in submits}
        _wait_for_job_end(walk.ray_url, job)
    for command in commands:
        if command not in submits:
            walk.ran[command] = _run(as_run(command, walk.values), walk.root, env)


def _walk_moto(walk: Walk, commands: list[str]) -> None:
    import boto3

    options = {"endpoint_url": walk.moto_url, "region_name": REGION, "aws_access_key_id": "testing",
               "aws_secret_access_key": "testing"}
    s3 = boto3.client("s3", **options)
    for bucket in (ARTIFACTS_BUCKET,):
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    # moto 5.2's instance-type enum predates g7e: any GPU type stands in for the 3 workers of profile blog
    group = {"InstanceGroupName": "workers", "InstanceType": "ml.g5.12xlarge", "InstanceCount": 3,
             "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/x", "OnCreate": "on_create.sh"},
             "ExecutionRole": f"arn:aws:iam::{MOTO_ACCOUNT}:role/node", "ThreadsPerCore": 1}
    boto3.client("sagemaker", **options).create_cluster(ClusterName=HYPERPOD_CLUSTER, InstanceGroups=[group])
    for command in commands:  # the cluster's pods name their artifacts bucket (infra/stacks/ray.py)
        walk.ran[command] = _run(as_run(command, walk.values), walk.root,
                                 {**_moto_env(walk), "SKYMAZE_ARTIFACTS": f"s3://{ARTIFACTS_BUCKET}"})


class _Server:
    """A `skymaze serve` command in the background, its output in a log file, stopped with SIGTERM."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.log = cwd / f"serve-{len(list(cwd.glob('serve-*.log')))}.log"
        with self.log.open("w") as sink:
            self.process = subprocess.Popen(_argv(command, cwd), cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                            text=True)
        self.argv = self.process.args
        started = time.monotonic()
        deadline = time.monotonic() + SERVE_START_TIMEOUT_S
        try:
            while "Ctrl-C stops the server" not in self.log.read_text():
                assert self.process.poll() is None, self.log.read_text()[-3000:]
                assert time.monotonic() < deadline, self.log.read_text()[-3000:]
                time.sleep(POLL_S)
        except BaseException:  # a server that never got ready must not load the machine for the tests after
            self.process.kill()
            self.process.wait(timeout=120)
            raise
        self.ready_output = self.log.read_text()
        self.started = started

    def wall_s(self) -> float:
        return time.monotonic() - self.started

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


PORT_TRIES = 3  # a free port is free when picked; on a shared machine another process may take it first
# What `skymaze serve` says of a port taken before it held it (workload/cli/serve.py), and what Serve's proxy
# says of one it could not bind (ray/serve/_private/http_util.py).
PORT_TAKEN = ("already in use", "Failed to bind to address")


def _start_server(walk: Walk, key: str, command: Callable[[], str], env: dict[str, str]) -> _Server:
    """A server on a port picked just before it starts (``walk.values[key]``, which the commands after it
    use); a fresh port when another process took it in between."""
    from workload.localhost import free_port

    for attempt in range(PORT_TRIES):
        walk.values[key] = str(free_port())
        try:
            return _Server(command(), walk.root, env)
        except AssertionError as error:
            if not any(said in str(error) for said in PORT_TAKEN) or attempt == PORT_TRIES - 1:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


def _walk_endpoint(walk: Walk, commands: list[str]) -> None:
    """Promote to a folder, serve README's way and evaluate; then the cluster's evaluate against a
    stand-in endpoint serving the adapter promoted to (moto's) S3 under the cluster's model id."""
    env = _env(walk.home)
    for command in (c for c in commands if c.split()[1] == "promote"):
        walk.ran[command] = _run(as_run(command, walk.values), walk.root, env)
    (serve,) = [c for c in commands if c.split()[1] == "serve"]
    server = _start_server(walk, "port", lambda: as_run(serve, walk.values), env)
    try:
        for command in (c for c in commands if c.split()[1] == "evaluate" and STANDIN_MODEL_ID not in c):
            walk.ran[command] = _run(as_run(command, walk.values), walk.root, env)
        walk.ran[CLIENT_EXAMPLE] = _run_client_example(walk, env)
    finally:
        walk.ran[serve] = Ran(server.argv, server.stop(), server.ready_output, "", server.wall_s())
    adapters = _download_adapters(walk, walk.root / "cluster-adapters")

    def standin() -> str:
        return (f"skymaze serve --model runs/latest/models/sft --model-id {STANDIN_MODEL_ID} --adapters {adapters} "
                f"--port {walk.values['cluster_port']}")

    server = _start_server(walk, "cluster_port", standin, _moto_env(walk))
    try:
        for command in (c for c in commands if c.split()[1] == "evaluate" and STANDIN_MODEL_ID in c):
            walk.ran[command] = _run(as_run(command, walk.values), walk.root, env)
    finally:
        server.stop()


def _download_adapters(walk: Walk, folder: Path) -> Path:
    """The adapters promoted to (moto's) S3, copied to ``folder`` as the cluster endpoint reads them."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=walk.moto_url, region_name=REGION, aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=ARTIFACTS_BUCKET, Prefix="adapters/"):
        for item in page.get("Contents", []):
            target = folder / item["Key"].removeprefix("adapters/")
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(ARTIFACTS_BUCKET, item["Key"], str(target))
    return folder


CLIENT_EXAMPLE = "README's OpenAI client example"


def _run_client_example(walk: Walk, env: dict[str, str]) -> Ran:
    """README's Python example (any OpenAI client) against README's server, with the table's substitutions."""
    text = docs.text()
    shown = re.search(r"Any OpenAI\s+client works:\n\n```python\n(.*?)```", text, re.S)
    assert shown, "the docs lost README's OpenAI client example (`Any OpenAI client works:` and a python block)"
    code = shown.group(1)
    for old, new in (("http://127.0.0.1:8000", "http://127.0.0.1:{port}"),):
        assert old in code, old
        code = code.replace(old, new.format_map(walk.values))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], cwd=walk.root, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    return Ran(done.args, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


REHEARSE_AGAIN = "README's `make rehearse`, run again"


def _walk_rehearse(walk: Walk) -> None:
    """`make rehearse` a second time (with the session rehearsal's settings, so it finds that run), in a fresh
    folder holding a copy of the run: a finished run resumes and its report keeps its measurements."""
    folder = walk.root.parent / "rehearse"
    folder.mkdir()
    shutil.copytree(walk.run_root.parent, folder / "runs", symlinks=True)
    walk.ran[REHEARSE_AGAIN] = _run(f"skymaze rehearse {walk.values['smoke_sets']}", folder, _env(walk.home))
    walk.values["rehearse_root"] = str(folder)


def _walk_context(walk: Walk, commands: list[str]) -> None:
    """In a folder of their own, in order (`skymaze use` before `skymaze use blog`): a recorded size would
    change what the other commands act on."""
    folder = walk.root.parent / "context"
    folder.mkdir()
    for command in commands:
        walk.ran[command] = _run(as_run(command, walk.values), folder, _env(walk.home))
    walk.values["context_root"] = str(folder)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    """moto's server (STS, S3, SageMaker) in its own process on 127.0.0.1, for the walk and its checks."""
    from tests.moto_server import start_moto_server

    server, port = start_moto_server()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.fixture(scope="module")
def walk(rehearsal_smoke, skyrl_ray_head, moto_url, tmp_path_factory) -> Walk:
    from workload.localhost import free_port

    done, runs_dir = rehearsal_smoke
    assert done.returncode == 0, done.stderr[-3000:]
    run_root = (runs_dir / os.readlink(runs_dir / "latest")).resolve()
    report = json.loads((run_root / "report.json").read_text())
    base = tmp_path_factory.mktemp("readme")
    root, home, shared = base / "user", base / "home", base / "shared"
    for folder in (root, home, shared, base / "heldout"):
        folder.mkdir()
    stage_model(shared)  # README step 4's preflight downloads the SFT checkpoint; the replay has no network
    (root / "runs").symlink_to(runs_dir)  # the rehearsal's own folder: adapters name their base by its path
    values = {"run_root": str(run_root), "step": str(report["best_step"]), "port": str(free_port()),
              "cluster_port": str(free_port()), "shared": str(shared), "heldout_dir": str(base / "heldout"),
              "smoke_sets": " ".join(f"--set {s}" for s in SMOKE_OVERRIDES)}
    walk = Walk(root, home, run_root, report["best_step"], values, skyrl_ray_head.dashboard_url, moto_url)
    commands = sorted({normalized(c) for c, _ in readme_commands(docs.text())} - set(NOT_REPLAYED))
    by_kind: dict[str, list[str]] = {}
    for command in commands:
        by_kind.setdefault(_kind(command), []).append(command)
    started, cpu_before = time.monotonic(), os.times()
    for command in by_kind.get("local", []) + by_kind.get("no-account", []):
        walk.ran[command] = _run(as_run(command, values), root, _env(home))
    for command in (c for c in by_kind.get("no-account", []) if c.split()[1] != "preflight"):  # read-only: no dry run
        walk.dry_runs[command] = _run(f"{as_run(command, values)} --dry-run", root, _env(home))
    _walk_ray(walk, by_kind.get("ray", []))
    _walk_moto(walk, by_kind.get("moto", []))
    _walk_endpoint(walk, by_kind.get("endpoint", []))
    _walk_rehearse(walk)
    _walk_context(walk, by_kind.get("context", []))
    cpu = os.times()
    cpu_s = sum(cpu[:4]) - sum(cpu_before[:4])  # this process and its waited-for children (the commands)
    print(f"README walk: {len(walk.ran)} commands in {time.monotonic() - started:.0f} s wall, {cpu_s:.0f} s CPU "
          "(the Ray head's and moto's own CPU not included)")
    for command, ran in sorted(walk.ran.items(), key=lambda item: -item[1].wall_s)[:8]:
        print(f"  {ran.wall_s:6.1f} s  {command}")
    return walk


# ---------------------------------------------------------------- what each command must show

def _ok(ran: Ran) -> None:
    assert ran.returncode == 0, f"{ran.argv}\n{ran.stdout[-2000:]}\n{ran.stderr[-3000:]}"
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]


def _one_line_refusal(ran: Ran, code: int, message: str) -> None:
    assert ran.returncode == code, f"{ran.argv}\n{ran.stdout[-2000:]}\n{ran.stderr[-3000:]}"
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    errors = [line for line in ran.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and re.search(message, errors[0]), ran.stderr


def _refused_for_credentials(walk: Walk, ran: Ran) -> None:
    assert ran.returncode == 1 and ran.stderr.strip().splitlines() == [CREDENTIALS_REFUSAL], ran.stderr


def _version(walk: Walk, ran: Ran) -> None:
    from workload.cli.main import package_version

    _ok(ran)
    assert ran.stdout.strip() == f"skymaze {package_version()}"


def _completion(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    bashrc = (walk.home / ".bashrc").read_text()
    (script,) = re.findall(r"source '([^']+)'", bashrc)
    registered = subprocess.run(["bash", "-c", f"source '{script}' && complete -p skymaze"], capture_output=True,
                                text=True, timeout=60)
    assert registered.returncode == 0 and "skymaze" in registered.stdout, registered.stderr


def _gpus_of(profile: str) -> int:
    from workload.deployment.fit import INSTANCES
    from workload.ops.profiles import settings_for

    settings = settings_for(profile, {})
    return settings.worker_count * INSTANCES[settings.worker_instance_type].gpus


def _plan_fits(profile: str) -> Callable[[Walk, Ran], None]:
    def check(walk: Walk, ran: Ran) -> None:
        _ok(ran)
        assert re.search(rf"^GPUs:\s+{_gpus_of(profile)} \(FSDP policy\)", ran.stdout, re.M), ran.stdout
        assert f"cluster fit (profile {profile};" in ran.stdout
    return check


def _plan_shows_readmes_fit(walk: Walk, ran: Ran) -> None:
    _plan_fits("blog")(walk, ran)
    text = docs.text()
    shown = text[text.index("```text\ncluster fit (profile blog;") + len("```text\n"):]
    shown = shown[: shown.index("```")]
    assert shown in ran.stdout


def _prints_readmes_output(walk: Walk, ran: Ran, command: str) -> None:
    _ok(ran)
    shown = shown_output(command)
    assert ran.stdout.splitlines()[: len(shown)] == shown


def _cost_guard_line(walk: Walk, ran: Ran) -> None:
    """README shows this command piped: the pipe as written (by bash) prints what README shows."""
    _ok(ran)
    (line,) = [line.removeprefix("$ ") for line in docs.text().splitlines()
               if line.startswith("$ skymaze cost --size blog --hours 12 --left-up-hours 72 --guard-hours 14 |")]
    argv = in_setup_shell(line, walk.root)
    argv[-1] = argv[-1].replace(" && exec ", " && ")  # a pipeline: bash runs it
    piped = subprocess.run(["bash", "-o", "pipefail", *argv[1:]], cwd=walk.root, env=_env(walk.home),
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.splitlines() == shown_output(normalized(line))


def _totals_of(ran: Ran) -> tuple[float, float]:
    found = re.search(r"^total\s+([\d.]+)\s+([\d.]+)$", ran.stdout, re.M)
    assert found, ran.stdout
    return float(found.group(1)), float(found.group(2))


def _cost_small(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    assert ran.stdout.startswith("Cost of profile 'small' deployed for 1 h")
    assert re.search(r"^total\s+[\d.]+\s+[\d.]+$", ran.stdout, re.M), ran.stdout


def _recipe_list(walk: Walk, ran: Ran) -> None:
    from workload.local.config import available_recipes as rehearsal
    from workload.skyrl.recipe import available_recipes as cluster

    _ok(ran)
    assert sorted(line.split()[0] for line in ran.stdout.splitlines()[: len(cluster()) + len(rehearsal())]) == \
        sorted([*cluster(), *rehearsal()])


def _recipe_show_blog(walk: Walk, ran: Ran) -> None:
    from workload.skyrl.recipe import load_recipe

    _ok(ran)
    assert ran.stdout.splitlines()[: len(load_recipe("blog").overrides())] == load_recipe("blog").overrides()


def _fields_table(name: str) -> Callable[[Walk, Ran], None]:
    def check(walk: Walk, ran: Ran) -> None:
        _ok(ran)
        text = docs.text()
        table = text[text.index(f"<!-- settings-table: {name} -->") :].split("\n", 1)[1]
        rows = [line for line in table[: table.index("<!-- /settings-table -->")].splitlines() if line]
        assert rows and all(row in ran.stdout.splitlines() for row in rows)
    return check


def _recipe_ok(name: str) -> Callable[[Walk, Ran], None]:
    def check(walk: Walk, ran: Ran) -> None:
        _ok(ran)
        assert ran.stdout.startswith(f"recipe '{name}': ok"), ran.stdout
        for hint in re.findall(r"^  (skymaze plan .+)$", ran.stdout, re.M):  # the plan it suggests runs
            assert _run(hint, walk.root, _env(walk.home)).returncode == 0, hint
    return check


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def _maze_show(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    assert _png_size(walk.root / "maze.png") == (9 * 25, 9 * 25)  # 9x9 cells of VisGym's 25 px
    assert (walk.root / "maze.png").read_bytes() == (ROOT / "docs" / "maze-seed0.png").read_bytes()
    assert (walk.root / "episode.png").read_bytes() == (ROOT / "docs" / "maze-seed0-solution.png").read_bytes()
    assert "shortest path: 12 moves + stop = 13 turns" in ran.stdout


def _maze_heldout(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    (row,) = [line for line in docs.text().splitlines() if line.startswith("| `easy-64` |")]
    assert row in ran.stdout.splitlines()
    assert len(re.findall(r"^\s+\d+\s+\[\d, \d\] -> \[\d, \d\]\s+\d+$", ran.stdout, re.M)) == 64


def _maze_freeze(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    (name,) = [f"{word}.json" for word in shlex.split(ran.argv[-1]) if word in ("easy-64", "rehearsal-7x7-maps")]
    committed = ROOT / "workload" / "maze" / "heldout" / name
    assert (Path(walk.values["heldout_dir"]) / name).read_bytes() == committed.read_bytes()


def _teardown_plan(walk: Walk, ran: Ran) -> None:
    _prints_readmes_output(walk, ran, "skymaze teardown --size blog --dry-run")


def _submitted(recipe: str) -> Callable[[Walk, Ran], None]:
    def check(walk: Walk, ran: Ran) -> None:
        _ok(ran)
        assert re.search(rf"^submitted raysubmit_\w+ \(recipe {recipe}, run maze-{recipe}, {walk.ray_url}\)$",
                         ran.stdout, re.M), ran.stdout
    return check


def _preflight(walk: Walk, ran: Ran) -> None:
    import pyarrow.parquet as pq

    _submitted("blog")(walk, ran)
    assert re.search(r"^raysubmit_\w+: SUCCEEDED", ran.stdout, re.M), ran.stdout
    data = Path(walk.values["shared"]) / "runs" / "maze-blog" / "data"
    assert pq.read_metadata(data / "train.parquet").num_rows == 600  # 8 epochs x 20 steps x 30 / 8 rollouts
    assert pq.read_metadata(data / "eval.parquet").num_rows == 64


def _preflight_small(walk: Walk, ran: Ran) -> None:
    """deploy.md's `small` try: the preflight stages small's tickets (32 a step, 20-step epochs) in maze-small."""
    import pyarrow.parquet as pq

    _submitted("small")(walk, ran)
    assert re.search(r"^raysubmit_\w+: SUCCEEDED", ran.stdout, re.M), ran.stdout
    data = Path(walk.values["shared"]) / "runs" / "maze-small" / "data"
    assert pq.read_metadata(data / "train.parquet").num_rows == 640 and pq.read_metadata(data / "eval.parquet").num_rows == 64


def _short_run_small(walk: Walk, ran: Ran) -> None:
    """The try's 2-step run keeps the run the preflight staged (--keep-run-name) and waits for its end, which here
    (no SkyRL outside the trainer image) is FAILED: exit 1, the job's state on stdout."""
    _one_line_refusal(ran, 1, r"job raysubmit_\w+ is FAILED; see `skymaze logs raysubmit_\w+`")
    assert re.search(rf"^submitted raysubmit_\w+ \(recipe small, run maze-small, {walk.ray_url}\)$", ran.stdout, re.M)
    assert re.search(r"^raysubmit_\w+: FAILED", ran.stdout, re.M) and NOT_IN_IMAGE in ran.stdout, ran.stdout


def _plan_capped(walk: Walk, ran: Ran) -> None:
    _plan_fits("small")(walk, ran)
    assert re.search(r"^steps:\s+2 = trainer\.max_training_steps, of 8 epochs x 20 steps \(640 tickets\)$", ran.stdout,
                     re.M), ran.stdout
    assert "endpoint:" not in ran.stdout  # small deploys no endpoint


def _supervised_submit(walk: Walk, ran: Ran) -> None:
    _submitted("blog")(walk, ran)
    assert f"supervised: the skymaze-supervisor Deployment takes {walk.values['supervised_job']} up" in ran.stdout


NOT_IN_IMAGE = "SkyRL is not importable here"  # the entrypoint outside the trainer image (no SkyRL here)


def _status_failed(walk: Walk, ran: Ran) -> None:
    _one_line_refusal(ran, 1, rf"job {walk.values['job']} failed; see `skymaze logs {walk.values['job']}`")
    assert ran.stdout.startswith(f"{walk.values['job']}: FAILED") and NOT_IN_IMAGE in ran.stdout


def _logs(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    assert f"run maze-blog (recipe blog) in {walk.values['shared']}/runs/maze-blog" in ran.stdout
    assert NOT_IN_IMAGE in ran.stdout


def _jobs_list(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    rows = {line.split()[0]: line.split()[1] for line in ran.stdout.splitlines() if line.startswith("raysubmit_")}
    assert rows[walk.values["job"]] == "FAILED" and rows[walk.values["supervised_job"]] == "FAILED"
    assert "SUCCEEDED" in rows.values()  # the preflight


def _stop(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    assert ran.stdout.startswith(f"{walk.values['job']}: already finished")


def _supervise_gives_up(walk: Walk, ran: Ran) -> None:
    _one_line_refusal(ran, 1, r"gave up on run maze-blog: bad recipe or configuration")
    decisions = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    assert decisions[0]["action"] == "give_up" and decisions[0]["cause"] == "bad_recipe"


def _supervise_in_cluster(walk: Walk, ran: Ran) -> None:
    _one_line_refusal(ran, 2, r"--in-cluster reads the pod's service account")


def _cluster_status(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    lines = ran.stdout.splitlines()
    assert lines[0].startswith(f"AWS account {MOTO_ACCOUNT}, region {REGION}, as ")
    assert lines[1] == f"HyperPod {HYPERPOD_CLUSTER}: InService"
    assert sum(1 for line in lines if line.strip().startswith("node") and line.endswith("healthy")) == 3
    assert f"Ray at {walk.ray_url}: " in ran.stdout
    assert walk.values["job"] in ran.stdout and walk.values["supervised_job"] in ran.stdout


def _promoted_to_s3(bucket: str) -> Callable[[Walk, Ran], None]:
    def check(walk: Walk, ran: Ran) -> None:
        import boto3

        _ok(ran)
        s3 = boto3.client("s3", endpoint_url=walk.moto_url, region_name=REGION, aws_access_key_id="testing",
                          aws_secret_access_key="testing")
        manifest = json.loads(s3.get_object(Bucket=bucket, Key="adapters/maze-grpo/manifest.json")["Body"].read())
        policy = walk.run_root / "exports" / f"global_step_{walk.step}" / "policy"
        weights = s3.get_object(Bucket=bucket, Key="adapters/maze-grpo/adapter_model.safetensors")["Body"].read()
        assert weights == (policy / "adapter_model.safetensors").read_bytes()
        assert manifest["source"]["step"] == walk.step and manifest["name"] == "maze-grpo"
    return check


def _promoted_to_folder(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    policy = walk.run_root / "exports" / f"global_step_{walk.step}" / "policy"
    promoted = walk.root / "adapters" / "maze-rehearsal"
    assert (promoted / "adapter_model.safetensors").read_bytes() == (policy / "adapter_model.safetensors").read_bytes()
    assert json.loads((promoted / "manifest.json").read_text())["source"] == {"run_dir": "runs/latest", "step": walk.step}


def _served(walk: Walk, ran: Ran) -> None:
    assert ran.returncode == 0, ran.stdout[-3000:]  # SIGTERM stops it cleanly
    assert f"serving at http://127.0.0.1:{walk.values['port']}/v1 (OpenAI API)" in ran.stdout
    assert "models: maze-sft, maze-sft:selected" in ran.stdout
    assert "Next:" in ran.stdout.split("Ctrl-C stops the server")[0]  # the next step while it serves, not after


def _in_process(walk: Walk) -> dict:
    return json.loads((walk.run_root / "evals" / f"global_step_{walk.step}.json").read_text())


def _evaluated_as_in_process(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    replayed = json.loads((walk.root / "evals" / "selected" / "report.json").read_text())
    in_process = _in_process(walk)
    assert replayed["set"] == in_process["set"] and replayed["total"] == in_process["total"] > 0
    assert replayed["solved"] == in_process["solved"]
    assert [e["actions"] for e in replayed["episodes"]] == [e["actions"] for e in in_process["episodes"]]


def _cluster_evaluate_refused(walk: Walk, ran: Ran) -> None:
    """The stand-in serves the rehearsal's adapter under the cluster's id and states how it was trained
    (GET /v1/models): the blog's --heldout easy-64 contradicts it, and evaluate says so in one line, exit 2,
    before playing (the cluster's vLLM endpoint states nothing, and easy-64 is its adapter's set)."""
    _one_line_refusal(ran, 2, r"--heldout easy-64 but the adapter in http://127\.0\.0\.1:\d+/v1/models was trained "
                              r"with rehearsal-7x7-maps")


def _rehearsal_resumed(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    # The run is finished on disk: every phase is read back, nothing is trained or served again.
    assert re.search(r"^\[grpo\] finished on disk at checkpoint global_step_\d+: nothing to train", ran.stdout,
                     re.M), ran.stdout
    assert re.search(r"^\[serve\] \S+ already evaluated through the endpoint", ran.stdout, re.M), ran.stdout
    assert "rollout actors;" not in ran.stdout and "/v1 serving" not in ran.stdout, ran.stdout
    resumed_root = Path(walk.values["rehearse_root"]) / "runs" / walk.run_root.name
    resumed = json.loads((resumed_root / "report.json").read_text())
    original = json.loads((walk.run_root / "report.json").read_text())
    for key in ("baseline", "selected", "final"):
        assert resumed[key]["per_maze"] == original[key]["per_maze"], key
    assert resumed["served"]["per_maze"] == original["served"]["per_maze"] == original["selected"]["per_maze"]
    # The rerun only read the run back: the report keeps what the run that made it measured.
    for key in ("wall_seconds", "cpu_seconds", "phase_seconds", "peak_memory_gib", "sft"):
        assert resumed[key] == original[key], key
    assert resumed["reread"]["wall_seconds"] < original["wall_seconds"]


def _nothing_recorded(walk: Walk, ran: Ran) -> None:
    _ok(ran)
    assert ran.stdout.startswith("no deployment recorded in .skymaze/context.json"), ran.stdout


def _use_recorded(walk: Walk, ran: Ran) -> None:
    """`use blog` records the size; a later command in that folder acts on it without naming it."""
    _ok(ran)
    assert ran.stdout.startswith("recorded size blog in us-west-2 (EKS skymaze-eks, HyperPod skymaze-hyperpod"), ran.stdout
    plan = _run("skymaze plan --json", Path(walk.values["context_root"]), _env(walk.home))
    _ok(plan)
    assert (json.loads(plan.stdout)["profile"], json.loads(plan.stdout)["policy_gpus"]) == ("blog", 6)


def _refused(walk: Walk, ran: Ran) -> None:
    """Without an account: one line, before any synth. Its --dry-run (no account needed) accepts README's
    settings and prints what it would run."""
    _refused_for_credentials(walk, ran)
    (command,) = [c for c, r in walk.ran.items() if r is ran]
    dry = walk.dry_runs[command]
    _ok(dry)
    assert dry.stdout.startswith(("would run: cdk ", "Teardown plan for profile ")), dry.stdout


CHECKS: dict[str, Callable[[Walk, Ran], None]] = {
    "skymaze --version": _version,
    "skymaze --install-completion": _completion,
    "skymaze cost --size small --hours 1": _cost_small,
    "skymaze cost --size small --hours 5": lambda w, r: (_ok(r), _totals_of(r)),
    "skymaze cost --size blog --hours 1": lambda w, r: (_ok(r), r.stdout.startswith("Cost of profile 'blog' deployed for 1 h")),
    "skymaze cost --size blog --hours 14": lambda w, r: _prints_readmes_output(
        w, r, "skymaze cost --size blog --hours 14"),
    "skymaze cost --size blog --hours 12 --left-up-hours 72 --guard-hours 14": _cost_guard_line,
    "skymaze plan": _plan_fits("small"),
    "skymaze plan --size blog": _plan_shows_readmes_fit,
    "skymaze plan --size small --set trainer.max_training_steps=2": _plan_capped,
    "skymaze plan --recipe blog --size blog": _plan_fits("blog"),
    "skymaze recipe list": _recipe_list,
    "skymaze recipe show blog": _recipe_show_blog,
    "skymaze recipe show blog --fields": _fields_table("blog"),
    "skymaze recipe show local --fields": _fields_table("local"),
    "skymaze recipe check": _recipe_ok("small"),
    "skymaze recipe check blog --size blog": _recipe_ok("blog"),
    "skymaze maze show --seed 0 --size 9 -o maze.png --strip episode.png": _maze_show,
    "skymaze maze heldout --heldout easy-64 --mazes": _maze_heldout,
    "skymaze maze freeze --heldout easy-64": _maze_freeze,
    "skymaze maze freeze --heldout rehearsal-7x7-maps": _maze_freeze,
    "skymaze teardown --size blog --dry-run": _teardown_plan,
    "skymaze deploy": _refused,
    "skymaze deploy --bootstrap": _refused,
    "skymaze deploy --skip-preflight": _refused,
    "skymaze preflight": _refused_for_credentials,
    "skymaze preflight --size blog": _refused_for_credentials,
    "skymaze deploy --size blog": _refused,
    "skymaze deploy --size small -c max_deployed_hours=6 -c alert_emails=you@example.com": _refused,
    "skymaze teardown --size small": _refused,
    "skymaze deploy --size blog --bootstrap": _refused,
    "skymaze deploy --size blog -c max_deployed_hours=16 -c alert_emails=you@example.com": _refused,
    "skymaze deploy --size blog -c alert_emails=ml@example.com -c budget_usd_per_month=3000 "
    "-c max_deployed_hours=14 -c supervise.group_idle_s=1800": _refused,
    "skymaze deploy --size blog -c worker_count=2 -c removal=retain": _refused,
    "skymaze deploy --size blog -c vpc_id=vpc-0123456789abcdef0 -c private_subnet_ids=subnet-0aaaaaaaaaaaaaaaa,"
    "subnet-0bbbbbbbbbbbbbbbb -c private_subnet_azs=us-west-2a,us-west-2b": _refused,
    "skymaze deploy --size blog -c vpc_id=vpc-0123456789abcdef0 -c private_subnet_ids=subnet-0aaaaaaaaaaaaaaaa "
    "-c private_subnet_azs=us-west-2a -c eks_cluster_name=platform -c eks_cluster_security_group_id=sg-0cccccccccccccccc":
    _refused,
    "skymaze diff --size blog": _refused,
    "skymaze teardown": _refused,
    "skymaze teardown --keep-data": _refused,
    "skymaze teardown --size blog": _refused,
    "skymaze teardown --size blog --keep-data": _refused,
    "skymaze submit": _submitted("small"),
    "skymaze submit --size blog": _submitted("blog"),
    "skymaze submit --size blog --preflight --wait-s 600": _preflight,
    "skymaze submit --size blog --supervise": _supervised_submit,
    "skymaze submit --size small --preflight --wait-s 600": _preflight_small,
    "skymaze submit --size small --keep-run-name --set trainer.max_training_steps=2 --wait-s 5400": _short_run_small,
    "skymaze status": _status_failed,
    "skymaze logs": _logs,
    "skymaze logs --follow": _logs,
    "skymaze logs -f": _logs,
    "skymaze jobs list": _jobs_list,
    "skymaze stop": _stop,
    "skymaze supervise": _supervise_gives_up,
    "skymaze supervise --watch --in-cluster": _supervise_in_cluster,
    "skymaze cluster status --size blog": _cluster_status,
    "skymaze promote --run /shared/runs/maze-blog --name maze-grpo": _promoted_to_s3(ARTIFACTS_BUCKET),
    "skymaze promote --run runs/latest --to adapters/maze-rehearsal": _promoted_to_folder,
    "skymaze serve --model runs/latest/models/sft --model-id maze-sft --adapters runs/latest/served --port 8000": _served,
    "skymaze evaluate --endpoint http://127.0.0.1:8000 --model maze-sft:selected --wait-s 300 --out evals/selected":
    _evaluated_as_in_process,
    "skymaze evaluate --endpoint http://127.0.0.1:8000 --model VisGym/visgym_model/mixed_qwen3vl:maze-grpo "
    "--heldout easy-64 --out evals/maze-grpo": _cluster_evaluate_refused,
    "skymaze use": _nothing_recorded,
    "skymaze use blog": _use_recorded,
}


@pytest.mark.slow
@pytest.mark.e2e
def test_readmes_client_example_replies_as_the_adapter_played_in_process(walk):
    """The docs' example asks the served adapter for its first move on the first held-out maze."""
    from workload.maze.heldout import load_set

    ran = walk.ran[CLIENT_EXAMPLE]
    _ok(ran)
    first = _in_process(walk)["episodes"][0]
    from workload.maze.actions import extract_action

    assert first["seed"] == load_set(_in_process(walk)["set"]).entries[0]["seed"]
    # The episode records the action the reply holds ("" for a reply without one), as the game parses it.
    assert (extract_action(ran.stdout.strip()) or "") == first["actions"][0], ran.stdout


def _hints(stdout: str) -> list[str]:
    """The commands under each "Next:" of a command's output, comments and a trailing & removed."""
    lines, hints = stdout.splitlines(), []
    for start in (i for i, line in enumerate(lines) if line.strip() == "Next:"):
        for line in lines[start + 1:]:
            if not line.startswith("  "):
                break
            hints.append(normalized(line.split("  #")[0].strip().removesuffix("&")))
    return hints


@pytest.mark.slow
@pytest.mark.e2e
def test_every_hint_the_walk_prints_parses_and_the_offline_ones_run(walk):
    """A user who follows the printed hints: each parses; those that need no cluster, server or new
    rehearsal run (exit 0), those that need an AWS account refuse in one line."""
    from tests.test_readme_commands import check

    hints = sorted({hint for ran in walk.ran.values() for hint in _hints(ran.stdout) if hint.startswith("skymaze ")})
    assert len(hints) >= 10, hints
    for hint in hints:
        check(hint, complete=True)
        kind = _kind(hint)
        if kind == "local":
            _ok(_run(hint, walk.root, _env(walk.home)))
        elif kind == "no-account":
            _refused_for_credentials(walk, _run(hint, walk.root, _env(walk.home)))


def _readme_commands() -> set[str]:
    return {normalized(c) for c, _ in readme_commands(docs.text())}


def test_a_fresh_shell_finds_skymaze_only_after_readmes_setup(tmp_path):
    """A new shell has no `skymaze` (command not found); README's setup, pasted as shown, puts it on PATH."""
    setup = readme_setup()
    assert setup[0] == "make install" and "source .venv/bin/activate" in setup, setup
    env = _env(tmp_path)
    assert shutil.which("skymaze", path=env["PATH"]) is None, "the test's PATH still holds a virtual environment"
    bare = subprocess.run(["bash", "-c", "skymaze --version"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    assert bare.returncode == 127 and "skymaze: command not found" in bare.stderr, bare
    ran = _run("skymaze --version", tmp_path, env)
    _version(None, ran)


def test_every_readme_command_is_replayed_or_excused():
    shown = _readme_commands()
    assert not shown & set(NOT_REPLAYED).intersection(CHECKS), "a command is both replayed and excused"
    assert sorted(shown - set(CHECKS) - set(NOT_REPLAYED)) == [], "README commands with no replay: add a check"
    assert sorted((set(CHECKS) | set(NOT_REPLAYED)) - shown) == [], "checks of commands README no longer shows"


def test_the_replay_changes_only_the_fsx_path_and_the_port():
    values = {"run_root": "/r", "port": "1", "cluster_port": "2", "shared": "/s", "heldout_dir": "/h"}
    assert as_run("skymaze evaluate --endpoint http://127.0.0.1:8000 --model VisGym/visgym_model/mixed_qwen3vl:maze-grpo",
                  values) == "skymaze evaluate --endpoint http://127.0.0.1:2 --model VisGym/visgym_model/mixed_qwen3vl:maze-grpo"
    for command in CHECKS:
        replayed = as_run(command, values)
        for start, flags, _why in ADDED:
            if command.startswith(start):
                replayed = replayed.removesuffix(f" {flags.format_map(values)}")
        expected = command.replace("/shared/runs/maze-blog", "/r").replace("http://127.0.0.1:8000", "http://127.0.0.1:1")
        expected = expected.replace("--port 8000", "--port 1")
        if STANDIN_MODEL_ID in command:
            expected = expected.replace("http://127.0.0.1:1", "http://127.0.0.1:2")
        assert replayed == expected, command


def test_a_rerun_rehearsal_resumes_and_keeps_its_report(walk):
    _rehearsal_resumed(walk, walk.ran[REHEARSE_AGAIN])


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("command", sorted(CHECKS))
def test_readme_command_runs_as_shown(walk, command):
    assert command in walk.ran, f"{command!r} was not replayed"
    CHECKS[command](walk, walk.ran[command])
