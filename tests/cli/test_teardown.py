"""`skymaze teardown`: the dry-run plan, confirmation, bad input, and a full run on fakes + moto."""

from __future__ import annotations

import re

import boto3
from moto import mock_aws
from typer.testing import CliRunner

from tests.workload.ops.fakes import build_aws_world, cluster_objects, install_fakes
from workload.cli.main import app

runner = CliRunner()


def test_dry_run_prints_the_full_ordered_plan_for_blog():
    result = runner.invoke(app, ["teardown", "--size", "blog", "--dry-run"])
    assert result.exit_code == 0, result.output
    numbered = re.findall(r"^\s*(\d+)\. \[([a-z0-9-]+)\]", result.output, flags=re.MULTILINE)
    assert [int(n) for n, _ in numbered] == list(range(1, 17))
    keys = [key for _, key in numbered]
    assert keys.index("delete-rayjobs") < keys.index("delete-lb-services") < keys.index("wait-load-balancers")
    assert keys.index("wait-lb-enis") < keys.index("cdk-destroy")
    assert keys.index("cdk-destroy") < keys.index("delete-orphaned-security-groups") < keys.index("delete-asset-images")
    assert "cdk destroy --all --force -c profile=blog" in result.output
    assert result.output.rstrip().endswith("skymaze teardown --size blog")


def test_dry_run_with_keep_data_keeps_the_bucket():
    result = runner.invoke(app, ["teardown", "--size", "blog", "--dry-run", "--keep-data"])
    assert result.exit_code == 0, result.output
    assert "artifacts bucket: kept" in result.output and "[retain-artifacts]" in result.output
    assert "[delete-retained-buckets]" not in result.output


def test_unknown_profile_is_a_usage_error():
    result = runner.invoke(app, ["teardown", "--size", "huge", "--dry-run"])
    assert result.exit_code == 2
    assert "--size 'huge': not a cluster size; choose one of blog, small." in result.output


def test_unknown_override_is_a_usage_error():
    result = runner.invoke(app, ["teardown", "--size", "blog", "-c", "gpus=9", "--dry-run"])
    assert result.exit_code == 2
    assert "--deploy-set gpus=...: not a deployment setting" in result.output


def test_declining_the_confirmation_changes_nothing(tmp_path, monkeypatch):
    tools = install_fakes(tmp_path, monkeypatch, server=None, kinds={})
    with mock_aws():
        result = runner.invoke(app, ["teardown", "--size", "small", "--cdk-bin", tools.cdk], input="n\n")
    assert result.exit_code == 1
    assert "in account 123456789012, us-west-2; the buckets above are deleted?" in result.output
    assert tools.calls() == ["cdk list -c profile=small"], "only discovery ran (`cdk list` changes nothing)"


def test_full_teardown_runs_every_step_and_ends_with_next_command(tmp_path, monkeypatch):
    with mock_aws():
        world = build_aws_world(boto3.Session(region_name="us-west-2"))
        tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=cluster_objects())
        result = runner.invoke(app, ["teardown", "--size", "blog", "--yes", "--cdk-bin", tools.cdk,
                                     "--poll-s", "0.01", "--state-dir", str(tmp_path / "state"),
                                     "--kube-context", "skymaze-admin"])
    assert result.exit_code == 0, result.output
    kubectl_calls = [call for call in tools.calls() if call.startswith("kubectl")]
    assert kubectl_calls and all(call.startswith("kubectl --context skymaze-admin ") for call in kubectl_calls)
    assert "[16/16] delete-retained-buckets" in result.output
    assert tools.calls()[-1] == "cdk destroy --all --force -c profile=blog"
    assert list((tmp_path / "state").iterdir()) == [], "a completed teardown leaves no state file behind"
    assert result.output.rstrip().endswith("skymaze cost --size blog --hours 12   # what the run cost, from the price table")


def test_failed_step_exits_1_with_the_rerun_hint(tmp_path, monkeypatch):
    with mock_aws():
        world = build_aws_world(boto3.Session(region_name="us-west-2"))
        tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds=cluster_objects())
        monkeypatch.setenv("FAKE_FAIL_ONCE", "kubectl delete rayservices")
        args = ["teardown", "--size", "blog", "--yes", "--cdk-bin", tools.cdk, "--poll-s", "0.01",
                "--state-dir", str(tmp_path / "state")]
        failed = runner.invoke(app, args)
        rerun = runner.invoke(app, args)
    assert failed.exit_code == 1
    assert "step 3/16 `delete-rayservices` failed" in failed.output
    assert "rerun `skymaze teardown --size blog` to continue" in failed.output
    assert rerun.exit_code == 0, rerun.output


