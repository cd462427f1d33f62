"""Settings of the local OpenAI endpoint, read once and passed to every Serve replica."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from workload.serve.adapters import parse_s3_uri
from workload.serve.protocol import RequestLimits

_BASE_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


@dataclass(frozen=True)
class ServeSettings:
    """What one local endpoint serves and its limits.

    ``adapters`` is a folder or ``s3://bucket/prefix`` of adapter sub-folders; ``cache_dir``
    holds S3 adapters once downloaded. ``max_ongoing_requests`` requests run or wait on a model
    replica and ``max_queued_requests`` more wait in the ingress; beyond that the answer is 503.
    """

    model_dir: str
    adapters: str
    base_model_id: str
    cache_dir: str
    s3_endpoint_url: str | None = None
    max_num_adapters_per_replica: int = 4
    max_ongoing_requests: int = 4
    max_queued_requests: int = 16
    replica_num_cpus: float = 1.0
    torch_threads: int = 1
    limits: RequestLimits = field(default_factory=RequestLimits)

    def __post_init__(self) -> None:
        if not (Path(self.model_dir) / "config.json").is_file():
            raise ValueError(
                f"model_dir {self.model_dir!r} has no config.json: pass a Hugging Face model folder"
            )
        if self.adapters.startswith("s3://"):
            parse_s3_uri(self.adapters)
        elif not Path(self.adapters).is_dir():
            raise ValueError(f"adapters {self.adapters!r} is neither a folder nor an s3://bucket/prefix URI")
        if not _BASE_MODEL_ID.match(self.base_model_id):
            raise ValueError(
                f"base_model_id {self.base_model_id!r} must match {_BASE_MODEL_ID.pattern} "
                "(':' separates base and adapter in model ids)"
            )
        for key in ("max_num_adapters_per_replica", "max_ongoing_requests", "torch_threads"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.max_queued_requests < 0:
            raise ValueError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
