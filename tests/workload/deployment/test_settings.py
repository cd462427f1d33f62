"""Deployment settings: profiles, -c overrides as the CLI passes them, one test per validation error."""

from __future__ import annotations

import re

import pytest

from workload.deployment.settings import (
    DEPLOY_GUARD_WARN_HOURS,
    KUBERNETES_VERSION,
    S3_BUCKET_NAME_MAX,
    SUPPORTED_REGIONS,
    SettingsError,
    load_settings,
    settings_table,
)


def test_blog_profile_is_the_published_topology():
    s = load_settings({"profile": "blog"})
    assert s.head_instance_type == "ml.r5d.16xlarge"
    assert (s.worker_instance_type, s.worker_count, s.gpus_per_worker) == ("ml.g7e.12xlarge", 3, 2)
    assert s.fsx_storage_gib == 1200 and s.serving


def test_small_profile_is_one_gpu_node_without_serving():
    s = load_settings({"profile": "small"})
    assert s.worker_count == 1 and not s.serving
    assert s.worker_count * s.gpus_per_worker == 2


def test_profile_defaults_to_small_and_ignores_cdk_feature_flags():
    s = load_settings({"@aws-cdk/core:newStyleStackSynthesis": True, "availability-zones:x": ["a"]})
    assert s.profile == "small"


def test_cli_strings_are_converted():
    s = load_settings({"profile": "blog", "worker_count": "2", "serving": "false", "fsx_storage_gib": "4800"})
    assert (s.worker_count, s.serving, s.fsx_storage_gib) == (2, False, 4800)


def test_settings_are_frozen():
    s = load_settings({"profile": "blog"})
    with pytest.raises(Exception, match="frozen"):
        s.worker_count = 9


def test_bucket_names_are_fixed_by_account_region_and_name():
    s = load_settings({"profile": "blog", "account": "123456789012", "region": "us-east-1"})
    assert s.lifecycle_bucket_name == "sagemaker-skymaze-lifecycle-123456789012-us-east-1"
    assert s.artifacts_bucket_name == "skymaze-artifacts-123456789012-us-east-1"


def test_unknown_profile_names_the_allowed_ones():
    with pytest.raises(SettingsError, match=r"profile: 'huge' is not allowed; allowed values: blog, small"):
        load_settings({"profile": "huge"})


def test_region_without_g7e_is_rejected():
    with pytest.raises(SettingsError, match=r"region: .*'eu-west-1' is not allowed; allowed values: us-east-1"):
        load_settings({"profile": "blog", "region": "eu-west-1"})


def test_unknown_worker_type_is_rejected():
    with pytest.raises(SettingsError, match=r"worker_instance_type: .*'ml.p5.48xlarge' is not allowed; allowed values: ml.g7e"):
        load_settings({"profile": "blog", "worker_instance_type": "ml.p5.48xlarge"})


def test_unknown_head_type_is_rejected():
    with pytest.raises(SettingsError, match=r"head_instance_type: .*allowed values: ml.r5d.16xlarge"):
        load_settings({"profile": "blog", "head_instance_type": "ml.t3.medium"})


def test_fsx_size_off_the_lustre_steps_is_rejected():
    with pytest.raises(SettingsError, match=r"fsx_storage_gib: .*2000 is not allowed; allowed values: 1200, 2400"):
        load_settings({"profile": "blog", "fsx_storage_gib": "2000"})


def test_fsx_throughput_outside_persistent_2_values_is_rejected():
    with pytest.raises(SettingsError, match=r"fsx_throughput_mbps_per_tib: .*100 is not allowed; allowed values: \(125"):
        load_settings({"profile": "blog", "fsx_throughput_mbps_per_tib": "100"})


def test_removal_policy_must_be_dev_or_retain():
    with pytest.raises(SettingsError, match=r"removal: Input should be 'dev' or 'retain'"):
        load_settings({"profile": "blog", "removal": "keep"})


def test_zero_workers_is_rejected():
    with pytest.raises(SettingsError, match=r"worker_count: Input should be greater than or equal to 1"):
        load_settings({"profile": "blog", "worker_count": "0"})


