"""The rules every served adapter and model id obey, stated once for the server and `promote`.

The standard library and safetensors' header parser (no torch, peft, Ray or boto3), so the local
endpoint, the cluster config and ``skymaze promote`` apply the same checks: a LoRA folder is
inspected from its ``adapter_config.json`` and the header of ``adapter_model.safetensors`` alone,
before any of it touches a model. `inspect_adapter` raises `AdapterRuleError` naming the field at fault.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"

# LoRA ranks vLLM accepts for `max_lora_rank` (vllm/config/lora.py, `possible_max_ranks`).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The largest LoRA rank either endpoint serves: the cluster's vLLM `max_lora_rank` (infra/stacks/serving.py)
# and the local server's cap (`skymaze serve`, the rehearsal); `skymaze promote` and the recipe check refuse
# larger ranks unless told otherwise. One home: what serves locally also serves on the cluster.
DEFAULT_MAX_LORA_RANK = 64

# Images the cluster endpoint accepts in one prompt (vLLM's limit_mm_per_prompt, workload/serve/cluster_config.py):
# a maze prompt holds one frame per turn so far, so the published 15-turn cap fits with one to spare.
MAX_IMAGES_PER_PROMPT = 16

# Adapter names become the ADAPTER of model id BASE:ADAPTER, an S3 key segment and a folder name.
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Base model ids: ':' is excluded because it separates base and adapter in model ids.
BASE_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
MODEL_ID_SEPARATOR = ":"

# peft initialisations that leave the base weights alone. "pissa", "olora", "corda", "loftq" and
# "eva" rewrite or need the base weights when the adapter is created, i.e. on every load.
SAFE_INIT_LORA_WEIGHTS: tuple[Any, ...] = (True, False, "gaussian")
# adapter_config.json keys that change the base model or its compute beyond LoRA's A and B;
# vLLM serves none of them, so an adapter using any would behave differently on the cluster.
UNSUPPORTED_LORA_FEATURES = {
    "use_dora": "DoRA",
    "modules_to_save": "full copies of base modules",
    "lora_bias": "LoRA biases",
    "target_parameters": "LoRA on raw parameters",
    "layer_replication": "layer replication",
    "trainable_token_indices": "trainable token embeddings",
    "alora_invocation_tokens": "activated LoRA",
    "arrow_config": "Arrow routing",
    "use_bdlora": "block-diagonal LoRA",
    "use_qalora": "QA-LoRA",
    "monteclora_config": "MonteCLoRA",
    "kasa_config": "KaSA",
}
# The language model's modules; Qwen3-VL's vision tower is `model.visual.*`.
LANGUAGE_MODEL_SEGMENT = re.compile(r"(^|\.)language_model\.")
VISION_SEGMENT = re.compile(r"(^|\.)(visual|vision_tower|vision_model)\.")
# peft saves LoRA tensors as base_model.model.<module>.lora_A.weight / lora_B.weight.
_LORA_TENSOR = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<kind>[AB])\.weight$")
# A module name as a LoRA config may name it: dot-separated identifiers, no regular-expression syntax.
# peft reads a string `target_modules` and the keys of `rank_pattern`/`alpha_pattern` as regular
# expressions (peft/tuners/tuners_utils.py, peft/utils/other.py `get_pattern_key`), which a hostile
# pattern can make backtrack for seconds holding the GIL.
PLAIN_MODULE_NAME = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$", re.ASCII)
# peft's keyword for "every linear layer"; not a regular expression.
ALL_LINEAR = "all-linear"
MAX_MODULE_NAME_CHARS = 512
MAX_ADAPTER_CONFIG_BYTES = 1 << 20
# The safetensors dtypes a LoRA adapter is saved in (peft saves the trained dtype).
SERVED_DTYPES = frozenset({"F32", "F16", "BF16"})


class AdapterRuleError(ValueError):
    """An adapter breaks a serving rule; ``field`` names the config key or tensor at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class LoraTensor:
    """One LoRA matrix from the safetensors header."""

    module: str
    kind: str  # "A" (rank x in) or "B" (out x rank)
    shape: tuple[int, ...]


