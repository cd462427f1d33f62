"""Promote a LoRA export to where the serving endpoint loads it: S3 (or a local folder).

Source: ``<run>/exports/global_step_N/policy/`` (SkyRL's ``hf_save_interval`` export and the
rehearsal's export share the layout). Destination: ``s3://bucket/adapters/NAME`` or a folder;
Ray Serve LLM's ``dynamic_lora_loading_path`` is the parent (``s3://bucket/adapters``) and the
adapter is requested as model ``<base id>:NAME``. The weights are copied first, then
``manifest.json`` (base model, rank, target modules, sha256s, eval metrics at that step), and
``adapter_config.json`` last: Ray Serve LLM lists and loads only sub-folders that hold an
``adapter_config.json`` (ray/llm/_internal/serve/utils/lora_serve_utils.py,
``get_lora_finetuned_context_length`` answers 404 without it), so no replica sees a half copy.

On S3 a name is promoted once: a replica keeps each adapter it has served cached under its name
until it restarts (``LoraModelLoader.disk_cache``, ``VLLMEngine.resolve_lora``), so other weights
under a served name would never reach it. A name whose ``adapter_config.json`` is absent was never
served and is (re)written; one that holds other weights is refused with a new name to use.

Refused: adapters with LoRA tensors on the vision tower (vLLM applies LoRA to the language model
only) and adapters whose rank exceeds the endpoint's ``max_lora_rank``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload.deployment.names import ADAPTERS_PREFIX
from workload.errors import UsageError
from workload.files import atomic_path, write_bytes_atomic
from workload.serving_rules import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    VISION_SEGMENT,
    AdapterRuleError,
    inspect_adapter,
    parse_s3_uri,
)
from workload.serving_rules import ADAPTER_NAME as NAME_PATTERN

MANIFEST = "manifest.json"
HASH_CHUNK_BYTES = 1 << 20


class PromoteError(UsageError):
    """The adapter cannot be promoted (exit 2, a ValueError); the message says why and what to do."""


@dataclass(frozen=True)
class Adapter:
    """A PEFT LoRA export on disk."""

    directory: Path
    config: dict[str, Any]
    tensor_names: tuple[str, ...]

    @property
    def rank(self) -> int:
        return int(self.config.get("r", 0))

    def max_rank(self) -> int:
        """The largest rank any module uses (``rank_pattern`` can raise it per module)."""
        return max([self.rank, *(int(r) for r in (self.config.get("rank_pattern") or {}).values())])

    def vision_tensors(self) -> list[str]:
        return [name for name in self.tensor_names if VISION_SEGMENT.search(name)]


def safetensors_names(path: Path) -> list[str]:
    """Tensor names from a safetensors header (8-byte little-endian length, then JSON)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sorted(name for name in header if name != "__metadata__")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def export_dir(run_dir: Path, step: int) -> Path:
    """Where a run keeps the adapter exported at ``step``."""
    return run_dir / "exports" / f"global_step_{step}" / "policy"


def load_adapter(run_dir: Path, step: int) -> Adapter:
    """Read the step's export; errors list the steps that do exist."""
    directory = export_dir(run_dir, step)
    if not (directory / ADAPTER_CONFIG).is_file() or not (directory / ADAPTER_WEIGHTS).is_file():
        steps = sorted(int(p.parent.name.split("_")[-1]) for p in run_dir.glob("exports/global_step_*/policy"))
        have = ", ".join(map(str, steps)) or "none"
        raise PromoteError(
            f"no LoRA adapter at {directory} (needs {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}); exported steps: {have}"
        )
    config = json.loads((directory / ADAPTER_CONFIG).read_text())
    tensor_names = tuple(safetensors_names(directory / ADAPTER_WEIGHTS))
    return Adapter(directory=directory, config=config, tensor_names=tensor_names)


# s3://<artifacts bucket>, set on every Ray pod of the cluster (infra/stacks/ray.py)
ARTIFACTS_ENV = "SKYMAZE_ARTIFACTS"