def test_bad_account_is_rejected():
    with pytest.raises(SettingsError, match=r"account: .*must be a 12-digit AWS account id"):
        load_settings({"profile": "blog", "account": "12345"})


def test_the_kubernetes_version_is_one_hyperpod_documents_and_a_user_can_pin_one_kubectl_reaches():
    # The HyperPod EKS prerequisites page lists 1.28-1.34 (read 2026-12-06); the kubectl 1.35 layer reaches
    # 1.34-1.36; a newer one than HyperPod lists only when set (preflight warns).
    assert load_settings({"profile": "blog"}).kubernetes_version == KUBERNETES_VERSION == "1.34"
    assert load_settings({"profile": "blog", "kubernetes_version": "1.35"}).kubernetes_version == "1.35"
    with pytest.raises(SettingsError, match=r"kubernetes_version: .*'1.33' is not a version the cluster stack's "
                                            r"kubectl \(1.35\) can manage; choose one of 1.34, 1.35, 1.36"):
        load_settings({"profile": "blog", "kubernetes_version": "1.33"})


@pytest.mark.parametrize("key", ["head_count", "max_lora_rank", "ray_namespace", "head_pod_cpu",
                                 "base_model_id", "serve_model_source", "supervise.backoff_base_s"])
def test_a_constant_or_a_derived_value_given_with_c_is_not_a_setting(key):
    with pytest.raises(SettingsError, match=rf"^{re.escape(key)}: not a deployment setting"):
        load_settings({"profile": "blog", key: "3"})


def test_the_user_table_stays_small():
    # rows: 52 before the one-value knobs became constants; 39, then the observability add-on's pinned version
    # and who collects Ray's metrics (both the account's answer, recorded by deploy like kubernetes_version)
    assert len(settings_table()) - 2 <= 41


def test_the_deploy_guard_warns_halfway_through_a_short_deployment():
    guarded = {"profile": "blog", "alert_emails": "a@example.com"}
    assert load_settings({**guarded, "max_deployed_hours": "14"}).deploy_guard_warn_hours == DEPLOY_GUARD_WARN_HOURS
    assert load_settings({**guarded, "max_deployed_hours": "1"}).deploy_guard_warn_hours == 0.5


def test_a_misspelt_setting_is_an_error_not_a_silent_default():
    with pytest.raises(SettingsError, match=r"worker_cnt: not a deployment setting; did you mean worker_count\? \(known settings: profile, account"):
        load_settings({"profile": "blog", "worker_cnt": "2"})


def test_a_name_too_long_for_the_lifecycle_bucket_names_the_longest_that_fits():
    # 21 characters pass the name pattern; sagemaker-NAME-lifecycle-ACCOUNT-REGION is then 69 in ap-northeast-1.
    with pytest.raises(SettingsError, match=r"name=a2345678901234567890x \(21 characters\) makes the lifecycle bucket "
                       r"name sagemaker-a2345678901234567890x-lifecycle-111111111111-ap-northeast-1 69 characters, "
                       r"over S3's 63: in region=ap-northeast-1 use a name of at most 15 characters"):
        load_settings({"profile": "blog", "region": "ap-northeast-1", "name": "a2345678901234567890x"})


@pytest.mark.parametrize("region", SUPPORTED_REGIONS)
def test_the_longest_name_the_refusal_offers_fits(region):
    with pytest.raises(SettingsError, match=r"at most \d+ characters") as refused:
        load_settings({"profile": "blog", "region": region, "name": "a" * 21})
    longest = int(re.search(r"at most (\d+) characters", str(refused.value)).group(1))
    assert len(load_settings({"profile": "blog", "region": region, "name": "a" * longest}).lifecycle_bucket_name) == (
        S3_BUCKET_NAME_MAX)


@pytest.mark.parametrize(("name", "prefix"), [("xn--maze", "xn--"), ("sthree-maze", "sthree-"),
                                              ("amzn-s3-demo-maze", "amzn-s3-demo-")])
def test_a_name_that_starts_the_bucket_with_a_prefix_s3_reserves_is_refused(name, prefix):
    with pytest.raises(SettingsError, match=rf"name={name} starts the artifacts bucket name {name}-artifacts-"
                       rf"111111111111-us-west-2 with '{prefix}', a prefix S3 reserves"):
        load_settings({"profile": "blog", "name": name})