@dataclass(frozen=True)
class AdapterSummary:
    """What `inspect_adapter` found: the config and the LoRA matrices per module."""

    config: dict[str, Any]
    tensors: tuple[LoraTensor, ...]

    @property
    def rank(self) -> int:
        return int(self.config.get("r", 0))

    @property
    def max_rank(self) -> int:
        return max((t.shape[0] if t.kind == "A" else t.shape[1] for t in self.tensors), default=self.rank)

    @property
    def modules(self) -> list[str]:
        return sorted({t.module for t in self.tensors})


def validate_adapter_name(name: str) -> str:
    """Return ``name`` if it is a valid adapter name, else raise ValueError saying why."""
    if not isinstance(name, str) or not ADAPTER_NAME.match(name):
        raise ValueError(
            f"adapter name {name!r} is invalid: use 1-128 characters from [A-Za-z0-9._-], starting with a "
            "letter or digit"
        )
    return name


def validate_base_model_id(model_id: str) -> str:
    """Return ``model_id`` if it can name a base model, else raise ValueError saying why."""
    if not isinstance(model_id, str) or not BASE_MODEL_ID.match(model_id):
        raise ValueError(
            f"base_model_id {model_id!r} must match {BASE_MODEL_ID.pattern} "
            f"({MODEL_ID_SEPARATOR!r} separates base and adapter in model ids)"
        )
    return model_id


def validate_max_lora_rank(rank: Any) -> int:
    """Return ``rank`` if vLLM accepts it as ``max_lora_rank``, else raise ValueError."""
    if isinstance(rank, bool) or rank not in VLLM_LORA_RANKS:
        raise ValueError(f"max_lora_rank must be one of {VLLM_LORA_RANKS} (vLLM), got {rank!r}")
    return rank


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/prefix`` into ``(bucket, prefix)`` (prefix without slashes at the ends)."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri!r}; expected s3://bucket/prefix")
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"s3 URI {uri!r} has no bucket: use s3://bucket/prefix")
    return bucket, prefix.strip("/")


_DATA_URI = re.compile(r"^data:image/(?P<subtype>[A-Za-z0-9+.-]+);base64,", re.ASCII)


