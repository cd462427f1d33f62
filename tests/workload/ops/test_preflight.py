"""The preflight against stubbed accounts: both profiles pass; each deliberately failing answer gives one line."""

from __future__ import annotations

import json

import pytest

from tests.workload.ops.aws_account import (
    ACCOUNT,
    CALLER_ARN,
    DEPLOYER_ROLE,
    RECORDED,
    Answers,
    StubbedAccount,
    passing_account,
    schema_without,
)
from workload.deployment.settings import KUBECTL_SERVER_VERSIONS
from workload.ops import preflight
from workload.ops.preflight import Caller, failed, run_preflight
from workload.ops.profiles import settings_for

CALLER = Caller(ACCOUNT, CALLER_ARN)
GRAFANA_USER = "90676d5f-1234-5678-9abc-0123456789ab"


def _run(settings, answers=None, **kwargs):
    account = passing_account(settings, answers, bootstrap_pending=kwargs.get("bootstrap_pending", False))
    progress: list[str] = []
    findings = run_preflight(account, settings, CALLER, progress=progress.append, **kwargs)
    account.assert_all_answered()
    return findings, progress


@pytest.mark.parametrize("profile", ["small", "blog"])
def test_each_profile_passes_against_an_account_that_can_take_it(profile):
    settings = settings_for(profile)
    findings, progress = _run(settings)
    assert {f.status for f in findings} == {"ok"}, [f.line() for f in findings]
    checks = {f.check for f in findings}
    assert checks == {"quota", "zone", "kubernetes", "addon", "hyperpod", "identity-center", "bootstrap", "permissions"}
    assert len(progress) == 7 and all(line.startswith("checking ") for line in progress)
    quota_lines = [f.message for f in findings if f.check == "quota"]
    assert f"{settings.worker_instance_type} for cluster usage: 8 >= {settings.worker_count} (worker_count)" in quota_lines
    assert any("configuration valid against its schema" in f.message for f in findings if f.check == "addon")


def test_grafana_users_and_the_ray_endpoint_are_checked_too():
    settings = settings_for("blog", (("grafana_admin_user_ids", GRAFANA_USER), ("ray_endpoint", "true"),
                                     ("ray_endpoint_domain", "ray.example.com"),
                                     ("ray_endpoint_hosted_zone_id", "Z0123456789ABC")))
    findings, _ = _run(settings)
    assert failed(findings) == []
    assert "Identity Center store d-1234567890 holds the 1 Grafana admin(s) named" in [f.message for f in findings]
    assert any(f.message.startswith("amazon-sagemaker-spaces ") for f in findings)