def test_a_bad_name_is_rejected():
    with pytest.raises(SettingsError, match=r"name: String should match pattern"):
        load_settings({"profile": "blog", "name": "Bad_Name"})


def test_access_principals_are_iam_roles_or_users_given_comma_separated():
    s = load_settings({"profile": "blog", "admin_principal_arns": "arn:aws:iam::123456789012:role/a, "
                       "arn:aws:iam::123456789012:user/b,arn:aws:iam::123456789012:role/a"})
    assert s.admin_principal_arns == ("arn:aws:iam::123456789012:role/a", "arn:aws:iam::123456789012:user/b")


def test_an_sts_session_is_not_an_access_principal():
    with pytest.raises(SettingsError, match=r"admin_principal_arns: .*STS session.*give the role's ARN"):
        load_settings({"profile": "blog", "admin_principal_arns": "arn:aws:sts::123456789012:assumed-role/r/s"})


def test_one_principal_cannot_be_admin_and_user():
    arn = "arn:aws:iam::123456789012:role/a"
    with pytest.raises(SettingsError, match=r"user_principal_arns: .* also in admin_principal_arns"):
        load_settings({"profile": "blog", "admin_principal_arns": arn, "user_principal_arns": arn})


def test_the_eks_public_endpoint_narrows_to_cidrs_or_closes():
    assert load_settings({"profile": "blog"}).eks_public_access_cidrs == ("0.0.0.0/0",)
    narrowed = load_settings({"profile": "blog", "eks_public_access_cidrs": "203.0.113.0/24, 198.51.100.7/32"})
    assert narrowed.eks_public_access_cidrs == ("203.0.113.0/24", "198.51.100.7/32")
    assert load_settings({"profile": "small", "eks_public_access_cidrs": "private"}).eks_public_access_cidrs == ()


def test_a_public_endpoint_cidr_must_be_an_ipv4_network():
    with pytest.raises(SettingsError, match=r"eks_public_access_cidrs: .*'10\.0\.0\.1/8' is not an IPv4 CIDR .*203\.0"):
        load_settings({"profile": "blog", "eks_public_access_cidrs": "10.0.0.1/8"})


def test_an_existing_clusters_endpoint_is_its_owners():
    byo = {"profile": "blog", "eks_cluster_name": "theirs", "eks_cluster_security_group_id": "sg-0123456789abcdef0",
           "vpc_id": "vpc-0123456789abcdef0", "private_subnet_ids": "subnet-0123456789abcdef0",
           "private_subnet_azs": "us-west-2a", "eks_public_access_cidrs": "private"}
    with pytest.raises(SettingsError, match=r"eks_public_access_cidrs is set but eks_cluster_name=theirs .*unset"):
        load_settings(byo)


def test_grafana_admins_are_identity_center_ids():
    with pytest.raises(SettingsError, match=r"grafana_admin_user_ids: .*Identity Center"):
        load_settings({"profile": "blog", "grafana_admin_user_ids": "alice"})
    ok = "9067c7b8a1-1b2c3d4e-aaaa-bbbb-cccc-0123456789ab"
    assert load_settings({"profile": "blog", "grafana_admin_group_ids": ok}).grafana_admin_group_ids == (ok,)


def test_dashboards_revision_is_a_short_token():
    assert load_settings({"profile": "blog", "dashboards_revision": "20261129T2100Z"}).dashboards_revision
    with pytest.raises(SettingsError, match=r"dashboards_revision: String should match pattern"):
        load_settings({"profile": "blog", "dashboards_revision": "has spaces"})


def test_every_allowed_region_synthesizes_offline_with_pinned_availability_zones():
    import json

    from tests.conftest import ROOT
    from workload.deployment.settings import PLACEHOLDER_ACCOUNT, SUPPORTED_REGIONS

    context = json.loads((ROOT / "cdk.context.json").read_text())
    for region in SUPPORTED_REGIONS:
        azs = context[f"availability-zones:account={PLACEHOLDER_ACCOUNT}:region={region}"]
        assert len(azs) >= 2 and all(az.startswith(region) for az in azs)