def data_uri_bytes(uri: Any) -> bytes:
    """The bytes of a ``data:image/...;base64,...`` URI; ValueError says what is wrong."""
    match = _DATA_URI.match(uri) if isinstance(uri, str) else None
    if match is None:
        head = uri[:40] if isinstance(uri, str) else type(uri).__name__
        raise ValueError(
            f"expected a base64-encoded image data URI such as 'data:image/png;base64,...' (remote URLs are not "
            f"fetched), got {head!r}"
        )
    try:
        return base64.b64decode(uri[match.end() :], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"the image data URI is not valid base64 ({exc})") from exc


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """Each tensor's ``{"dtype", "shape"}``, from safetensors' own parser (no tensor is read).

    safetensors refuses what it cannot load: a header over 100 MB, offsets that overlap, leave a gap or run
    past the file, a shape and dtype that do not fill their bytes, a tail after the last tensor
    (safetensors' ``Metadata::validate``); its message is passed on. Only LoRA's float dtypes are served.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            header = {name: {"dtype": handle.get_slice(name).get_dtype(), "shape": handle.get_slice(name).get_shape()}
                      for name in handle.keys()}  # noqa: SIM118 - safe_open is not a mapping
    except SafetensorError as exc:
        raise AdapterRuleError(ADAPTER_WEIGHTS, f"safetensors cannot read it ({exc}); re-save the adapter with "
                                                "safetensors") from None
    for name, entry in header.items():
        if entry["dtype"] not in SERVED_DTYPES:
            raise AdapterRuleError(name, f"dtype {entry['dtype']!r} is not one of {sorted(SERVED_DTYPES)}")
    return header


def _check_config(config: Any, *, max_lora_rank: int) -> dict[str, Any]:
    if not isinstance(config, dict):
        raise AdapterRuleError(ADAPTER_CONFIG, "is not a JSON object")
    if "peft_type" not in config:
        raise AdapterRuleError("peft_type", "is missing; a LoRA adapter's config says \"peft_type\": \"LORA\"")
    if config["peft_type"] != "LORA":
        raise AdapterRuleError(
            "peft_type", f"{config.get('peft_type')!r} is not LORA: only LoRA adapters are served"
        )
    _check_module_names(config)
    init = config.get("init_lora_weights", True)
    if not any(init is safe or (isinstance(safe, str) and init == safe) for safe in SAFE_INIT_LORA_WEIGHTS):
        raise AdapterRuleError(
            "init_lora_weights",
            f"{init!r} rewrites the base weights when the adapter loads; save the adapter with "
            "init_lora_weights=true (its trained A and B are kept)",
        )
    for key, feature in UNSUPPORTED_LORA_FEATURES.items():
        if config.get(key):
            raise AdapterRuleError(
                key, f"{feature} are not served (vLLM applies LoRA's A and B only); retrain without {key}"
            )
    if config.get("bias", "none") != "none":
        raise AdapterRuleError(
            "bias", f"{config.get('bias')!r} trains base biases; only bias='none' is served"
        )
    ranks = {"r": config.get("r", 8)}
    ranks.update({f"rank_pattern.{k}": v for k, v in (config.get("rank_pattern") or {}).items()})
    for key, rank in ranks.items():
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise AdapterRuleError(key, f"must be a positive integer, got {rank!r}")
        if rank > max_lora_rank:
            raise AdapterRuleError(
                key,
                f"adapter rank {rank} exceeds the endpoint's max_lora_rank {max_lora_rank}; raise max_lora_rank in "
                "the serving settings or train with a lower rank",
            )
    alphas = {"lora_alpha": config.get("lora_alpha", 8)}
    alphas.update({f"alpha_pattern.{k}": v for k, v in (config.get("alpha_pattern") or {}).items()})
    for key, alpha in alphas.items():
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not math.isfinite(alpha):
            raise AdapterRuleError(key, f"must be a finite number, got {alpha!r}")
    if not isinstance(config.get("use_rslora", False), bool):
        raise AdapterRuleError("use_rslora", f"must be true or false, got {config.get('use_rslora')!r}")
    return config


def _plain(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= MAX_MODULE_NAME_CHARS and bool(PLAIN_MODULE_NAME.match(name))


def _check_module_names(config: dict[str, Any]) -> None:
    """`target_modules` and the pattern keys name modules plainly (peft would run them as regexes)."""
    targets = config.get("target_modules")
    if not (targets is None or targets == ALL_LINEAR or _plain(targets)
            or (isinstance(targets, list) and all(_plain(t) for t in targets))):
        raise AdapterRuleError(
            "target_modules",
            f"must be a list of module names such as [\"q_proj\", \"v_proj\"] (or {ALL_LINEAR!r}); got "
            f"{str(targets)[:80]!r}, which peft would evaluate as a regular expression",
        )
    for field in ("rank_pattern", "alpha_pattern"):
        patterns = config.get(field) or {}
        if not isinstance(patterns, dict):
            raise AdapterRuleError(field, "must map module names to numbers")
        for key in patterns:
            if not _plain(key):
                raise AdapterRuleError(
                    f"{field}.{str(key)[:80]}",
                    "must be a plain module name such as \"q_proj\" or \"layers.0.self_attn.q_proj\" "
                    "(peft evaluates these keys as regular expressions)",
                )


def _pattern_value(patterns: Mapping[str, Any], module: str) -> tuple[str, Any] | None:
    """The ``(key, value)`` of the first plain-name key that names ``module`` (itself or a dotted suffix)."""
    for key, value in patterns.items():
        if module == key or module.endswith("." + key):
            return key, value
    return None


def configured_rank(config: Mapping[str, Any], module: str) -> tuple[str, int]:
    """The config field that sets ``module``'s rank and that rank (``rank_pattern`` over ``r``)."""
    found = _pattern_value(config.get("rank_pattern") or {}, module)
    return (f"rank_pattern.{found[0]}", found[1]) if found else ("r", config.get("r", 8))


