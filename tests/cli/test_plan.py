"""``skymaze plan``."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from workload.cli.main import app
from workload.config import DEFAULT_PROFILE
from workload.deployment.settings import PROFILES

runner = CliRunner()


def test_plan_prints_the_figures_and_the_next_step():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog"])
    assert result.exit_code == 0, result.output
    assert "checkpoints:  8 at steps 20, 40" in result.stdout
    assert "skymaze submit --recipe blog" in result.stdout


def test_plan_prints_the_gpu_memory_table_and_the_traffic_per_step():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog"])
    assert result.exit_code == 0, result.output
    assert "GPU memory per GPU (95.6 GiB = 102.6 GB" in result.stdout
    assert "params fp32 / 2              17.5 GB  (hybrid: shard over 2 GPUs of a node, 3 replicas)" in result.stdout
    assert "encoder profiled at 64 tokens an image" in result.stdout
    assert "0.9 GB of it across nodes" in result.stdout
    assert "endpoint:     2 replica(s) x TP=1" in result.stdout
    exact = runner.invoke(app, ["plan", "--recipe", "blog-exact", "--size", "blog", "--json"])
    import json

    gpu = json.loads(exact.stdout)["gpu"]
    assert (gpu["shard"], gpu["encoder_profile_tokens"]) == (6, 16384)


def test_plan_fails_when_the_run_does_not_fit_on_fsx():
    result = runner.invoke(app, ["plan", "--recipe", "blog-exact", "--size", "blog", "--fsx-gib", "600",
                                 "--set", "trainer.max_ckpts_to_keep=-1"])
    assert result.exit_code == 1
    assert "does not fit on FSx" in result.stderr
    assert "extra checkpoints at epoch ends" in result.stderr


@pytest.mark.parametrize("as_json", [False, True])
def test_an_explicit_fsx_size_plans_against_it_and_prints_only_the_fit(as_json):
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--fsx-gib", "2400",
                                 *(["--json"] if as_json else [])])
    assert result.exit_code == 0, result.output
    if as_json:
        import json

        document = json.loads(result.stdout)
        assert document["fsx_bytes"] == 2400 * 2**30
        assert document["cluster_fit"][0].startswith("cluster fit (profile blog")
    else:
        assert "1200" not in result.stdout.splitlines()  # the profile's size is not printed as a line


def test_unknown_profile_is_a_usage_error():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "huge"])
    assert result.exit_code == 2
    assert "profile" in result.stderr


def test_plan_shows_how_the_ray_pods_fit_each_instance_group():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog"])
    assert result.exit_code == 0, result.output
    assert "cluster fit (profile blog" in result.stdout
    assert "workers (ml.g7e.12xlarge, ThreadsPerCore=1): allocatable 23.87 CPU" in result.stdout
    assert "ray worker: 20 CPU, 466.0 GiB, 2 GPU\n" in result.stdout  # no EFA interface: no NCCL plugin for it
    assert "serve ray head" in result.stdout  # blog serves; small does not
    small = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "small", "-c", "worker_count=3"])
    assert small.exit_code == 0, small.output
    assert "head (ml.m5.4xlarge, ThreadsPerCore=2)" in small.stdout and "serve ray head" not in small.stdout


def test_plan_refuses_settings_whose_pods_cannot_fit_naming_the_key():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "-c", "worker_pod_cpu=36"])
    assert result.exit_code == 2
    assert "worker_pod_cpu=36" in result.stderr and "allocatable 23.87 CPU" in result.stderr


def test_a_recipe_that_needs_more_workers_than_the_profile_deploys_is_refused_naming_both():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "small"])
    assert result.exit_code == 2
    assert ("recipe 'blog' needs 3 GPU workers (cluster.nodes) but profile 'small' deploys 1 x ml.g7e.12xlarge "
            "(2 GPUs each). Fix: deploy with -c worker_count=3") in result.stderr
    assert "error: recipe 'blog' cannot run on profile 'small'" in result.stderr
    assert "GPUs:" not in result.stdout


def test_changed_settings_plan_a_run_of_their_own_and_keep_it_across_commands():
    changed = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--set", "trainer.eval_interval=5"])
    again = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--set", "trainer.eval_interval=5"])
    other = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--set", "trainer.eval_interval=4"])
    stored = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--set", "shared_root=/tmp/x"])
    runs = [r.stdout.splitlines()[0] for r in (changed, again, other, stored)]
    assert runs[0] == runs[1] != runs[2] and runs[0].startswith("recipe blog (run maze-blog-")
    assert runs[3] == "recipe blog (run maze-blog)"  # where it is stored does not change the run
    assert "--keep-run-name resumes maze-blog instead" in changed.stderr


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_without_recipe_plan_runs_the_recipe_sized_for_the_profile_and_it_fits(profile):
    args = ["plan"] if profile == DEFAULT_PROFILE else ["plan", "--size", profile]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"recipe {profile} (run ")
    assert f"skymaze submit --recipe {profile} --size {profile}" in result.stdout


def test_a_set_that_changes_the_step_count_says_so_under_steps_and_why():
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--set", "dataset.train_rows=300",
                                 "--set", "trainer.eval_interval=5"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = lines.index("steps:        200 = 10 epochs x 20 steps (600 tickets)")
    assert lines[at + 1] == (
        "              (recipe blog: 160; --set dataset.train_rows=300 makes it 200: dataset.train_rows 300 // "
        "trainer.train_batch_size 30 = 10 steps an epoch x dataset.epochs 20 = 200; fixes.aligned_epochs: 600 "
        "tickets (epochs of 20 steps end on the saves) x 10 epochs = 200)")
    as_json = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--set", "dataset.train_rows=300",
                                  "--json"])
    import json

    assert f"({json.loads(as_json.stdout)['steps_derivation']})" == lines[at + 1].strip()


def test_without_a_set_the_line_under_steps_derives_the_count_from_the_recipes_fields():
    """recipe show --fields says 256 rows and 20 epochs, SkyRL gets 8 epochs of 600: the plan says how."""
    result = runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog"])
    lines = result.stdout.splitlines()
    at = lines.index("steps:        160 = 8 epochs x 20 steps (600 tickets)")
    assert lines[at + 1].strip() == (
        "(dataset.train_rows 256 // trainer.train_batch_size 30 = 8 steps an epoch x dataset.epochs 20 = 160; "
        "fixes.aligned_epochs: 600 tickets (epochs of 20 steps end on the saves) x 8 epochs = 160)")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_hint_stages_the_data_then_submits_the_supervised_run_as_readme_steps_4_and_5(profile):
    from tests.cli.test_hints import next_hints
    from tests.test_readme_commands import check

    result = runner.invoke(app, ["plan", "--size", profile])
    preflight, run = next_hints(result.stdout)
    assert preflight == f"skymaze submit --recipe {profile} --size {profile} --preflight --wait-s 600"
    assert run == f"skymaze submit --recipe {profile} --size {profile} --supervise"
    for hint in (preflight, run):
        check(hint, complete=True)


def test_the_endpoint_line_is_printed_only_for_a_size_that_deploys_the_endpoint():
    """`small` deploys no Ray Serve endpoint (serving=false): plan showed its replicas anyway."""
    lines = {args: [line for line in runner.invoke(app, ["plan", *args]).stdout.splitlines()
                    if line.startswith("endpoint:")]
             for args in (("--size", "small"), ("--size", "blog"), ("--size", "small", "-c", "serving=true"))}
    assert lines[("--size", "small")] == []
    assert len(lines[("--size", "blog")]) == 1 and len(lines[("--size", "small", "-c", "serving=true")]) == 1