def test_trainer_takes_every_gpu_node_unless_told_otherwise():
    assert load_settings({"profile": "blog"}).trainer_worker_count == 3
    assert load_settings({"profile": "blog", "worker_count": "4", "trainer_workers": "3"}).trainer_worker_count == 3


def test_trainer_cannot_use_more_nodes_than_the_cluster_has():
    with pytest.raises(SettingsError, match=r"trainer_workers=4 exceeds worker_count=3"):
        load_settings({"profile": "blog", "trainer_workers": "4"})


def test_a_serve_recipe_that_is_not_a_recipe_is_refused_before_any_synth():
    from workload.ops.profiles import settings_for

    with pytest.raises(SettingsError, match=r"serve_recipe: 'blgo' is not a cluster recipe; choose one of blog, "):
        settings_for("blog", (("serve_recipe", "blgo"),))


def test_supervisor_limits_take_dotted_keys():
    s = load_settings({"profile": "blog", "supervise.max_submissions": "4", "supervise.group_idle_s": "1800"})
    assert (s.supervise.max_submissions, s.supervise.group_idle_s, s.supervise.max_failures_at_same_step) == (4, 1800, 3)


@pytest.mark.parametrize(("key", "closest"), [("supervise.max_submisions", "supervise.max_submissions"),
                                              ("supervise_max_submissions", "supervise.max_submissions")])
def test_a_misspelt_supervisor_limit_names_the_closest(key, closest):
    with pytest.raises(SettingsError, match=rf"{key}: not a deployment setting; did you mean {closest}\?"):
        load_settings({"profile": "blog", key: "4"})


def test_a_bad_supervisor_limit_names_its_dotted_key():
    with pytest.raises(SettingsError, match=r"supervise\.max_submissions: Input should be greater than or equal to 1"):
        load_settings({"profile": "blog", "supervise.max_submissions": "0"})


def test_the_operations_commands_take_supervisor_limits_too():
    from workload.ops.profiles import parse_overrides, settings_for

    assert settings_for("blog", parse_overrides(["supervise.release_workers=false"])).supervise.release_workers is False


def test_tool_set_values_are_settings_but_not_in_the_users_table():
    from workload.deployment.settings import TOOL_SET, settings_table

    rows = "\n".join(settings_table())
    assert load_settings({"profile": "blog", "account": "123456789012"}).account == "123456789012"
    assert [key for key in TOOL_SET if f"| `{key}` |" in rows] == []
    assert "| `supervise.max_submissions` |" in rows


def test_the_supervisor_waits_for_a_replaced_node_through_its_deep_health_checks():
    from workload.deployment.fit import DEEP_HEALTH_CHECKS_S, NODE_LAUNCH_S

    waited = load_settings({"profile": "blog"}).supervise.node_wait_timeout_s
    assert waited >= NODE_LAUNCH_S + DEEP_HEALTH_CHECKS_S


def test_the_nodes_zone_belongs_to_the_region():
    with pytest.raises(SettingsError, match="node_availability_zone=us-east-1a is not a zone of region=us-west-2"):
        load_settings({"profile": "blog", "node_availability_zone": "us-east-1a"})


def test_the_nodes_zone_is_for_a_created_vpc_only():
    with pytest.raises(SettingsError, match="node_availability_zone=us-west-2b applies to a created VPC only"):
        load_settings({"profile": "blog", "node_availability_zone": "us-west-2b", "vpc_id": "vpc-0123456789abcdef0",
                       "private_subnet_ids": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
                       "private_subnet_azs": "us-west-2a,us-west-2b"})


def test_who_collects_rays_metrics_is_the_add_on_or_custom_targets():
    assert load_settings({"profile": "blog"}).ray_metrics == "addon"
    assert load_settings({"profile": "blog", "ray_metrics": "scrape-targets"}).ray_metrics == "scrape-targets"
    with pytest.raises(SettingsError, match=r"ray_metrics: .*'addon' or 'scrape-targets'"):
        load_settings({"profile": "blog", "ray_metrics": "both"})