def configured_alpha(config: Mapping[str, Any], module: str) -> float:
    """``module``'s LoRA alpha (``alpha_pattern`` over ``lora_alpha``)."""
    found = _pattern_value(config.get("alpha_pattern") or {}, module)
    return found[1] if found else config.get("lora_alpha", 8)


def _lora_tensors(header: Mapping[str, Any], *, max_lora_rank: int) -> list[LoraTensor]:
    tensors = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        match = _LORA_TENSOR.match(name)
        if match is None:
            raise AdapterRuleError(name, "is not a LoRA A or B matrix; only LoRA's A and B are served")
        module = match["module"]
        if VISION_SEGMENT.search(module + ".") or not LANGUAGE_MODEL_SEGMENT.search(module + "."):
            raise AdapterRuleError(
                name,
                "is outside the language model (vLLM applies LoRA to the language model only); retrain with "
                "trainer.policy.model.lora.exclude_modules='.*visual.*'",
            )
        shape = tuple(entry["shape"])
        if len(shape) != 2 or 0 in shape:
            raise AdapterRuleError(name, f"shape {list(shape)} is not a 2-D matrix")
        rank = shape[0] if match["kind"] == "A" else shape[1]
        if rank > max_lora_rank:
            raise AdapterRuleError(name, f"rank {rank} exceeds the endpoint's max_lora_rank {max_lora_rank}")
        tensors.append(LoraTensor(module, match["kind"], shape))
    return tensors


def _check_pairs(
    tensors: list[LoraTensor], base_shapes: Mapping[str, tuple[int, int]] | None, config: Mapping[str, Any]
) -> None:
    by_module: dict[str, dict[str, tuple[int, ...]]] = {}
    for tensor in tensors:
        by_module.setdefault(tensor.module, {})[tensor.kind] = tensor.shape
    for module, pair in sorted(by_module.items()):
        if set(pair) != {"A", "B"}:
            raise AdapterRuleError(module, "has a LoRA A without its B (or the reverse)")
        (rank, fan_in), (fan_out, rank_b) = pair["A"], pair["B"]
        if rank != rank_b:
            raise AdapterRuleError(module, f"lora_A has rank {rank} but lora_B has rank {rank_b}")
        field, configured = configured_rank(config, module)
        if rank != configured:
            raise AdapterRuleError(
                field,
                f"is {configured} but the LoRA tensors of {module} have rank {rank}; save the config with the "
                "adapter it belongs to",
            )
        if base_shapes is None:
            continue
        if module not in base_shapes:
            raise AdapterRuleError(
                module, "is not a linear layer of the base model; was the adapter trained on another base?"
            )
        if (fan_out, fan_in) != tuple(base_shapes[module]):
            raise AdapterRuleError(
                module,
                f"LoRA maps {fan_in} -> {fan_out} but the base layer is {base_shapes[module][1]} -> "
                f"{base_shapes[module][0]}; the adapter was trained on another base model",
            )


