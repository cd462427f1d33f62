"""What a training job gets from the submitting shell: env vars, secrets, Ray runtime_env, a tracker.

Secrets travel in the job's Ray ``runtime_env.env_vars`` only: never in the recipe, the job
spec (job.json) or the job metadata, and never printed (:func:`describe` names keys, not values).
Anyone who can read the Ray dashboard's job details can read them, as with ``ray job submit``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workload.errors import UsageError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TRACKERS = ("console", "tensorboard", "wandb", "mlflow", "swanlab")
"""SkyRL 0.4.0 ``trainer.logger`` values (skyrl/train/utils/tracking.py)."""
TRACKER_REQUIRED_ENV = {
    "wandb": ("WANDB_API_KEY",),
    "mlflow": ("MLFLOW_TRACKING_URI",),
    "swanlab": ("SWANLAB_API_KEY",),
}
"""The env vars each tracker's client cannot log without."""
TRACKER_OPTIONAL_ENV = {"mlflow": ("MLFLOW_TRACKING_TOKEN",), "wandb": ("WANDB_ENTITY", "WANDB_BASE_URL")}
TENSORBOARD_SUBDIR = "tensorboard"
"""SkyRL's tensorboard logger writes to $TENSORBOARD_DIR, by default ./tensorboard_log in the job's
temporary working dir, which Ray deletes: the job's run dir keeps it instead."""
RESERVED_RUNTIME_ENV_KEYS = ("working_dir",)
"""skymaze uploads job.json as the working dir; a second one would replace it."""


class JobEnvError(UsageError):
    """A malformed --env, a missing shell variable, or a runtime_env skymaze cannot merge (exit 2, a ValueError)."""


@dataclass(frozen=True)
class JobEnv:
    """The env vars and runtime_env extras of one submission; ``secret_keys`` are never shown."""

    env_vars: Mapping[str, str] = field(default_factory=dict)
    secret_keys: frozenset[str] = frozenset()
    runtime_env: Mapping[str, object] = field(default_factory=dict)

    def describe(self) -> str:
        """``job env: A, B (from the shell, not shown)`` - names only."""
        if not self.env_vars:
            return ""
        plain = [k for k in sorted(self.env_vars) if k not in self.secret_keys]
        hidden = [k for k in sorted(self.env_vars) if k in self.secret_keys]
        parts = [", ".join(plain)] if plain else []
        if hidden:
            parts.append(f"{', '.join(hidden)} (from the shell, not shown)")
        return "job env: " + "; ".join(parts)


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """``["A=1", "B=x=y"]`` -> ``{"A": "1", "B": "x=y"}``; a bad name or a missing ``=`` is an error."""
    parsed = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.match(key):
            raise JobEnvError(f"--env {key if sep else pair!r}: expected NAME=VALUE with NAME like HF_HOME; "
                              "for a secret use --env-from-shell NAME so its value stays off the command line")
        parsed[key] = value
    return parsed


def from_shell(names: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The values of ``names`` in the submitting shell; a name that is not set is an error naming it."""
    values = {}
    for name in names:
        if not ENV_NAME.match(name):
            raise JobEnvError(f"--env-from-shell {name!r}: expected a variable name like WANDB_API_KEY")
        if name not in environ:
            raise JobEnvError(f"--env-from-shell {name}: {name} is not set in this shell; export it first")
        values[name] = environ[name]
    return values


MAX_RUNTIME_ENV_DEPTH = 16  # Ray's runtime_env fields nest 3 levels at most (container.run_options, conda specs)
TOO_DEEP = (f"--runtime-env-json is nested more than {MAX_RUNTIME_ENV_DEPTH} levels deep; Ray's runtime_env fields "
            "are a few levels (pip, env_vars, working_dir, ...)")


def _depth(value: object) -> int:
    """How deep lists and objects nest in ``value`` (walked without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack += [(child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)]
    return deepest


def parse_runtime_env(text: str | None) -> dict[str, object]:
    """``--runtime-env-json``: a JSON object Ray accepts as runtime_env, minus the keys skymaze sets."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise JobEnvError(f"--runtime-env-json is not JSON ({err.msg} at column {err.colno})") from None
    except RecursionError:  # the decoder nests one call a level
        raise JobEnvError(TOO_DEEP) from None
    if _depth(value) > MAX_RUNTIME_ENV_DEPTH:
        raise JobEnvError(TOO_DEEP)
    if not isinstance(value, dict):
        raise JobEnvError("--runtime-env-json must be a JSON object, e.g. '{\"pip\": [\"rich\"]}'")
    reserved = [key for key in RESERVED_RUNTIME_ENV_KEYS if key in value]
    if reserved:
        raise JobEnvError(f"--runtime-env-json {reserved[0]}: skymaze sets it (the job spec); remove it")
    env_vars = value.get("env_vars", {})
    if not isinstance(env_vars, dict) or not all(isinstance(v, str) for v in env_vars.values()):
        raise JobEnvError("--runtime-env-json env_vars must map names to strings")
    return value


def build_job_env(*, env: Sequence[str], env_from_shell: Sequence[str], runtime_env_json: str | None,
                  tracker: str, run_dir: str, environ: Mapping[str, str]) -> JobEnv:
    """Merge --runtime-env-json, --env and --env-from-shell (later wins) and what ``tracker`` needs.

    A tracker's required variables must be set by one of the flags or in the shell (then they
    are forwarded as secrets); otherwise the job would train for hours and log nowhere.
    """
    if tracker not in TRACKERS:
        raise JobEnvError(f"--tracker {tracker!r}: SkyRL's trainer.logger is one of {', '.join(TRACKERS)}")
    runtime_env = parse_runtime_env(runtime_env_json)
    env_vars = {**runtime_env.pop("env_vars", {}), **parse_env(env)}
    secrets = from_shell(env_from_shell, environ)
    for name in TRACKER_REQUIRED_ENV.get(tracker, ()):
        if name in env_vars or name in secrets:
            continue
        if name not in environ:
            raise JobEnvError(f"--tracker {tracker} needs {name} in the job: export {name}=... in this shell "
                              f"(it is forwarded, not stored), or pass --env-from-shell {name}")
        secrets[name] = environ[name]
    for name in TRACKER_OPTIONAL_ENV.get(tracker, ()):
        if name in environ and name not in env_vars:
            secrets.setdefault(name, environ[name])
    if tracker == "tensorboard":
        env_vars.setdefault("TENSORBOARD_DIR", f"{run_dir}/{TENSORBOARD_SUBDIR}")
    return JobEnv(env_vars={**env_vars, **secrets}, secret_keys=frozenset(secrets), runtime_env=runtime_env)


def runtime_env_for(job_env: JobEnv, working_dir: str) -> dict[str, object]:
    """The runtime_env Ray gets: the user's extras, skymaze's working dir and the merged env vars."""
    merged: dict[str, object] = {**job_env.runtime_env, "working_dir": working_dir}
    if job_env.env_vars:
        merged["env_vars"] = dict(job_env.env_vars)
    return merged