# One deliberately failing answer each: one FAIL line naming what to change.
FAILING = {
    "no quota": (Answers(quota_values={"ml.g7e.12xlarge": 0}), {}, "quota",
                 "ml.g7e.12xlarge for cluster usage is 0 in us-west-2, the settings need 3 (worker_count): request 3 "
                 "for quota L-11111111"),
    "quota held by another cluster": (Answers(other_cluster_nodes={"ml.g7e.12xlarge": 6}), {}, "quota",
                                      "ml.g7e.12xlarge for cluster usage is 8 in us-west-2, other HyperPod clusters "
                                      "hold 6, the settings need 3 (worker_count): request 9 for quota L-11111111"),
    "zone without the type": (Answers(offered_in_for={"ml.g7e.12xlarge": ("us-west-2c",)}), {}, "zone",
                              "us-west-2a (the first available zone of us-west-2, where the created VPC puts the nodes) "
                              "does not offer g7e.12xlarge"),
    "unsupported version": (Answers(version_status="UNSUPPORTED"), {}, "kubernetes",
                            "EKS in us-west-2: Kubernetes 1.34 is UNSUPPORTED: choose another setting kubernetes_version"),
    "schema-invalid add-on config": (Answers(observability_schema=schema_without("customMetrics")), {}, "addon",
                                     "amazon-sagemaker-hyperpod-observability v1.0.6-eksbuild.1 rejects the "
                                     "configuration the deploy gives it at metricsProvider: Additional properties are "
                                     "not allowed ('customMetrics' was unexpected)"),
    "missing Identity Center": (Answers(identity_center=False), {"grafana": True}, "identity-center",
                                "the Grafana workspace signs in only through IAM Identity Center, and no Identity "
                                "Center instance answers in us-west-2: enable IAM Identity Center there"),
    "missing Identity Center, nobody named": (Answers(identity_center=False), {}, "identity-center",
                                              "the Grafana workspace signs in only through IAM Identity Center, and "
                                              "no Identity Center instance answers in us-west-2"),
    "nobody could sign in to Grafana": (Answers(deployer_in_identity_center=False), {}, "identity-center",
                                        "nobody could sign in to Grafana: name an Identity Center user with -c "
                                        "grafana_admin_user_ids=ID"),
    "not bootstrapped": (Answers(bootstrapped=False), {}, "bootstrap",
                         "the account is not bootstrapped for the CDK in us-west-2"),
    "denied action": (Answers(denied=("fsx:CreateFileSystem",)), {}, "permissions",
                      "CloudFormation's execution role arn:aws:iam::123456789012:role/cdk-hnb659fds-cfn-exec-role-"
                      "123456789012-us-west-2 may not fsx:CreateFileSystem (implicitDeny)"),
}


@pytest.mark.parametrize("case", list(FAILING))
def test_a_failing_account_gives_one_line_that_says_what_to_change(case):
    answers, options, check, expected = FAILING[case]
    overrides = (("grafana_admin_user_ids", GRAFANA_USER),) if options.get("grafana") else ()
    settings = settings_for("blog", overrides)
    findings, _ = _run(settings, answers)
    (failure,) = failed(findings)
    assert failure.check == check
    assert expected in failure.message, failure.message
    assert "\n" not in failure.line()


def test_the_former_network_metrics_level_is_refused_by_a_schema_without_it(monkeypatch):
    from workload import addons

    monkeypatch.setitem(addons.METRIC_LEVELS, "networkMetrics", "BASIC")
    (failure,) = failed(_run(settings_for("small"))[0])
    assert failure.message.endswith("rejects the configuration the deploy gives it at metricsProvider.networkMetrics."
                                    "level: 'BASIC' is not one of ['DISABLED', 'ADVANCED']; change the observability "
                                    "configuration in workload/addons.py (METRIC_LEVELS)")


def test_the_vpc_cni_is_told_to_enforce_network_policy_in_the_form_its_schema_takes(monkeypatch):
    from workload import addons

    assert preflight.planned_addons(settings_for("blog"), preflight.Caller("1", "arn"))["vpc-cni"] == {
        "enableNetworkPolicy": "true"}
    monkeypatch.setitem(addons.VPC_CNI_CONFIGURATION, "enableNetworkPolicy", True)  # a JSON boolean: EKS refuses it
    (failure,) = failed(_run(settings_for("small"))[0])
    assert failure.message.endswith("rejects the configuration the deploy gives it at enableNetworkPolicy: True is "
                                    "not of type 'string' (and 1 more); change VPC_CNI_CONFIGURATION in "
                                    "workload/addons.py")


def test_an_addon_without_a_version_for_the_kubernetes_version_fails_hyperpod_and_the_addons():
    findings, _ = _run(settings_for("small"), Answers(addon_kubernetes_version="1.29"))
    lines = [f.message for f in failed(findings)]
    assert any(line.startswith("HyperPod's add-on amazon-sagemaker-hyperpod-observability lists no version for "
                               "Kubernetes 1.34") for line in lines)
    assert "EKS add-on vpc-cni has no version for Kubernetes 1.34 in us-west-2: deploy to a region that has " \
           "one" in lines


