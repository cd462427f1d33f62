"""The job entrypoint outside the image: preflight prepares /shared; training refuses without SkyRL."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from workload.skyrl.entrypoint import job_spec, main, prepare_data, prepare_model
from workload.skyrl.recipe import load_recipe


@pytest.fixture
def spec_file(tmp_path):
    spec = job_spec(load_recipe("blog", sets=[f"shared_root={tmp_path}", "run_id=unit"]))
    path = tmp_path / "job.json"
    path.write_text(spec.to_json())
    return spec, path


def test_preflight_builds_the_tickets_and_prints_the_overrides(spec_file, capsys):
    spec, path = spec_file
    Path(spec.model_path).mkdir(parents=True)
    (Path(spec.model_path) / "config.json").write_text("{}")  # staged by an earlier preflight
    assert main(["--job-spec", str(path), "--preflight"]) == 0
    out = capsys.readouterr().out
    assert "preflight: ok" in out
    assert f"model: reusing {spec.model_path}" in out
    assert all(f"  {line}" in out for line in spec.overrides)
    assert pq.read_metadata(spec.data_dir / "train.parquet").num_rows == 600


def test_data_is_reused_only_for_the_same_ticket_settings(spec_file, tmp_path):
    spec, _ = spec_file
    assert prepare_data(spec).startswith("data: wrote")
    assert prepare_data(spec).startswith("data: reusing")
    other = job_spec(load_recipe("blog", sets=[f"shared_root={tmp_path}", "run_id=unit", "fixes.seeded_groups=false"]))
    assert prepare_data(other).startswith("data: wrote")
    assert json.loads((spec.data_dir / "tickets.json").read_text())["seeded_groups"] is False


def test_preflight_downloads_the_model_the_endpoint_waits_for(spec_file):
    # The suite runs with HF_HUB_OFFLINE=1: the Hub client refuses, which shows the preflight asked it for the model.
    _spec, path = spec_file
    with pytest.raises(OSError, match="outgoing traffic has been disabled"):
        main(["--job-spec", str(path), "--preflight"])


def test_model_already_on_shared_storage_is_reused(spec_file, tmp_path):
    spec, _ = spec_file
    model = tmp_path / "models" / "visgym_model" / "mixed_qwen3vl"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    assert prepare_model(spec, download=True) == f"model: reusing {model}"


def test_training_without_skyrl_stops_before_preparing_anything(spec_file):
    spec, path = spec_file
    with pytest.raises(SystemExit, match=r"SkyRL is not importable here .* runs inside the trainer image"):
        main(["--job-spec", str(path)])
    assert not spec.data_dir.exists()


def test_a_failing_stage_is_named_on_the_jobs_last_line(spec_file, monkeypatch, capsys):
    from workload.skyrl import entrypoint

    spec, path = spec_file
    Path(spec.model_path).mkdir(parents=True)
    (Path(spec.model_path) / "config.json").write_text("{}")

    def stops_at_the_placement_group(spec, stages):
        with stages.running("config"):
            pass
        with stages.running("placement-group"):
            raise TimeoutError("6 GPU bundles not ready in 60 s")

    monkeypatch.setattr(entrypoint, "require_skyrl", lambda: None)
    monkeypatch.setattr(entrypoint, "check_gpu_nodes", lambda: [])  # every GPU node's driver runs CUDA 13.0
    monkeypatch.setattr(entrypoint, "run_skyrl", stops_at_the_placement_group)
    assert main(["--job-spec", str(path)]) == 1
    captured = capsys.readouterr()
    assert [line for line in captured.out.splitlines() if line.startswith(entrypoint.STAGE_MARKER)] == [
        "skymaze-stage: config", "skymaze-stage: placement-group"]
    assert captured.err.splitlines()[-2:] == [
        "skymaze-reached: config placement-group",
        "skymaze-failed-at: placement-group: TimeoutError: 6 GPU bundles not ready in 60 s"]


def test_a_gpu_node_below_r580_stops_the_job_before_skyrl_places_anything(spec_file, monkeypatch, capsys):
    from workload.skyrl import entrypoint

    spec, path = spec_file
    Path(spec.model_path).mkdir(parents=True)
    (Path(spec.model_path) / "config.json").write_text("{}")
    refusal = ("GPU node 10.0.1.6: NVIDIA driver 570.172.08 found; CUDA 13.0 needs driver 580 or newer (R580+). "
               "Fix: run the GPU nodes on a HyperPod AMI release with an R580+ driver")
    ran = []
    monkeypatch.setattr(entrypoint, "require_skyrl", lambda: None)
    monkeypatch.setattr(entrypoint, "check_gpu_nodes", lambda: [refusal])
    monkeypatch.setattr(entrypoint, "run_skyrl", lambda spec, stages: ran.append(spec))
    assert main(["--job-spec", str(path)]) == 1
    assert ran == []
    assert capsys.readouterr().err.splitlines()[-2:] == [f"error: {refusal}", f"skymaze-failed-at: gpu-driver: {refusal}"]


def test_the_stage_survives_rays_task_error_wrapping():
    from workload.skyrl.entrypoint import StageFailed, failed_stage

    class TaskError(RuntimeError):  # the shape of ray.exceptions.RayTaskError: the remote error as `cause`
        def __init__(self, cause):
            super().__init__("task failed")
            self.cause = cause

    inner = StageFailed.of("inference-client", ModuleNotFoundError("No module named 'vllm'"))
    found = failed_stage(TaskError(inner))
    assert (found.stage, found.detail) == ("inference-client", "ModuleNotFoundError: No module named 'vllm'")
    assert str(inner) == "inference-client: ModuleNotFoundError: No module named 'vllm'"
    # Ray pickles the task's exception to the driver: the stage must survive the round trip
    inner = StageFailed.of("inference-client", ModuleNotFoundError("vllm"), ("env-registry", "inference-client"))
    copy = pickle.loads(pickle.dumps(inner))
    assert (copy.stage, copy.detail, copy.reached) == (inner.stage, inner.detail, inner.reached)
    assert failed_stage(TaskError(ValueError("x"))) is None


def test_secret_values_are_masked_and_short_flags_are_not():
    from workload.skyrl.entrypoint import mask_secrets, secret_values

    environ = {"HF_TOKEN": "hf_abcdefgh123", "WANDB_API_KEY": "0123456789abcdef", "HF_HOME": "/shared/hf",
               "RAY_OVERRIDE_JOB_RUNTIME_ENV": "1", "SKYRL_KEY_FLAG": "1"}
    secrets = secret_values(environ)
    assert sorted(secrets) == ["0123456789abcdef", "hf_abcdefgh123"]
    line = "Exporting `HF_TOKEN` to ray runtime env: hf_abcdefgh123; HF_HOME=/shared/hf"
    assert mask_secrets(line, secrets) == "Exporting `HF_TOKEN` to ray runtime env: ***; HF_HOME=/shared/hf"


WEIGHTS = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture
def hub(monkeypatch):
    """The blog recipe's model repository on a loopback Hub, reached by huggingface_hub's own client."""
    from huggingface_hub import constants

    from tests.workload.skyrl.hub_standin import HubStandin

    server = HubStandin("VisGym/visgym_model", {"mixed_qwen3vl/config.json": b'{"model_type": "qwen3_vl"}',
                                                "mixed_qwen3vl/model.safetensors": WEIGHTS,
                                                "other_variant/model.safetensors": b"not this one"})
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the suite is offline (tests/conftest.py) but for this
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", server.url + "/{repo_id}/resolve/{revision}/{filename}")
    yield server
    server.shutdown()
    server.server_close()


def _interrupted(call) -> None:
    with pytest.raises(Exception, match=r"peer closed connection"):  # the hub client's own error, retries spent
        call()


def test_an_interrupted_model_download_leaves_no_model_and_the_next_job_finishes_it(spec_file, hub):
    spec, _ = spec_file
    model = Path(spec.model_path)
    hub.cut_downloads = 100  # more than the hub client's own retries: the job dies mid-file
    _interrupted(lambda: prepare_model(spec, download=True))
    assert not model.parent.exists()  # nothing at the model's path: a later job cannot take it for a model
    assert prepare_model(spec, download=False).startswith(f"model: {model} missing")
    hub.cut_downloads = 0
    assert prepare_model(spec, download=True) == f"model: downloaded VisGym/visgym_model to {model.parent}"
    assert (model / "model.safetensors").read_bytes() == WEIGHTS
    assert not (model.parent.parent / f"{model.parent.name}.download").exists()
    assert not (model.parent / "other_variant").exists()
    assert prepare_model(spec, download=True) == f"model: reusing {model}"


def test_a_download_left_unfinished_in_place_is_finished_not_reused(spec_file, hub):
    from huggingface_hub import snapshot_download

    spec, _ = spec_file
    model = Path(spec.model_path)
    hub.cut_downloads = 100  # as the earlier prepare_model left it: config.json there, the weights half-written
    _interrupted(lambda: snapshot_download("VisGym/visgym_model", local_dir=str(model.parent),
                                           allow_patterns=["mixed_qwen3vl/*"]))
    assert (model / "config.json").is_file() and not (model / "model.safetensors").exists()
    hub.cut_downloads = 0
    assert prepare_model(spec, download=True).startswith("model: downloaded")
    assert (model / "model.safetensors").read_bytes() == WEIGHTS
