"""Promotion of real PEFT exports of the tiny Qwen3-VL: checks, copy order, manifest; S3 via moto."""

from __future__ import annotations

import asyncio
import hashlib
import json

import boto3
import pytest
from moto import mock_aws

from workload.skyrl.promote import MANIFEST, PromoteError, parse_destination, promote, safetensors_names

BUCKET = "skymaze-artifacts"


def _export(model_dir, run_dir, step, **lora_kwargs):
    from peft import LoraConfig, get_peft_model

    from workload.model.tiny import load_tiny

    model, _ = load_tiny(model_dir)
    peft_model = get_peft_model(model, LoraConfig(target_modules="all-linear", **lora_kwargs))
    peft_model.save_pretrained(run_dir / "exports" / f"global_step_{step}" / "policy")


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """One run with a language-only adapter at step 20 (and its eval file), one with vision LoRA."""
    good = tmp_path_factory.mktemp("good-run")
    _export(tiny_model_dir, good, 20, r=8, lora_alpha=8, exclude_modules=".*visual.*")
    (good / "evals").mkdir()
    (good / "evals" / "global_step_20.json").write_text(json.dumps({"strict_pass_at_1": 0.5, "step": 20}))
    vision = tmp_path_factory.mktemp("vision-run")
    _export(tiny_model_dir, vision, 40, r=8, lora_alpha=8)
    return {"good": good, "vision": vision}


def test_promote_to_a_folder_copies_the_adapter_and_writes_the_manifest(runs, tmp_path):
    target = tmp_path / "adapters" / "maze-grpo"
    manifest = promote(runs["good"], 20, str(target), max_lora_rank=32)
    on_disk = json.loads((target / MANIFEST).read_text())
    assert on_disk == manifest
    assert (manifest["name"], manifest["rank"], manifest["lora_alpha"]) == ("maze-grpo", 8, 8)
    assert manifest["base_model"] and manifest["exclude_modules"] == ".*visual.*"
    assert manifest["eval"]["strict_pass_at_1"] == 0.5
    assert manifest["source"]["step"] == 20
    for name, info in manifest["files"].items():
        assert hashlib.sha256((target / name).read_bytes()).hexdigest() == info["sha256"]
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(manifest["files"])


def test_vision_tower_lora_is_refused(runs, tmp_path):
    names = safetensors_names(runs["vision"] / "exports/global_step_40/policy/adapter_model.safetensors")
    assert any(".visual." in n for n in names)  # real PEFT on Qwen3-VL puts LoRA there without the exclusion
    with pytest.raises(
        PromoteError, match=r"LoRA tensors touch the vision tower .*exclude_modules='\.\*visual\.\*'"
    ):
        promote(runs["vision"], 40, str(tmp_path / "x"), max_lora_rank=32)
    assert not (tmp_path / "x").exists()


def test_rank_above_the_serving_maximum_is_refused(runs, tmp_path):
    with pytest.raises(PromoteError, match=r"adapter rank 8 exceeds the endpoint's max_lora_rank 4"):
        promote(runs["good"], 20, str(tmp_path / "x"), max_lora_rank=4)


def test_missing_step_lists_the_exported_steps(runs, tmp_path):
    with pytest.raises(PromoteError, match=r"no LoRA adapter at .*global_step_30.*exported steps: 20"):
        promote(runs["good"], 30, str(tmp_path / "x"), max_lora_rank=32)


def test_promoting_the_same_export_again_is_a_no_op(runs, tmp_path):
    """A hint run twice works twice: the same files (names and sha256s) are already there, nothing is copied."""
    target = tmp_path / "maze-grpo"
    first = promote(runs["good"], 20, str(target), max_lora_rank=32)
    written = (target / MANIFEST).stat().st_mtime_ns
    again = promote(runs["good"], 20, str(target), max_lora_rank=32)
    assert again["already_promoted"] and again["files"] == first["files"]
    assert (target / MANIFEST).stat().st_mtime_ns == written


def test_another_adapter_in_the_place_needs_overwrite(runs, tmp_path):
    target = tmp_path / "maze-grpo"
    promote(runs["good"], 20, str(target), max_lora_rank=32)
    other = json.loads((target / MANIFEST).read_text())
    other["files"]["adapter_model.safetensors"]["sha256"] = "0" * 64  # an adapter from another export
    (target / MANIFEST).write_text(json.dumps(other))
    with pytest.raises(PromoteError, match=r"already holds a promoted adapter; pass --overwrite"):
        promote(runs["good"], 20, str(target), max_lora_rank=32)
    assert promote(runs["good"], 20, str(target), max_lora_rank=32, overwrite=True)["name"] == "maze-grpo"


