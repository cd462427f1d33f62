"""What a user sets to serve locally: ``skymaze serve``'s options, one model.

`LocalServer` takes it, validated once and frozen; ``skymaze serve --help`` and docs/settings.md
print the descriptions.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PositiveInt, ValidationInfo, field_validator

from workload.config import ConfigModel
from workload.serving_rules import validate_base_model_id

# Ray Serve's default HTTP port (ray/serve/_private/constants.py DEFAULT_HTTP_PORT), also the cluster's serve port.
DEFAULT_PORT = 8000
MAX_PORT = 65535
# Adapters held in memory at once (Ray Serve's `serve.multiplexed` default is 3: ray/serve/api.py; the
# rehearsal serves one, the tests and benchmark four).
DEFAULT_MAX_ADAPTERS = 4


class ServeSettings(ConfigModel):
    """One base model and a folder of its LoRA adapters, served on 127.0.0.1."""

    model: Path = Field(description="Base model folder (Hugging Face format).")
    adapters: Path = Field(description="Folder of adapter sub-folders; a sub-folder's name is the ADAPTER of model "
                           "id BASE:ADAPTER.")
    model_id: str | None = Field(None, validate_default=True,
                                 description="Id of the base model in requests (default: the model folder's name).")
    max_adapters: PositiveInt = Field(DEFAULT_MAX_ADAPTERS, description="Adapters kept in memory (the least "
                                      "recently used is dropped beyond).")
    port: int = Field(DEFAULT_PORT, ge=0, le=MAX_PORT, description="HTTP port on 127.0.0.1; 0 picks a free one.")

    @field_validator("model")
    @classmethod
    def _model_folder(cls, value: Path) -> Path:
        if not (value / "config.json").is_file():
            raise ValueError(f"{value} has no config.json: pass a Hugging Face model folder")
        return value.resolve()

    @field_validator("adapters")
    @classmethod
    def _adapter_folder(cls, value: Path) -> Path:
        if not value.is_dir():
            s3 = str(value).startswith("s3:")
            hint = " (copy the adapters to a folder first: aws s3 sync URI FOLDER)" if s3 else ""
            raise ValueError(f"{str(value)!r} is not a folder{hint}")
        return value.resolve()

    @field_validator("model_id")
    @classmethod
    def _base_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        model = info.data.get("model")
        if value is None:
            return None if model is None else validate_base_model_id(model.name)
        return validate_base_model_id(value)
