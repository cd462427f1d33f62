"""Validation of Ray objects against the KubeRay v1.7.0 CRD schemas (what the API server enforces)."""

from __future__ import annotations

import functools
from pathlib import Path

import jsonschema
import yaml

CRD_FILES = {"RayCluster": "ray.io_rayclusters.yaml", "RayService": "ray.io_rayservices.yaml",
             "RayJob": "ray.io_rayjobs.yaml"}


# The CRD files are large (up to 18k lines): parse each once, with libyaml when available.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def crd_schema(shared_dir: Path, kind: str, version: str = "v1") -> dict:
    """The openAPIV3Schema of one served version of a KubeRay CRD."""
    crd = yaml.load((shared_dir / "schemas" / "kuberay" / CRD_FILES[kind]).read_text(), Loader=_LOADER)
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


@functools.cache
def crd_validator(shared_dir: Path, kind: str) -> jsonschema.protocols.Validator:
    """A validator of one CRD's schema, the schema itself checked once (`jsonschema.validate` checks it every call)."""
    schema = crd_schema(shared_dir, kind)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def validate(shared_dir: Path, obj: dict) -> None:
    """Raise jsonschema.ValidationError when `obj` would be rejected by the CRD (the error `jsonschema.validate` raises)."""
    assert obj["apiVersion"] == "ray.io/v1", obj["apiVersion"]
    error = jsonschema.exceptions.best_match(crd_validator(shared_dir, obj["kind"]).iter_errors(obj))
    if error is not None:
        raise error