def inspect_adapter(
    directory: Path,
    *,
    max_lora_rank: int = DEFAULT_MAX_LORA_RANK,
    base_shapes: Mapping[str, tuple[int, int]] | None = None,
) -> AdapterSummary:
    """Check a PEFT LoRA folder against the serving rules without loading any tensor.

    ``base_shapes`` maps the base model's linear layers (``model.language_model.layers.0...``) to
    their ``(out, in)`` weight shape; when given, every LoRA pair must fit its layer.
    """
    config_path, weights_path = directory / ADAPTER_CONFIG, directory / ADAPTER_WEIGHTS
    for path in (config_path, weights_path):
        if not path.is_file():
            raise AdapterRuleError(
                path.name,
                "is missing; a PEFT LoRA folder holds adapter_config.json and adapter_model.safetensors",
            )
    if config_path.stat().st_size > MAX_ADAPTER_CONFIG_BYTES:
        raise AdapterRuleError(ADAPTER_CONFIG, f"is larger than {MAX_ADAPTER_CONFIG_BYTES} bytes")
    try:
        config = json.loads(config_path.read_bytes(), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AdapterRuleError(ADAPTER_CONFIG, f"is not valid JSON ({exc.__class__.__name__})") from exc
    _check_config(config, max_lora_rank=max_lora_rank)
    tensors = _lora_tensors(read_safetensors_header(weights_path), max_lora_rank=max_lora_rank)
    if not tensors:
        raise AdapterRuleError(ADAPTER_WEIGHTS, "holds no LoRA tensors")
    _check_pairs(tensors, base_shapes, config)
    return AdapterSummary(config=config, tensors=tuple(tensors))


def served_lora_config(summary: AdapterSummary) -> dict[str, Any]:
    """The LoRA config the server hands to peft: the checked adapter's, naming exactly its tensors' modules.

    peft never sees the author's `target_modules`, `exclude_modules` or pattern keys, only the full
    names of the modules the safetensors file holds A and B for: no regular expression of the author's
    runs, and no module gets a LoRA layer without weights (``init_lora_weights=False`` would make it random).
    """
    config, modules = summary.config, summary.modules
    rank, alpha = config.get("r", 8), config.get("lora_alpha", 8)
    return {
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": modules,
        "rank_pattern": {m: r for m in modules if (r := configured_rank(config, m)[1]) != rank},
        "alpha_pattern": {m: a for m in modules if (a := configured_alpha(config, m)) != alpha},
        "use_rslora": config.get("use_rslora", False),
        "lora_dropout": 0.0,
        "bias": "none",
        "init_lora_weights": True,
        "inference_mode": True,
    }


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def recorded_base_folder(base: Any, adapter_dir: Path) -> Path | None:
    """The folder an adapter's ``base_model_name_or_path`` names on this machine, or None (a hub id, or a
    folder not here). A relative path is tried against the working directory, then against each folder
    above the adapter: the rehearsal records its base relative to the project that holds the run."""
    if not isinstance(base, str) or not base:
        return None
    path = Path(base)
    roots = [Path()] if path.is_absolute() else [Path.cwd(), *Path(adapter_dir).resolve().parents]
    for root in roots:
        candidate = root / path
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    return None


def check_base(config: Mapping[str, Any], adapter_dir: Path, served_model: Path) -> None:
    """Raise `AdapterRuleError` when the adapter's recorded base is a model folder here other than ``served_model``.

    A base that is not a folder here (a hub id, another machine's path) passes: the layer shapes decide.
    """
    found = recorded_base_folder(config.get("base_model_name_or_path"), adapter_dir)
    if found is not None and found != Path(served_model).resolve():
        raise AdapterRuleError(
            "base_model_name_or_path",
            f"the adapter was trained on the model folder {found.name!r}, not on the one served here "
            f"({Path(served_model).name!r}); serve it with that model",
        )


def check_servable(directory: Path, *, served_model: Path, max_lora_rank: int = DEFAULT_MAX_LORA_RANK) -> None:
    """The checks a server can make without loading its base: the rules, and the recorded base (startup, listing)."""
    summary = inspect_adapter(directory, max_lora_rank=max_lora_rank)
    check_base(summary.config, directory, served_model)


# GET /v1/models states, beside each adapter that has one, the recipe it was trained with (its
# trainer_config.json) under this field; `skymaze evaluate` plays the adapter with those settings.
TRAINER_CONFIG_FIELD = "skymaze_trainer_config"
