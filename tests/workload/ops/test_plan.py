"""The teardown plan is pure: its order, the keep-data variant and the rendering for --dry-run."""

from __future__ import annotations

from workload.ops.plan import TeardownTarget, build_teardown_plan, render_plan


def _keys(**kwargs) -> list[str]:
    target = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze", **kwargs)
    return [step.key for step in build_teardown_plan(target)]


def test_kubernetes_objects_go_before_the_aws_waits_and_the_stacks():
    keys = _keys()
    assert keys == [
        "kube-context", "delete-rayjobs", "delete-rayservices", "delete-rayclusters", "delete-lb-services",
        "delete-ingresses", "delete-dynamic-pvcs", "wait-load-balancers", "wait-lb-enis",
        "delete-guardduty-endpoints", "cdk-destroy", "delete-retained-file-systems",
        "delete-orphaned-security-groups", "delete-asset-images", "delete-log-groups", "delete-retained-buckets",
    ]


def test_on_an_existing_cluster_its_security_group_is_not_the_apps_to_delete():
    keys = _keys(existing_eks_cluster="theirs")
    assert "delete-orphaned-security-groups" not in keys and "delete-asset-images" in keys


def test_keep_data_retains_the_bucket_before_destroy_and_deletes_no_bucket():
    keys = _keys(keep_data=True)
    assert keys.index("retain-artifacts") == keys.index("cdk-destroy") - 1
    assert "delete-retained-buckets" not in keys


def test_every_step_names_an_executor_action():
    from workload.ops.teardown import TeardownExecutor

    for keep_data in (False, True):
        target = TeardownTarget(profile="small", region="us-east-1", app_name="x", keep_data=keep_data)
        for step in build_teardown_plan(target):
            assert callable(getattr(TeardownExecutor, step.action, None)), step.action


def test_overrides_travel_to_every_cdk_call_and_explicit_stacks_go_in_reverse():
    target = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze",
                            overrides=(("worker_count", "2"),), stacks=("SkymazeNetwork", "SkymazeCluster"))
    assert target.cdk_context == ("-c", "profile=blog", "-c", "worker_count=2")
    destroy = next(step for step in build_teardown_plan(target) if step.key == "cdk-destroy")
    assert "cdk destroy SkymazeCluster SkymazeNetwork --force -c profile=blog -c worker_count=2" in destroy.title


def test_rendered_plan_numbers_every_step_in_order():
    target = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze")
    steps = build_teardown_plan(target)
    lines = render_plan(target, steps).splitlines()
    assert "profile 'blog'" in lines[0] and "artifacts bucket: deleted" in lines[0]
    assert [line.split("]")[0] for line in lines[1:]] == [f"{n:>2}. [{s.key}" for n, s in enumerate(steps, 1)]


def test_rerun_command_repeats_the_options_that_change_the_target():
    target = TeardownTarget(profile="blog", region="us-west-2", app_name="skymaze", keep_data=True,
                            overrides=(("name", "maze2"),))
    assert target.rerun_command == "skymaze teardown --size blog --keep-data -c name=maze2"