def test_promoting_the_same_export_to_s3_again_is_a_no_op(runs):
    with mock_aws():
        client = boto3.client("s3", region_name="us-west-2")
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        promote(runs["good"], 20, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32, s3_client=client)
        again = promote(runs["good"], 20, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32, s3_client=client)
    assert again["already_promoted"]


def test_failed_copy_leaves_no_manifest(runs, tmp_path):
    target = tmp_path / "maze-grpo"
    (target / "adapter_model.safetensors").mkdir(parents=True)  # a folder where a file must go
    with pytest.raises(OSError):
        promote(runs["good"], 20, str(target), max_lora_rank=32)
    assert not (target / MANIFEST).exists()


def _s3(client_factory=boto3.client):
    client = client_factory("s3", region_name="us-west-2")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return client


def test_a_served_s3_name_is_not_given_other_weights(runs, tmp_path):
    other = tmp_path / "other-run"
    policy = other / "exports" / "global_step_40" / "policy"
    policy.mkdir(parents=True)
    for path in (runs["good"] / "exports" / "global_step_20" / "policy").iterdir():
        (policy / path.name).write_bytes(path.read_bytes())
    weights = policy / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # other weights, same header
    weights.write_bytes(bytes(data))
    with mock_aws():
        client = _s3()
        promote(runs["good"], 20, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32, s3_client=client)
        with pytest.raises(PromoteError, match=r"already serves other weights.*--to s3://skymaze-artifacts/adapters/"
                                               r"maze-grpo-step40, and evaluate that one"):
            promote(other, 40, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32, s3_client=client)
        stored = client.get_object(Bucket=BUCKET, Key="adapters/maze-grpo/adapter_model.safetensors")["Body"].read()
        with pytest.raises(PromoteError, match=r"--overwrite applies to folders only"):
            promote(other, 40, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32, s3_client=client,
                    overwrite=True)
        promote(other, 40, f"s3://{BUCKET}/adapters/maze-grpo-step40", max_lora_rank=32, s3_client=client)
    assert stored != bytes(data)


def test_a_promote_killed_before_the_config_is_completed_by_running_it_again(runs):
    with mock_aws():
        client = _s3()
        with pytest.raises(ConnectionError):
            promote(runs["good"], 20, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32,
                    s3_client=_CrashBeforeConfig(client))
        manifest = promote(runs["good"], 20, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32, s3_client=client)
        keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert not manifest.get("already_promoted")
    assert keys == {f"adapters/maze-grpo/{name}" for name in [*manifest["files"], MANIFEST]}


@pytest.mark.parametrize(
    ("to", "message"),
    [
        ("s3://bucket-only", r"expected s3://BUCKET/PREFIX/NAME"),
        ("s3://b/adapters/bad:name", r"adapter name 'bad:name'"),
    ],
)
def test_bad_destinations_are_rejected(to, message):
    with pytest.raises(PromoteError, match=message):
        parse_destination(to)


def test_promote_to_s3_uploads_the_weights_then_the_manifest_then_the_config(runs):
    with mock_aws():
        client = boto3.client("s3", region_name="us-west-2")
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        put_order: list[str] = []
        client.meta.events.register(
            "before-parameter-build.s3.PutObject", lambda params, **_: put_order.append(params["Key"])
        )
        manifest = promote(
            runs["good"], 20, f"s3://{BUCKET}/adapters/maze-grpo", max_lora_rank=32, s3_client=client
        )
        keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET)["Contents"]}
        stored = json.loads(
            client.get_object(Bucket=BUCKET, Key="adapters/maze-grpo/manifest.json")["Body"].read()
        )
        weights = client.get_object(Bucket=BUCKET, Key="adapters/maze-grpo/adapter_model.safetensors")[
            "Body"
        ].read()
    assert keys == {f"adapters/maze-grpo/{name}" for name in [*manifest["files"], MANIFEST]}
    assert put_order[-2:] == ["adapters/maze-grpo/manifest.json", "adapters/maze-grpo/adapter_config.json"]
    assert stored == manifest
    assert hashlib.sha256(weights).hexdigest() == manifest["files"]["adapter_model.safetensors"]["sha256"]