def test_make_destroy_and_deploy_run_these_commands(repo_root):
    import subprocess

    for target, command in (("destroy", "skymaze teardown --size blog"), ("deploy", "skymaze deploy --size blog")):
        # Under `make test` this runs inside make: --no-print-directory keeps "Leaving directory" out.
        dry = subprocess.run(["make", "--no-print-directory", "-n", target, "PROFILE=blog"], cwd=repo_root,
                             capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr
        assert f".venv/bin/{command}" in dry.stdout.splitlines()[-1]


def _buckets(session) -> set[str]:
    return {b["Name"] for b in session.client("s3").list_buckets()["Buckets"]}


def test_a_kept_deployment_survives_the_default_teardown_of_another_one(tmp_path, monkeypatch):
    """Deployment A (name skymaze) is torn down with --keep-data; then deployment B (-c name=maze2, the same size)
    is torn down without it. B's teardown deletes B's buckets and never A's kept artifacts bucket."""
    with mock_aws():
        session = boto3.Session(region_name="us-west-2")
        kept = build_aws_world(session, bucket_policy="Retain")
        tools = install_fakes(tmp_path, monkeypatch, server=kept.endpoint, kinds={})
        common = ["--size", "blog", "--yes", "--cdk-bin", tools.cdk, "--poll-s", "0.01",
                  "--state-dir", str(tmp_path / "state")]
        first = runner.invoke(app, ["teardown", *common, "--keep-data"])
        assert first.exit_code == 0, first.output
        for stack in ("SkymazeStorage", "SkymazeNetwork"):  # what `cdk destroy` does; Retain keeps the buckets
            session.client("cloudformation").delete_stack(StackName=stack)
        session.client("eks").delete_cluster(name="skymaze-eks")
        other = build_aws_world(session, app="Maze2", cluster="maze2-eks")
        tools.set_server(other.endpoint)
        monkeypatch.setenv("FAKE_CDK_LIST", "Maze2Network\nMaze2Storage")
        second = runner.invoke(app, ["teardown", *common, "-c", "name=maze2"])
        assert second.exit_code == 0, second.output
        left = _buckets(session)
    assert kept.artifacts_bucket in left and kept.logs_bucket in left, second.output
    assert other.artifacts_bucket not in left and other.logs_bucket not in left
    assert kept.artifacts_bucket not in second.output


def test_the_prompt_lists_each_bucket_with_its_objects_and_promoted_adapters(tmp_path, monkeypatch):
    with mock_aws():
        world = build_aws_world(boto3.Session(region_name="us-west-2"))
        s3 = world.session.client("s3")
        for name in ("maze-a", "maze-b"):
            s3.put_object(Bucket=world.artifacts_bucket, Key=f"adapters/{name}/adapter_model.safetensors", Body=b"w")
        tools = install_fakes(tmp_path, monkeypatch, server=world.endpoint, kinds={})
        result = runner.invoke(app, ["teardown", "--size", "blog", "--cdk-bin", tools.cdk,
                                     "--state-dir", str(tmp_path / "state")], input="n\n")
    assert result.exit_code == 1
    assert f"  {world.artifacts_bucket}: 3 object(s); promoted adapters: maze-a, maze-b" in result.output
    assert f"  {world.logs_bucket}: 0 object(s); promoted adapters: none" in result.output
    assert "buckets of this deployment (deleted):" in result.output
    assert _cdk_changes(tools.calls()) == [] and not [c for c in tools.calls() if c.startswith("kubectl")]


def _cdk_changes(calls) -> list[str]:
    return [call for call in calls if call.startswith("cdk") and not call.startswith("cdk list")]


def test_removal_retain_keeps_the_buckets_and_waits_for_the_export():
    result = runner.invoke(app, ["teardown", "--size", "blog", "-c", "removal=retain", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "artifacts bucket: kept (removal=retain)" in result.output
    assert "[delete-retained-buckets]" not in result.output
    keys = re.findall(r"^\s*\d+\. \[([a-z0-9-]+)\]", result.output, flags=re.MULTILINE)
    assert keys.index("drain-fsx-export") < keys.index("cdk-destroy")
