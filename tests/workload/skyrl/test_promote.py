"""Promotion of real PEFT exports of the tiny Qwen3-VL: checks, copy order, manifest; S3 via moto."""

from __future__ import annotations

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


def test_promote_to_s3_uploads_files_then_the_manifest_last(runs):
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
    assert put_order[-1] == "adapters/maze-grpo/manifest.json"
    assert stored == manifest
    assert hashlib.sha256(weights).hexdigest() == manifest["files"]["adapter_model.safetensors"]["sha256"]
