"""Where adapters come from: a local folder or an ``s3://`` prefix of adapter sub-folders.

Each adapter is a PEFT folder (``adapter_config.json`` + ``adapter_model.safetensors``) named
by its folder, the ``ADAPTER`` of ``BASE:ADAPTER``. S3 adapters are downloaded once into a
disk cache and re-downloaded only when their objects change (ETags), so a replica restart or
an LRU eviction reloads from local disk. `AdapterStore.fingerprint` tells the replicas when an
adapter changed (ETags on S3; size and modification time of each file in a folder) or is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from workload.serve.errors import AdapterNotFoundError
from workload.serving_rules import ADAPTER_CONFIG, parse_s3_uri, validate_adapter_name

CACHE_MARKER = ".skymaze-source.json"  # the S3 keys + ETags a cached copy was made from
TRAINER_CONFIG = "trainer_config.json"  # the recipe a rehearsal adapter was trained with (its exports carry it)


@dataclass(frozen=True)
class AdapterStore:
    """Lists and fetches adapters from ``source`` (a folder or ``s3://bucket/prefix``)."""

    source: str
    cache_dir: str

    @property
    def is_s3(self) -> bool:
        return self.source.startswith("s3://")

    def _s3(self) -> Any:
        import boto3

        return boto3.client("s3")  # an S3-compatible store: AWS_ENDPOINT_URL_S3 (serve.settings.S3_ENDPOINT_ENV)

    def names(self) -> list[str]:
        """Names of the adapters available at the source, sorted."""
        if not self.is_s3:
            root = Path(self.source)
            return sorted(p.parent.name for p in root.glob(f"*/{ADAPTER_CONFIG}") if _safe(p.parent.name))
        bucket, prefix = parse_s3_uri(self.source)
        base = f"{prefix}/" if prefix else ""
        pages = (
            self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base, Delimiter="/")
        )
        folders = [
            cp["Prefix"][len(base) :].strip("/") for page in pages for cp in page.get("CommonPrefixes", [])
        ]
        return sorted(name for name in folders if _safe(name) and self._s3_objects(name))

    def trainer_config(self, name: str) -> dict[str, Any] | None:
        """The recipe adapter ``name`` was trained with (its trainer_config.json), or None when it has none.

        ``GET /v1/models`` states it per adapter, so a client can play the way the adapter was trained.
        """
        validate_adapter_name(name)
        if not self.is_s3:
            path = Path(self.source) / name / TRAINER_CONFIG
            return json.loads(path.read_text()) if path.is_file() else None
        bucket, prefix = parse_s3_uri(self.source)
        key = f"{prefix}/{name}/{TRAINER_CONFIG}" if prefix else f"{name}/{TRAINER_CONFIG}"
        try:
            return json.loads(self._s3().get_object(Bucket=bucket, Key=key)["Body"].read())
        except Exception as exc:  # botocore's NoSuchKey is generated per client: test the code
            if getattr(exc, "response", {}).get("Error", {}).get("Code") in {"NoSuchKey", "404"}:
                return None
            raise

    def fetch(self, name: str) -> Path:
        """A local folder holding adapter ``name``; raise AdapterNotFoundError if the source has none."""
        validate_adapter_name(name)
        if not self.is_s3:
            folder = Path(self.source) / name
            if not (folder / ADAPTER_CONFIG).is_file():
                raise AdapterNotFoundError(f"no {ADAPTER_CONFIG} in {folder}")
            return folder
        objects = self._s3_objects(name)
        if not objects:
            raise AdapterNotFoundError(f"no {ADAPTER_CONFIG} under {self.source.rstrip('/')}/{name}/")
        target = Path(self.cache_dir) / name
        marker = target / CACHE_MARKER
        if marker.is_file() and json.loads(marker.read_text()) == objects:
            return target
        self._download(name, objects, target)
        return target

    def fingerprint(self, name: str) -> Any:
        """What changes when adapter ``name`` changes at the source; AdapterNotFoundError once it is gone."""
        validate_adapter_name(name)
        if self.is_s3:
            objects = self._s3_objects(name)
            if not objects:
                raise AdapterNotFoundError(f"adapter {name!r} is gone from the source")
            return objects
        folder = Path(self.source) / name
        try:
            files = sorted(p for p in folder.iterdir() if p.is_file())
            stats = [(p.name, p.stat()) for p in files]
        except FileNotFoundError as exc:
            raise AdapterNotFoundError(f"adapter {name!r} is gone from the source") from exc
        if ADAPTER_CONFIG not in {n for n, _ in stats}:
            raise AdapterNotFoundError(f"adapter {name!r} is gone from the source")
        # ctime too: a rewrite in place that keeps size and mtime (os.utime can set it back) still moves it.
        return tuple((n, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) for n, st in stats)

    def _s3_objects(self, name: str) -> dict[str, str]:
        """``{relative key: ETag}`` of the adapter's objects; empty when it has no adapter_config.json."""
        bucket, prefix = parse_s3_uri(self.source)
        folder = f"{prefix}/{name}/" if prefix else f"{name}/"
        pages = self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder)
        objects = {
            obj["Key"][len(folder) :]: obj["ETag"] for page in pages for obj in page.get("Contents", [])
        }
        objects = {key: etag for key, etag in objects.items() if _safe_relative(key)}
        return objects if ADAPTER_CONFIG in objects else {}

    def _download(self, name: str, objects: dict[str, str], target: Path) -> None:
        # Download next to the target, then swap it in: a crash never leaves a half adapter.
        bucket, prefix = parse_s3_uri(self.source)
        folder = f"{prefix}/{name}/" if prefix else f"{name}/"
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
        client = self._s3()
        for key in objects:
            dest = staging / key
            dest.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, folder + key, str(dest))
        (staging / CACHE_MARKER).write_text(json.dumps(objects, sort_keys=True))
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{name}-old-", dir=target.parent))
            os.replace(target, old / name)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(staging, target)


def _safe(name: str) -> bool:
    try:
        validate_adapter_name(name)
    except ValueError:
        return False
    return True


def _safe_relative(key: str) -> bool:
    # S3 keys are arbitrary strings: refuse anything that would land outside the cache folder.
    parts = PurePosixPath(key).parts
    return bool(parts) and not key.startswith("/") and all(p not in {"", ".", ".."} for p in parts)
