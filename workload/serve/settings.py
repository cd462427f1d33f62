"""Settings of the local OpenAI endpoint, read once and passed to every Serve replica."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workload.serve.protocol import RequestLimits
from workload.serving_rules import (
    DEFAULT_MAX_LORA_RANK,
    parse_s3_uri,
    validate_base_model_id,
    validate_max_lora_rank,
)


@dataclass(frozen=True)
class ServeSettings:
    """What one local endpoint serves and its limits.

    ``adapters`` is a folder or ``s3://bucket/prefix`` of adapter sub-folders; ``cache_dir``
    holds S3 adapters once downloaded. ``max_ongoing_requests`` requests run or wait on a model
    replica and ``max_queued_requests`` more wait in the ingress; beyond that the answer is 503.
    ``api_key``, when set, must come as ``Authorization: Bearer KEY`` with every request.
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
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK
    api_key: str | None = field(default=None, repr=False)
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
        validate_base_model_id(self.base_model_id)
        validate_max_lora_rank(self.max_lora_rank)
        for key in ("max_num_adapters_per_replica", "max_ongoing_requests", "torch_threads"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.max_queued_requests < 0:
            raise ValueError(f"max_queued_requests must be >= 0, got {self.max_queued_requests}")
        if self.api_key is not None and (not self.api_key or any(c.isspace() for c in self.api_key)):
            raise ValueError("api_key must be a non-empty string without spaces")

    @classmethod
    def from_strings(cls, values: dict[str, Any]) -> ServeSettings:
        """Settings from text values (command-line ``KEY=VALUE`` pairs), converted to each field's type."""
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        converted = {}
        for key, value in values.items():
            kind = types[key]
            try:
                if value is None or not isinstance(value, str):
                    converted[key] = value
                elif kind == "int":
                    converted[key] = int(value)
                elif kind == "float":
                    converted[key] = float(value)
                else:
                    converted[key] = value
            except ValueError as exc:
                described = {"int": "an integer", "float": "a number"}[kind]
                raise ValueError(f"{key} must be {described}, got {value!r}") from exc
        return cls(**converted)