def test_an_existing_vpc_names_private_subnet_azs_when_its_first_zone_lacks_the_type():
    settings = settings_for("small", (("vpc_id", "vpc-0123456789abcdef0"),
                                      ("private_subnet_ids", "subnet-0123456789abcdef0,subnet-0123456789abcdef1"),
                                      ("private_subnet_azs", "us-west-2c,us-west-2a")))
    messages = [f.message for f in failed(_run(settings)[0])]
    assert ("us-west-2c (the first of private_subnet_azs) does not offer g7e.12xlarge (ml.g7e.12xlarge); us-west-2 "
            "offers it in us-west-2a, us-west-2b: set private_subnet_azs (and private_subnet_ids) so that the first "
            "subnet is in one of them") in messages


def test_with_bootstrap_pending_the_execution_role_and_bootstrap_are_not_asked():
    findings, progress = _run(settings_for("small"), bootstrap_pending=True)
    assert failed(findings) == [] and not any(f.check == "bootstrap" for f in findings)
    assert not any("bootstrap" in line for line in progress)


def test_a_denied_read_is_a_warning_naming_the_call_not_a_failure():
    settings = settings_for("small")
    account = passing_account(settings)
    account.stubber("service-quotas").__init__(account.client("service-quotas"))  # drop the queued answer
    account.stubber("service-quotas").activate()
    account.error("service-quotas", "list_service_quotas", "AccessDeniedException")
    findings = run_preflight(account, settings, CALLER)
    (quota,) = [f for f in findings if f.check == "quota"]
    assert quota.status == "warn"
    assert quota.message.startswith("not checked: ListServiceQuotas answered AccessDeniedException")
    assert "allow it to the deploying identity" in quota.message


# ---------------------------------------------------------------- AWS's own example answers

def _recorded(operation: str) -> dict:
    return next(r["response"] for r in RECORDED if r["operation"] == operation)


def _account_answering(service: str, method: str, response: dict) -> StubbedAccount:
    account = StubbedAccount()
    account.add(service, method, response)  # the Stubber checks it against the output shape
    return account


def test_recorded_quota_answers_without_sagemaker_quotas_warn_for_each_type():
    settings = settings_for("small")
    account = _account_answering("service-quotas", "list_service_quotas", _recorded("ListServiceQuotas"))
    account.add("service-quotas", "list_aws_default_service_quotas", _recorded("ListServiceQuotas"))
    account.add("sagemaker", "list_clusters", {"ClusterSummaries": []})
    findings = preflight.check_quotas(account, settings, CALLER)
    assert [f.status for f in findings] == ["warn", "warn"]
    assert findings[0].message.startswith("no SageMaker quota named 'ml.m5.4xlarge for cluster usage' in us-west-2")


def test_recorded_zones_answer_puts_a_created_vpc_in_the_first_zone():
    account = _account_answering("ec2", "describe_availability_zones", _recorded("DescribeAvailabilityZones"))
    zones = account.client("ec2").describe_availability_zones()["AvailabilityZones"]
    assert preflight.node_zone(settings_for("small"), zones)[0] == "us-west-2a"
    chosen = settings_for("small").model_copy(update={"node_availability_zone": "us-west-2c"})
    assert preflight.node_zone(chosen, zones) == ("us-west-2c", "node_availability_zone")


def test_recorded_offerings_answer_without_the_types_fails_the_region():
    settings = settings_for("small")
    account = _account_answering("ec2", "describe_instance_type_offerings", _recorded("DescribeInstanceTypeOfferings"))
    offers = account.client("ec2").describe_instance_type_offerings()["InstanceTypeOfferings"]
    findings = preflight.zone_findings(settings, "us-east-2a", "test", offers)
    assert [f.status for f in findings] == ["fail", "fail"]
    assert findings[1].message.startswith("us-west-2 offers no g7e.12xlarge (EC2 type of ml.g7e.12xlarge) in any zone")