def default_step(run_dir: Path) -> int:
    """The export a run promotes when no step is named: a rehearsal's step selected on its validation set
    (``best_step`` of its report.json), else the newest export (the cluster run's last, step 160 for blog)."""
    report = run_dir / "report.json"
    if report.is_file():
        best = json.loads(report.read_text()).get("best_step")
        if best is not None:
            return int(best)
    steps = sorted(int(p.parent.name.split("_")[-1]) for p in run_dir.glob("exports/global_step_*/policy"))
    if not steps:
        raise PromoteError(f"{run_dir} has no export (exports/global_step_N/policy); is it a run folder?")
    return steps[-1]


def artifacts_destination(name: str, environ: dict[str, str]) -> str:
    """``s3://<artifacts bucket>/adapters/NAME`` from the cluster pods' environment."""
    root = environ.get(ARTIFACTS_ENV, "")
    if not root.startswith("s3://"):
        raise PromoteError(f"--name {name} promotes to the cluster's artifacts bucket, named by {ARTIFACTS_ENV} on its "
                           "Ray pods (run it there: kubectl -n ray exec svc/skymaze-train-head-svc -- skymaze promote "
                           "...); elsewhere pass --to s3://BUCKET/adapters/NAME or a folder")
    return f"{root.rstrip('/')}/{ADAPTERS_PREFIX}/{name}"


def check_adapter(adapter: Adapter, *, max_lora_rank: int) -> None:
    """Refuse what the endpoint would ignore or reject (the serving rules, then promote's own words)."""
    vision = adapter.vision_tensors()
    if vision:
        raise PromoteError(
            f"{len(vision)} LoRA tensors touch the vision tower (e.g. {vision[0]}); vLLM ignores them, so the served "
            "model would differ from the trained one. "
            "Retrain with trainer.policy.model.lora.exclude_modules='.*visual.*'."
        )
    if adapter.max_rank() > max_lora_rank:
        raise PromoteError(
            f"adapter rank {adapter.max_rank()} exceeds the endpoint's max_lora_rank {max_lora_rank}. "
            "Raise max_lora_rank in the serving settings, or promote an adapter trained with a lower rank."
        )
    try:
        inspect_adapter(adapter.directory, max_lora_rank=max_lora_rank)
    except AdapterRuleError as error:
        raise PromoteError(f"the endpoint would refuse this adapter: {error}") from error


