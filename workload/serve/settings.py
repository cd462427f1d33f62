"""What a user sets to serve: the Serve application's settings and where the local endpoint listens.

One model each, on :class:`workload.config.ConfigModel`: ``skymaze serve``'s options, the
arguments of ``serve run workload.serve.app:app_builder KEY=VALUE ...`` (and a Serve config
file's ``args:``) and `LocalServer`'s keywords are the fields below, validated once when the
settings are made and passed, frozen, to every Serve replica. A field's ``alias`` is the name
a user writes (``--max-adapters``, ``max_adapters=``); the README's tables print the descriptions.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import Field, NonNegativeFloat, PositiveInt, ValidationInfo, field_validator

from workload.config import ConfigModel
from workload.localhost import LOOPBACK
from workload.serve.protocol import (
    CHARS_PER_PROMPT_TOKEN_BOUND,
    DEFAULT_REPLY_TOKENS,
    MAX_IMAGES,
    MAX_PROMPT_TOKENS,
    MAX_REPLY_TOKENS,
    RequestLimits,
)
from workload.serving_rules import parse_s3_uri, validate_base_model_id

# Where S3 adapters are cached unless told otherwise; `~` is the serving user's home.
DEFAULT_CACHE_DIR = Path("~/.cache/skymaze/adapters")
# Ray Serve's default HTTP port (ray/serve/_private/constants.py DEFAULT_HTTP_PORT), also the cluster's serve port.
DEFAULT_PORT = 8000
MAX_PORT = 65535
# CPUs of the local Ray `skymaze serve` starts, at least: the model replica reserves one (replica_cpus),
# and the other is left to Serve's controller, proxy and ingress (they reserve none); a larger
# replica_cpus grows it (`LocalServer`).
DEFAULT_NUM_CPUS = 2
# Adapters a model replica holds before the least recently used is evicted (Ray Serve's
# `serve.multiplexed` default is 3: ray/serve/api.py).
DEFAULT_MAX_ADAPTERS = 4
# Requests the model replica holds at once, one generating and the rest waiting their turn (4 + 16);
# tests/workload/serve shows the 503 beyond.
DEFAULT_MAX_MODEL_REQUESTS = 20
# boto3's own setting for an S3-compatible store (botocore/configprovider.py ConfiguredEndpointProvider:
# AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else endpoint_url in ~/.aws/config), read by every S3 client.
S3_ENDPOINT_ENV = "AWS_ENDPOINT_URL_S3"
class ServeLimits(ConfigModel):
    """The request limits a user may need to move (longer replies, longer episodes); the others are
    constants of `workload.serve.protocol` and `workload.serve.app` (docs/serve.md lists them all)."""

    max_tokens: PositiveInt = Field(MAX_REPLY_TOKENS, description="Largest max_tokens (or max_completion_tokens) "
                                    "a request may ask; a request that sets none gets at most 256.")
    max_prompt_tokens: PositiveInt = Field(MAX_PROMPT_TOKENS, description="Prompt tokens (text and images) one "
                                           "request may hold; the model's context caps it further.")
    max_images: PositiveInt = Field(MAX_IMAGES, description="Images one request may hold.")

    def request_limits(self) -> RequestLimits:
        """All of a request's limits: these three, and the constants (text scaled with the prompt tokens)."""
        return RequestLimits(
            max_tokens=self.max_tokens,
            default_max_tokens=min(DEFAULT_REPLY_TOKENS, self.max_tokens),
            max_prompt_tokens=self.max_prompt_tokens,
            max_prompt_chars=CHARS_PER_PROMPT_TOKEN_BOUND * self.max_prompt_tokens,
            max_images=self.max_images,
        )


class ServeSettings(ConfigModel):
    """What one endpoint serves, and its limits (the Serve application's settings)."""

    model_dir: Path = Field(alias="model", description="Base model folder (Hugging Face format).")
    adapters: str = Field(description="Folder or s3://bucket/prefix of adapter sub-folders; a sub-folder's name "
                          "is the ADAPTER of model id BASE:ADAPTER.")
    base_model_id: str | None = Field(None, alias="model_id", validate_default=True,
                                      description="Id of the base model in requests (default: the model folder's name).")
    cache_dir: Path = Field(DEFAULT_CACHE_DIR, validate_default=True, description="Where adapters from S3 are cached.")
    max_num_adapters_per_replica: PositiveInt = Field(
        DEFAULT_MAX_ADAPTERS, alias="max_adapters",
        description="Adapters kept in memory per model replica (least recently used evicted beyond).")
    max_model_requests: PositiveInt = Field(
        DEFAULT_MAX_MODEL_REQUESTS,
        description="Requests the model replica holds at once (one generates, the rest wait their turn); as many "
                    "more wait up to 4 s in the ingress, then get 503 with Retry-After.")
    replica_num_cpus: NonNegativeFloat = Field(1.0, alias="replica_cpus",
                                               description="CPUs Ray reserves for the model replica; it runs "
                                               "as many torch threads (rounded up, at least 1).")
    api_key: str | None = Field(None, repr=False, description="Require 'Authorization: Bearer KEY' on every "
                                "request (default: none).")
    limits: ServeLimits = Field(default_factory=ServeLimits, description="Size limits of one request.")

    @field_validator("model_dir")
    @classmethod
    def _model_folder(cls, value: Path) -> Path:
        if not (value / "config.json").is_file():
            raise ValueError(f"{value} has no config.json: pass a Hugging Face model folder")
        return value.resolve()

    @field_validator("adapters")
    @classmethod
    def _adapter_source(cls, value: str) -> str:
        if value.startswith("s3://"):
            parse_s3_uri(value)
            return value
        if not Path(value).is_dir():
            raise ValueError(f"{value!r} is neither a folder nor an s3://bucket/prefix URI")
        return str(Path(value).resolve())

    @field_validator("base_model_id")
    @classmethod
    def _base_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            model_dir = info.data.get("model_dir")
            return None if model_dir is None else validate_base_model_id(model_dir.name)
        return validate_base_model_id(value)

    @field_validator("cache_dir")
    @classmethod
    def _home(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def torch_threads(self) -> int:
        """Torch threads of the model replica: the CPUs Ray reserves for it, rounded up (at least 1)."""
        return max(1, math.ceil(self.replica_num_cpus))

    @field_validator("api_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None and (not value or any(c.isspace() for c in value)):
            raise ValueError("must be a non-empty string without spaces")
        return value


class LocalServeSettings(ConfigModel):
    """Where `skymaze serve` listens (the local Ray it starts is sized from ``replica_cpus``)."""

    host: str = Field(LOOPBACK, description="Address the HTTP port listens on (loopback by default).")
    port: int = Field(DEFAULT_PORT, ge=0, le=MAX_PORT, description="HTTP port; 0 picks a free one.")


def local_ray_cpus(replica_num_cpus: float) -> int:
    """CPUs of the local Ray a server starts: `DEFAULT_NUM_CPUS`, or more for a larger model replica."""
    return max(DEFAULT_NUM_CPUS, math.ceil(replica_num_cpus))