def test_recorded_addon_schema_validates_configuration_values():
    account = _account_answering("eks", "describe_addon_configuration", _recorded("DescribeAddonConfiguration"))
    schema = account.client("eks").describe_addon_configuration(
        addonName="coredns", addonVersion="v1.8.7-eksbuild.4")["configurationSchema"]
    assert preflight.schema_problem(schema, {"replicaCount": 3, "resources": {"limits": {"cpu": "1"}}}) is None
    assert preflight.schema_problem(schema, {"replicaCount": "three"}) == "at replicaCount: 'three' is not of type 'integer'"
    assert "('replicas' was unexpected)" in preflight.schema_problem(schema, {"replicas": 3})


def test_recorded_simulation_answer_with_an_implicit_deny_fails():
    account = _account_answering("iam", "simulate_principal_policy", _recorded("SimulatePrincipalPolicy"))
    results = account.client("iam").simulate_principal_policy(
        PolicySourceArn="arn:aws:iam::123456789012:user/alejandro", ActionNames=["dynamodb:CreateBackup"])
    finding = preflight.simulation_finding("alejandro", results["EvaluationResults"], "grant it")
    assert finding.line() == "FAIL  permissions: alejandro may not dynamodb:CreateBackup (implicitDeny): grant it"


def test_recorded_get_role_answer_gives_the_role_behind_an_assumed_role_session():
    from workload.ops.aws import iam_principal_arn

    account = _account_answering("iam", "get_role", _recorded("GetRole"))
    principal = iam_principal_arn("arn:aws:sts::123456789012:assumed-role/Test-Role/me", account.client("iam"))
    assert principal == "arn:aws:iam::123456789012:role/Test-Role"


def test_recorded_parameter_answer_reads_as_a_bootstrap_version():
    account = _account_answering("ssm", "get_parameter", _recorded("GetParameter"))
    (finding,) = preflight.check_bootstrap(account, settings_for("small"), CALLER)
    assert finding.line() == "OK    bootstrap: CDK bootstrap version Veni in us-west-2"


def test_the_recorded_answers_say_where_they_come_from():
    assert all(r["source"] and r["service"] and r["operation"] for r in RECORDED)
    assert DEPLOYER_ROLE.endswith(":role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_AdministratorAccess_"
                                  "0123456789abcdef") and json.dumps(RECORDED)


def _versions(offered: dict[str, str]) -> list[dict]:
    from tests.workload.ops.aws_account import cluster_version

    return [cluster_version(version, status) for version, status in offered.items()]


def _hyperpod(*versions: str) -> list[dict]:
    from tests.workload.ops.aws_account import addon_versions

    return [entry for version in versions for entry in addon_versions(preflight.OBSERVABILITY_ADDON, version)["addons"]]


@pytest.mark.parametrize(("offered", "addon", "listed", "chosen", "status"), [
    # 2026-12-06: 1.34 has left standard support; HyperPod's page lists up to 1.34 -> 1.34, extended support,
    # though EKS and the add-on offer 1.35 and 1.36 in standard support.
    ({"1.34": "EXTENDED_SUPPORT", "1.35": "STANDARD_SUPPORT", "1.36": "STANDARD_SUPPORT"}, ("1.34", "1.35", "1.36"),
     None, "1.34", "EXTENDED_SUPPORT"),
    # Once HyperPod's page lists more, the newest listed in standard support wins ...
    ({"1.34": "STANDARD_SUPPORT", "1.35": "STANDARD_SUPPORT", "1.36": "STANDARD_SUPPORT"}, ("1.34", "1.35", "1.36"),
     ("1.34", "1.35", "1.36"), "1.36", "STANDARD_SUPPORT"),
    # ... standard support beats a newer version only in extended support ...
    ({"1.34": "STANDARD_SUPPORT", "1.35": "EXTENDED_SUPPORT"}, ("1.34", "1.35"), ("1.34", "1.35"),
     "1.34", "STANDARD_SUPPORT"),
    ({"1.34": "EXTENDED_SUPPORT", "1.35": "EXTENDED_SUPPORT"}, ("1.34", "1.35"), ("1.34", "1.35"),
     "1.35", "EXTENDED_SUPPORT"),
    # ... and the add-on must have a version for it too.
    ({"1.34": "EXTENDED_SUPPORT", "1.35": "STANDARD_SUPPORT"}, ("1.34",), ("1.34", "1.35"), "1.34", "EXTENDED_SUPPORT"),
])
def test_the_newest_version_eks_offers_of_those_hyperpod_lists_is_chosen(monkeypatch, offered, addon, listed, chosen,
                                                                          status):
    if listed:
        monkeypatch.setattr(preflight, "HYPERPOD_KUBERNETES_VERSIONS", listed)
    choice = preflight.newest_supported_version(_versions(offered), _hyperpod(*addon), ("1.34", "1.35", "1.36"))
    assert (choice.version, choice.status) == (chosen, status)