def build_manifest(
    adapter: Adapter, *, name: str, run_dir: Path, step: int, files: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """What the endpoint's operators (and ``skymaze evaluate``) need to know about the adapter."""
    evals_path = run_dir / "evals" / f"global_step_{step}.json"
    return {
        "format": "peft-lora",
        "name": name,
        "base_model": adapter.config.get("base_model_name_or_path"),
        "rank": adapter.rank,
        "lora_alpha": adapter.config.get("lora_alpha"),
        "target_modules": adapter.config.get("target_modules"),
        "exclude_modules": adapter.config.get("exclude_modules"),
        "files": files,
        "source": {"run_dir": str(run_dir), "step": step},
        "eval": json.loads(evals_path.read_text()) if evals_path.is_file() else None,
        "promoted_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def parse_destination(to: str) -> tuple[str, str, str]:
    """``("s3", bucket, key prefix)`` or ``("dir", path, "")``; the last path segment names the adapter."""
    if to.startswith("s3://"):
        try:
            bucket, prefix = parse_s3_uri(to)
        except ValueError:
            bucket = prefix = ""
        if not bucket or not prefix:
            raise PromoteError(f"{to!r}: expected s3://BUCKET/PREFIX/NAME, e.g. s3://my-bucket/adapters/maze-grpo")
        destination = ("s3", bucket, prefix)
    else:
        destination = ("dir", str(Path(to)), "")
    name = adapter_name(destination)
    if not NAME_PATTERN.match(name):
        raise PromoteError(
            f"adapter name {name!r} (the last path segment) must match {NAME_PATTERN.pattern}: "
            "it becomes the model id suffix"
        )
    return destination


def adapter_name(destination: tuple[str, str, str]) -> str:
    """The model id suffix the endpoint serves the adapter under."""
    kind, location, prefix = destination
    return prefix.rsplit("/", 1)[-1] if kind == "s3" else Path(location).name


def _atomic_copy(source: Path, target: Path) -> None:
    with atomic_path(target) as tmp, tmp.open("wb") as out, source.open("rb") as src:
        while chunk := src.read(HASH_CHUNK_BYTES):
            out.write(chunk)


def _already_there(existing: bytes | None, files: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The promoted manifest when it lists exactly ``files`` (same names and sha256s): promoting the same
    export again is then a no-op, not an error."""
    if existing is None:
        return None
    try:
        manifest = json.loads(existing)
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("files") == files else None


def _publish_dir(files: list[Path], manifest: bytes, target: Path, *, overwrite: bool) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if (target / MANIFEST).exists() and not overwrite:
        raise PromoteError(f"{target} already holds a promoted adapter; pass --overwrite to replace it")
    (target / MANIFEST).unlink(missing_ok=True)  # readers see "incomplete" until the new manifest lands
    for path in files:
        _atomic_copy(path, target / path.name)
    write_bytes_atomic(target / MANIFEST, manifest)


def _publish_s3(files: list[Path], manifest: bytes, bucket: str, prefix: str, *, client: Any) -> None:
    """Weights, then the manifest, then ``adapter_config.json``: the object that makes the name servable."""
    config = [p for p in files if p.name == ADAPTER_CONFIG]
    for path in [p for p in files if p.name != ADAPTER_CONFIG]:
        client.upload_file(str(path), bucket, f"{prefix}/{path.name}")
    client.put_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}", Body=manifest, ContentType="application/json")
    for path in config:
        client.upload_file(str(path), bucket, f"{prefix}/{path.name}")


def _s3_servable(client: Any, bucket: str, prefix: str) -> bool:
    """Whether ``prefix`` holds an ``adapter_config.json``: what Ray Serve LLM needs to serve the name."""
    key = f"{prefix}/{ADAPTER_CONFIG}"
    return any(o["Key"] == key for o in client.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", []))


def _refuse_served_name(bucket: str, prefix: str, step: int) -> PromoteError:
    name = prefix.rsplit("/", 1)[-1]
    return PromoteError(
        f"s3://{bucket}/{prefix} already serves other weights: a replica that loaded {name} keeps them cached "
        f"under that name until it restarts, so a name is promoted once. Promote under a new name, e.g. "
        f"--to s3://{bucket}/{prefix}-step{step}, and evaluate that one"
    )


def _existing_manifest(kind: str, location: str, prefix: str, client: Any) -> bytes | None:
    """The manifest already at the destination, or None."""
    if kind != "s3":
        path = Path(location) / MANIFEST
        return path.read_bytes() if path.is_file() else None
    from botocore.exceptions import ClientError

    try:
        return client.get_object(Bucket=location, Key=f"{prefix}/{MANIFEST}")["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
            return None
        raise


def promote(
    run_dir: Path, step: int, to: str, *, max_lora_rank: int, s3_client: Any = None, overwrite: bool = False
) -> dict[str, Any]:
    """Check the step's adapter, copy its weights, the manifest, then its config; returns the manifest."""
    destination = parse_destination(to)
    kind, location, prefix = destination
    adapter = load_adapter(run_dir, step)
    check_adapter(adapter, max_lora_rank=max_lora_rank)
    files = sorted(p for p in adapter.directory.iterdir() if p.is_file() and p.name != MANIFEST)
    digests = {p.name: {"sha256": sha256_of(p), "size_bytes": p.stat().st_size} for p in files}
    manifest = build_manifest(adapter, name=adapter_name(destination), run_dir=run_dir, step=step, files=digests)
    body = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    if kind == "s3":
        if overwrite:
            raise PromoteError(
                "--overwrite applies to folders only: on S3 a served name keeps its weights cached on every replica "
                f"that loaded it; promote under a new name, e.g. {to.rstrip('/')}-step{step}"
            )
        if s3_client is None:
            import boto3

            s3_client = boto3.client("s3")
        if _s3_servable(s3_client, location, prefix):
            same = _already_there(_existing_manifest(kind, location, prefix, s3_client), digests)
            if same is None:
                raise _refuse_served_name(location, prefix, step)
            return {**same, "already_promoted": True}
        _publish_s3(files, body, location, prefix, client=s3_client)
        return manifest
    if not overwrite:
        same = _already_there(_existing_manifest(kind, location, prefix, s3_client), digests)
        if same is not None:
            return {**same, "already_promoted": True}
    _publish_dir(files, body, Path(location), overwrite=overwrite)
    return manifest