# What Ray Serve LLM 2.60's own LoRA code sees of a promote to S3 (a moto server on loopback): the listing is the
# ingress's (`OpenAiIngress.models`: `get_lora_model_ids` names every sub-folder, then `model()` keeps those whose
# `get_lora_model_metadata` answers, i.e. whose adapter_config.json is there) and the download is
# `LoraModelLoader.load_model_from_config`, the replica's multiplexed loader.
BASE_ID = "visgym-sft"
REGION = "us-west-2"


@pytest.fixture(scope="module")
def moto_s3(tmp_path_factory):
    """moto's server on 127.0.0.1 and the environment every boto3 client (Ray's included) reads it from."""
    from tests.moto_server import start_moto_server

    server, port = start_moto_server()
    env = {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}
    patch = pytest.MonkeyPatch()
    for key, value in env.items():
        patch.setenv(key, value)
    try:
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        yield client
    finally:
        patch.undo()
        server.terminate()
        server.wait(timeout=60)


class _CrashBeforeConfig:
    """An S3 client that dies (like a killed promote) when the adapter's config is about to go up."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        return getattr(self._client, name)

    def upload_file(self, filename, bucket, key, *args, **kwargs):
        if key.endswith("/adapter_config.json"):
            raise ConnectionError("promote killed mid-upload")
        return self._client.upload_file(filename, bucket, key, *args, **kwargs)


def _llm_config():
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

    return LLMConfig.model_validate({
        "model_loading_config": {"model_id": BASE_ID, "model_source": "/shared/models/visgym-sft"},
        "lora_config": {"dynamic_lora_loading_path": f"s3://{BUCKET}/adapters"},
    })


async def _listed(llm_config) -> list[str]:
    """The adapters OpenAiIngress.models lists (ray/llm/_internal/serve/core/ingress/ingress.py, ``models``)."""
    from fastapi import HTTPException
    from ray.llm._internal.common.utils.lora_utils import get_lora_model_ids
    from ray.llm._internal.serve.utils.lora_serve_utils import get_lora_model_metadata

    listed = []
    path = llm_config.lora_config.dynamic_lora_loading_path
    for model_id in get_lora_model_ids(dynamic_lora_loading_path=path, base_model_id=BASE_ID):
        try:
            await get_lora_model_metadata(model_id, path)
        except HTTPException:
            continue
        listed.append(model_id)
    return listed


def test_ray_serve_llm_lists_and_loads_only_a_complete_promote(runs, moto_s3, tmp_path, tiny_model_dir):
    from fastapi import HTTPException
    from peft import PeftModel
    from ray.llm._internal.serve.utils.lora_serve_utils import LoraModelLoader

    from workload.model.tiny import load_tiny

    with pytest.raises(ConnectionError):
        promote(runs["good"], 20, f"s3://{BUCKET}/adapters/half", max_lora_rank=32,
                s3_client=_CrashBeforeConfig(moto_s3))
    keys = {o["Key"] for o in moto_s3.list_objects_v2(Bucket=BUCKET, Prefix="adapters/half/")["Contents"]}
    assert "adapters/half/adapter_model.safetensors" in keys  # the weights did go up
    manifest = promote(runs["good"], 20, f"s3://{BUCKET}/adapters/whole", max_lora_rank=32, s3_client=moto_s3)

    llm_config = _llm_config()
    assert asyncio.run(_listed(llm_config)) == [f"{BASE_ID}:whole"]

    loader = LoraModelLoader(lora_root=str(tmp_path / "cache"), download_timeout_s=60)
    with pytest.raises(HTTPException) as missing:
        asyncio.run(loader.load_model_from_config(f"{BASE_ID}:half", llm_config))
    assert missing.value.status_code == 404
    loaded = asyncio.run(loader.load_model_from_config(f"{BASE_ID}:whole", llm_config))
    local = tmp_path / "cache" / "whole"
    assert loaded.local_path == str(local)
    for name, facts in manifest["files"].items():
        assert hashlib.sha256((local / name).read_bytes()).hexdigest() == facts["sha256"]
    assert json.loads((local / MANIFEST).read_text())["files"] == manifest["files"]
    model, _ = load_tiny(tiny_model_dir)
    served = PeftModel.from_pretrained(model, loaded.local_path)
    assert served.peft_config["default"].r == 8