def test_an_account_whose_eks_offers_1_36_first_gets_the_newest_version_hyperpod_lists():
    """EKS lists 1.36 first, in standard support, and the add-on has a version for every one: the deploy still
    takes 1.34, the newest HyperPod's own page lists, and says where that fact comes from."""
    from tests.workload.ops.aws_account import StubbedAccount, add_version_choice

    account = add_version_choice(StubbedAccount(region="us-west-2"), {
        "1.36": "STANDARD_SUPPORT", "1.35": "STANDARD_SUPPORT", "1.34": "EXTENDED_SUPPORT"}, ("1.34", "1.35", "1.36"))
    choice = preflight.choose_kubernetes_version(account, settings_for("small"), KUBECTL_SERVER_VERSIONS)
    account.assert_all_answered()
    assert (choice.version, choice.status) == ("1.34", "EXTENDED_SUPPORT")
    assert ("of those HyperPod lists (1.34 of 1.34, 1.35, 1.36: AWS's SageMaker HyperPod EKS prerequisites, "
            "\"Kubernetes version support\" (docs.amazonaws.cn/sagemaker/latest/dg/"
            "sagemaker-hyperpod-eks-prerequisites.md, the newest copy, read 2026-12-06))") in choice.why


def test_no_version_both_support_is_refused_naming_the_region():
    from tests.workload.ops.aws_account import StubbedAccount, add_version_choice

    account = add_version_choice(StubbedAccount(region="us-west-2"), {"1.34": "UNSUPPORTED", "1.36": "STANDARD_SUPPORT"},
                                 ("1.34", "1.35"))
    with pytest.raises(preflight.PreflightError, match=r"none of Kubernetes 1.34, 1.35, 1.36 is offered by EKS in "
                                                       r"us-west-2 \(offered: 1.36\), listed by HyperPod"):
        preflight.choose_kubernetes_version(account, settings_for("small"), ("1.34", "1.35", "1.36"))


def test_the_version_facts_name_their_source_date_and_support_cost():
    import datetime

    settings = settings_for("small")
    entry = {"clusterVersion": "1.34", "versionStatus": "EXTENDED_SUPPORT",
             "endOfExtendedSupportDate": datetime.datetime(2027, 12, 2)}
    kubernetes, hyperpod = preflight.kubernetes_findings(settings, [entry], on=datetime.date(2026, 12, 6))
    assert kubernetes.status == "warn" and kubernetes.message.startswith(
        "Kubernetes 1.34 is in extended support (EKS DescribeClusterVersions in us-west-2 on 2026-12-06) until "
        "2027-12-02, extended support: $0.60/h for the control plane (standard $0.10/h, "
        "https://aws.amazon.com/eks/pricing/)")
    assert hyperpod == preflight.Finding("hyperpod", "ok", "HyperPod lists Kubernetes 1.34 (1.28-1.34: AWS's "
                                         "SageMaker HyperPod EKS prerequisites, \"Kubernetes version support\" "
                                         "(docs.amazonaws.cn/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites"
                                         ".md, the newest copy, read 2026-12-06))")


