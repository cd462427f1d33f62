"""``skymaze promote`` against moto S3 and a local folder."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from workload.cli.main import app
from workload.skyrl.promote import MANIFEST

runner = CliRunner()


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory):
    from peft import LoraConfig, get_peft_model

    from workload.model.tiny import load_tiny

    run = tmp_path_factory.mktemp("run")
    model, _ = load_tiny(tiny_model_dir)
    lora = LoraConfig(r=8, lora_alpha=8, target_modules="all-linear", exclude_modules=".*visual.*")
    get_peft_model(model, lora).save_pretrained(run / "exports" / "global_step_20" / "policy")
    return run


def test_promote_to_s3_prints_the_model_id_suffix(run_dir):
    with mock_aws():
        client = boto3.client("s3", region_name="us-west-2")
        client.create_bucket(Bucket="skymaze-bucket", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        result = runner.invoke(app, ["promote", "--run", str(run_dir), "--step", "20", "--to", "s3://skymaze-bucket/adapters/maze-grpo"])
        manifest = json.loads(client.get_object(Bucket="skymaze-bucket", Key=f"adapters/maze-grpo/{MANIFEST}")["Body"].read())
    assert result.exit_code == 0, result.output
    assert "promoted maze-grpo (rank 8" in result.stdout
    assert "strict pass@1 at step 20: n/a" in result.stdout
    assert "--model VisGym/visgym_model/mixed_qwen3vl:maze-grpo" in result.stdout  # the profile's endpoint base id
    assert manifest["rank"] == 8


def test_promote_uses_the_profile_serving_rank_unless_given(run_dir, tmp_path):
    result = runner.invoke(app, ["promote", "--run", str(run_dir), "--step", "20", "--to", str(tmp_path / "a"), "--max-lora-rank", "4"])
    assert result.exit_code == 2
    assert "exceeds the endpoint's max_lora_rank 4" in result.stderr
    result = runner.invoke(app, ["promote", "--run", str(run_dir), "--step", "20", "--to", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output


def test_missing_bucket_is_an_operation_failure(run_dir):
    with mock_aws():
        result = runner.invoke(app, ["promote", "--run", str(run_dir), "--step", "20", "--to", "s3://no-such-bucket/adapters/x"])
    assert result.exit_code == 1
    assert "promote failed" in result.stderr


def test_next_commands_serve_the_promoted_folder_and_evaluate_with_the_adapter_settings(tmp_path):
    from workload.cli.promote import _next_commands

    manifest = {"name": "maze-rehearsal", "base_model": "/runs/local-1/models/sft"}
    serve, evaluate = _next_commands(manifest, "adapters/maze-rehearsal", tmp_path / "export")
    # one model-id scheme: the rehearsal's SFT model is maze-sft here as on the rehearsal's own endpoint;
    # evaluate waits for the server it is printed beside
    assert serve == "skymaze serve --model /runs/local-1/models/sft --model-id maze-sft --adapters adapters --port 8000 &"
    assert evaluate == ("skymaze evaluate --endpoint http://127.0.0.1:8000 --model maze-sft:maze-rehearsal "
                        "--adapter adapters/maze-rehearsal --wait-s 300 --out evals/maze-rehearsal")
    (remote,) = _next_commands(manifest, "s3://b/adapters/maze-grpo", tmp_path / "export")
    assert "--adapter" not in remote  # the export's folder is where promote ran, not where evaluate runs


def test_after_a_promotion_to_s3_evaluate_gets_the_adapters_settings_as_options_not_the_pods_path(tmp_path):
    """On the cluster promote runs in the head pod (/shared/...); evaluate runs beside the port-forward."""
    from tests.test_readme_commands import check
    from workload.cli.promote import _cluster_endpoint, _next_commands

    export = tmp_path / "shared" / "runs" / "maze-blog" / "exports" / "global_step_40" / "policy"
    export.mkdir(parents=True)
    (export / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/shared/models/m", "r": 8}))
    (export / "trainer_config.json").write_text(json.dumps({
        "environment": {"heldout_set": "rehearsal-7x7-64", "maze": {"cell_px": 8, "size": 7}},
        "generator": {"image_history": 1, "max_turns": 15, "eval_sampling_params": {"max_generate_length": 2}}}))
    manifest = {"name": "maze-grpo", "base_model": "/shared/models/m"}
    _, evaluate = _next_commands(manifest, "s3://b/adapters/maze-grpo", export, _cluster_endpoint("blog"))
    assert str(tmp_path) not in evaluate
    assert evaluate == ("skymaze evaluate --endpoint http://127.0.0.1:8000 --model VisGym/visgym_model/mixed_qwen3vl:maze-grpo "
                        "--heldout rehearsal-7x7-64 --cell-px 8 --image-history 1 --max-tokens 2 --max-turns 15 "
                        "--style compact --wait-s 300 --out evals/maze-grpo")
    check(evaluate, complete=True)
    # a cluster export has no trainer_config.json: the held-out set of the run's evaluation, when it has one
    (export / "trainer_config.json").unlink()
    _, evaluate = _next_commands({**manifest, "eval": {"set": "easy-64"}}, "s3://b/adapters/maze-grpo", export,
                                 _cluster_endpoint("blog"))
    assert " --heldout easy-64 --wait-s 300 " in evaluate


def test_after_a_promotion_to_s3_the_hints_reach_the_profiles_endpoint_and_run_as_printed(tmp_path):
    """No template placeholders (`<serving endpoint>` is a shell redirect): the port-forward, then evaluate."""
    import shlex

    from tests.test_readme_commands import check
    from workload.cli.promote import _cluster_endpoint, _next_commands

    manifest = {"name": "maze-grpo", "base_model": "/shared/models/visgym_model/mixed_qwen3vl"}
    forward, evaluate = _next_commands(manifest, "s3://b/adapters/maze-grpo", tmp_path / "export",
                                       _cluster_endpoint("blog"))
    assert forward == "kubectl -n ray port-forward svc/skymaze-serve-serve-svc 8000:8000 &"
    assert evaluate == ("skymaze evaluate --endpoint http://127.0.0.1:8000 --model "
                        "VisGym/visgym_model/mixed_qwen3vl:maze-grpo --wait-s 300 --out evals/maze-grpo")
    assert not any(c in evaluate for c in "<>|;")
    check(evaluate, complete=True)  # parses against the CLI
    assert shlex.split(forward)[:3] == ["kubectl", "-n", "ray"]


def test_on_the_cluster_name_promotes_the_newest_export_to_the_pods_artifacts_bucket(run_dir, tmp_path, monkeypatch):
    """`kubectl exec ... -- skymaze promote --run /shared/runs/maze-blog --name maze-grpo`: no bucket or step to type."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    shutil.copytree(run / "exports" / "global_step_20", run / "exports" / "global_step_160")
    monkeypatch.setenv("SKYMAZE_ARTIFACTS", "s3://skymaze-artifacts-123456789012-us-west-2")
    with mock_aws():
        client = boto3.client("s3", region_name="us-west-2")
        client.create_bucket(Bucket="skymaze-artifacts-123456789012-us-west-2",
                             CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
        result = runner.invoke(app, ["promote", "--run", str(run), "--name", "maze-grpo"])
        manifest = json.loads(client.get_object(Bucket="skymaze-artifacts-123456789012-us-west-2",
                                                Key=f"adapters/maze-grpo/{MANIFEST}")["Body"].read())
    assert result.exit_code == 0, result.output
    assert manifest["source"]["step"] == 160 and "to s3://skymaze-artifacts-123456789012-us-west-2/adapters/maze-grpo" in result.stdout


def test_a_rehearsal_promotes_its_step_selected_on_validation_by_default(run_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    shutil.copytree(run / "exports" / "global_step_20", run / "exports" / "global_step_30")
    (run / "report.json").write_text(json.dumps({"best_step": 20}))
    result = runner.invoke(app, ["promote", "--run", str(run), "--to", str(tmp_path / "adapters" / "maze-rehearsal")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "adapters" / "maze-rehearsal" / MANIFEST).read_text())["source"]["step"] == 20


def test_name_off_the_cluster_says_where_it_works(run_dir, monkeypatch):
    monkeypatch.delenv("SKYMAZE_ARTIFACTS", raising=False)
    result = runner.invoke(app, ["promote", "--run", str(run_dir), "--name", "maze-grpo"])
    assert result.exit_code == 2 and "named by SKYMAZE_ARTIFACTS on its Ray pods" in result.stderr
    neither = runner.invoke(app, ["promote", "--run", str(run_dir)])
    assert neither.exit_code == 2 and "give --to" in neither.stderr