def test_a_version_hyperpod_does_not_list_is_taken_only_when_set_and_with_a_warning():
    import datetime

    settings = settings_for("small", (("kubernetes_version", "1.35"),))
    entry = {"clusterVersion": "1.35", "versionStatus": "STANDARD_SUPPORT",
             "endOfStandardSupportDate": datetime.datetime(2027, 3, 27)}
    kubernetes, hyperpod = preflight.kubernetes_findings(settings, [entry], on=datetime.date(2026, 12, 6))
    assert kubernetes.status == "ok" and "standard support: $0.10/h" in kubernetes.message
    assert hyperpod.status == "warn" and hyperpod.message.startswith(
        "Kubernetes 1.35 is newer than any HyperPod lists (1.28-1.34: ")
    assert "CreateCluster may refuse it after the EKS cluster and chart are built (~20 min)" in hyperpod.message


def _schema_with_ray_at(*path: str) -> str:
    from tests.workload.ops.aws_account import schema_without

    schema = schema_without("rayMetrics")
    if path:
        node = schema["definitions"]["Observability"]
        for key in path[:-1]:
            node = node["properties"].setdefault(key, {"type": "object", "properties": {}})
        node["properties"][path[-1]] = {"type": "boolean"}
    return json.dumps(schema)


def test_the_add_on_collects_ray_where_its_schema_has_the_switch():
    from tests.workload.ops.aws_account import OBSERVABILITY_SCHEMA

    path, why = preflight.ray_metrics_choice("v1.0.6-eksbuild.1", json.dumps(OBSERVABILITY_SCHEMA))
    assert path == "addon" and "switched on at metricsProvider.rayMetrics" in why


def test_an_add_on_from_before_ray_collection_gets_custom_targets():
    path, why = preflight.ray_metrics_choice("v1.0.5-eksbuild.3", _schema_with_ray_at())
    assert path == "scrape-targets" and "predates Ray collection (1.0.6)" in why


def test_a_ray_switch_elsewhere_in_the_schema_fails_naming_it_and_the_constant():
    with pytest.raises(preflight.PreflightError, match=r"names Ray at rayCollection, not "
                                                       r"metricsProvider.rayMetrics: change RAY_METRICS_SWITCH"):
        preflight.ray_metrics_choice("v1.0.7-eksbuild.1", _schema_with_ray_at("rayCollection", "enabled"))


def test_a_new_add_on_without_a_ray_key_fails_naming_both_settings():
    with pytest.raises(preflight.PreflightError, match=r"v1.0.8-eksbuild.1 \(>= 1.0.6, .*has no Ray key .*set -c "
                                                       r"ray_metrics=addon .* or -c ray_metrics=scrape-targets"):
        preflight.ray_metrics_choice("v1.0.8-eksbuild.1", _schema_with_ray_at())


def test_the_newest_add_on_version_is_by_number_not_by_list_order():
    versions = [{"addonVersion": v, "compatibilities": [{"clusterVersion": "1.34"}]}
                for v in ("v1.0.10-eksbuild.1", "v1.0.9-eksbuild.4", "v1.0.6-eksbuild.1")]
    versions.append({"addonVersion": "v1.1.0-eksbuild.1", "compatibilities": [{"clusterVersion": "1.35"}]})
    assert preflight.newest_addon_version(versions, "1.34") == "v1.0.10-eksbuild.1"


def test_an_add_on_without_the_ray_switch_names_the_other_path():
    from tests.workload.ops.aws_account import schema_without

    (failure,) = failed(_run(settings_for("small"), Answers(observability_schema=schema_without("rayMetrics")))[0])
    assert failure.message.endswith("change to -c ray_metrics=scrape-targets (this version has no Ray switch at "
                                    "metricsProvider.rayMetrics; `skymaze deploy` chooses it from the schema when "
                                    "ray_metrics is unset)")
    findings, _ = _run(settings_for("small", (("ray_metrics", "scrape-targets"),)),
                       Answers(observability_schema=schema_without("rayMetrics")))
    assert failed(findings) == []
