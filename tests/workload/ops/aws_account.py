"""A stubbed AWS account for the preflight: botocore Stubber answers shaped like the real service models.

Every answer starts from botocore's output shape with every field filled (tests/service_shapes.py)
and changes only the fields the preflight reads; the Stubber checks each answer against the output
shape and each request against the input shape. ``passing_account`` queues, per client in call
order, what an account where a profile can deploy answers; tests change one answer to make one
check fail.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import boto3
from botocore.stub import Stubber

from tests.service_shapes import filled, service_model
from workload.addons import OBSERVABILITY_ADDON, SPACES_ADDON, VPC_CNI_ADDON
from workload.ops import preflight

ACCOUNT = "123456789012"
# The deployer signs in through IAM Identity Center (README's prerequisite): a session of its permission set's
# role, named after the Identity Center user.
SSO_ROLE = "AWSReservedSSO_AdministratorAccess_0123456789abcdef"
CALLER_ARN = f"arn:aws:sts::{ACCOUNT}:assumed-role/{SSO_ROLE}/me"
DEPLOYER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/{SSO_ROLE}"
DEPLOYER_USER_ID = "90000000-0000-0000-0000-000000000001"
IDENTITY_STORE = "d-1234567890"
ADDON_VERSION = "v1.0.6-eksbuild.1"  # the first that collects Ray (AWS's Ray observability docs)
RECORDED = json.loads((Path(__file__).parent / "recorded_aws_answers.json").read_text())["answers"]
# The shape EKS add-on schemas take (draft-06, definitions, additionalProperties false, as in the recorded
# vpc-cni and coredns answers) around the keys the HyperPod observability docs list, with the Ray switch where
# workload/addons.py looks for it (RAY_METRICS_SWITCH). AWS publishes no example answer for this add-on, so this
# is not its answer: it stands for one that accepts our keys (a real one: infra/MANUAL_TEST.md).
OBSERVABILITY_SCHEMA = {
    "$schema": "http://json-schema.org/draft-06/schema#", "$ref": "#/definitions/Observability",
    "definitions": {
        "Level": {"additionalProperties": False, "type": "object",
                  "properties": {"level": {"enum": ["DISABLED", "BASIC", "ADVANCED"]},
                                 "scrapeInterval": {"type": "integer"}}},
        # EFA counters have no BASIC level (AWS's HyperPod EKS Terraform module: DISABLED or ADVANCED).
        "NetworkLevel": {"additionalProperties": False, "type": "object",
                         "properties": {"level": {"enum": ["DISABLED", "ADVANCED"]},
                                        "scrapeInterval": {"type": "integer"}}},
        "Observability": {"additionalProperties": False, "type": "object", "properties": {
            "ampWorkspace": {"type": "object", "additionalProperties": False, "required": ["prometheusEndpoint", "arn"],
                             "properties": {"prometheusEndpoint": {"type": "string", "pattern": "^https://"},
                                            "arn": {"type": "string", "pattern": "^arn:aws[a-z-]*:aps:"}}},
            "amgWorkspace": {"type": "object", "additionalProperties": False,
                             "properties": {"workspaceName": {"type": "string"},
                                            "arn": {"type": "string", "pattern": "^arn:aws[a-z-]*:grafana:"}}},
            "metricsProvider": {"type": "object", "additionalProperties": False, "properties": {
                **{name: {"$ref": "#/definitions/Level"} for name in (
                    "trainingMetrics", "inferenceMetrics", "taskGovernanceMetrics", "scalingMetrics", "customMetrics",
                    "nodeMetrics", "acceleratedComputeMetrics", "rayMetrics")},
                "networkMetrics": {"$ref": "#/definitions/NetworkLevel"}}},
            "logging": {"type": "object", "properties": {"enabled": {"type": "boolean"}}}}},
    },
}
def schema_without(metric: str) -> dict:
    """The observability schema of a version that no longer accepts ``metric`` under metricsProvider."""
    schema = copy.deepcopy(OBSERVABILITY_SCHEMA)
    del schema["definitions"]["Observability"]["properties"]["metricsProvider"]["properties"][metric]
    return schema


SPACES_SCHEMA = {"$schema": "http://json-schema.org/draft-06/schema#", "type": "object"}
# The vpc-cni add-on's key for its network policy agent, as its schema declares it: a string-typed boolean
# (Amazon EKS User Guide cni-network-policy-configure.html passes "true"; `aws eks
# describe-addon-configuration --addon-name vpc-cni` lists `{"format": "boolean", "type": "string"}`).
VPC_CNI_SCHEMA = {
    "$schema": "http://json-schema.org/draft-06/schema#", "$ref": "#/definitions/VpcCni",
    "definitions": {"VpcCni": {"additionalProperties": False, "type": "object", "properties": {
        "enableNetworkPolicy": {"format": "boolean", "type": "string", "enum": ["true", "false"]},
        "env": {"type": "object", "additionalProperties": {"type": "string"}}}}},
}


_model = functools.cache(service_model)  # each service model parsed once per test run


def shape(service: str, name: str) -> dict:
    """Every field of botocore's shape ``name`` filled."""
    return filled(_model(service).shape_for(name), name)


def answer(service: str, operation: str, **fields) -> dict:
    """The operation's output shape, every field filled, pagination tokens removed, ``fields`` replacing."""
    out = filled(_model(service).operation_model(operation).output_shape)
    for token in ("NextToken", "nextToken", "Marker"):
        out.pop(token, None)
    if "IsTruncated" in out:
        out["IsTruncated"] = False
    out.update(fields)
    return out


def quota(name: str, value: float, code: str = "L-11111111") -> dict:
    return {**shape("service-quotas", "ServiceQuota"), "QuotaName": name, "Value": value, "QuotaCode": code,
            "ServiceCode": "sagemaker"}


def addon_versions(name: str, kubernetes_version: str | None) -> dict:
    """DescribeAddonVersions for one add-on: one version, default for ``kubernetes_version`` (None: no version)."""
    info = shape("eks", "AddonInfo")
    compatibility = {**shape("eks", "Compatibility"), "clusterVersion": kubernetes_version, "defaultVersion": True}
    version = {**shape("eks", "AddonVersionInfo"), "addonVersion": ADDON_VERSION, "compatibilities": [compatibility]}
    info.update(addonName=name, addonVersions=[version] if kubernetes_version else [])
    return answer("eks", "DescribeAddonVersions", addons=[info])


def simulation(actions, resources=("*",), denied: tuple[str, ...] = ()) -> dict:
    results = [{**shape("iam", "EvaluationResult"), "EvalActionName": action, "EvalResourceName": resource,
                "EvalDecision": "implicitDeny" if action in denied else "allowed"}
               for action in actions for resource in resources]
    return answer("iam", "SimulatePrincipalPolicy", EvaluationResults=results)


@functools.cache
def _session() -> boto3.Session:
    """One session for every stubbed client: its loader reads each service model once."""
    return boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing")


@dataclass
class StubbedAccount:
    """A boto3-session stand-in: ``client(service)`` is a real botocore client answered by its Stubber.

    Services with no queued answer go to ``fallback`` (a real session, e.g. under moto) when given.
    """

    region: str = "us-west-2"
    fallback: object | None = None
    _clients: dict = field(default_factory=dict)

    def stubber(self, service: str) -> Stubber:
        if service not in self._clients:
            client = _session().client(service, region_name=self.region)
            stubber = Stubber(client)
            stubber.activate()
            self._clients[service] = (client, stubber)
        return self._clients[service][1]

    def client(self, service: str, region_name: str | None = None, **kwargs):
        if service not in self._clients and self.fallback is not None:
            return self.fallback.client(service, region_name=region_name, **kwargs)
        self.stubber(service)
        return self._clients[service][0]

    def get_credentials(self):
        """The stubbed clients' keys: an access key without a session token, which never expires."""
        return _session().get_credentials()

    def add(self, service: str, method: str, response: dict, params: dict | None = None) -> None:
        self.stubber(service).add_response(method, response, params)

    def error(self, service: str, method: str, code: str, status: int = 400) -> None:
        self.stubber(service).add_client_error(method, service_error_code=code, service_message=f"{code} (stubbed)",
                                               http_status_code=status)

    def assert_all_answered(self) -> None:
        for _, stubber in self._clients.values():
            stubber.assert_no_pending_responses()


@dataclass
class Answers:
    """What each preflight call answers; a test changes one field to make one check fail."""

    quota_value: float = 8
    quota_values: dict[str, float] = field(default_factory=dict)  # instance type -> value, else quota_value
    other_cluster_nodes: dict[str, int] = field(default_factory=dict)  # instance type -> nodes another cluster holds
    zones: tuple[str, ...] = ("us-west-2a", "us-west-2b", "us-west-2c")
    offered_in: tuple[str, ...] = ("us-west-2a", "us-west-2b")
    offered_in_for: dict[str, tuple[str, ...]] = field(default_factory=dict)  # instance type -> its zones
    version_status: str = "STANDARD_SUPPORT"
    addon_kubernetes_version: str | None = None  # None: the settings' version
    observability_schema: dict = field(default_factory=lambda: copy.deepcopy(OBSERVABILITY_SCHEMA))
    vpc_cni_schema: dict = field(default_factory=lambda: copy.deepcopy(VPC_CNI_SCHEMA))
    identity_center: bool = True
    deployer_in_identity_center: bool = True  # the deploying session's user is in the Identity Center store
    bootstrapped: bool = True
    denied: tuple[str, ...] = ()


def passing_account(settings, answers: Answers | None = None, *, bootstrap_pending: bool = False,
                    account: StubbedAccount | None = None) -> StubbedAccount:
    """Queue, client by client in call order, the answers of an account where ``settings`` can deploy
    (after those already queued on ``account``)."""
    a = answers or Answers()
    account = account or StubbedAccount(region=settings.region)
    needs = preflight.instance_needs(settings)
    account.add("service-quotas", "list_service_quotas", answer("service-quotas", "ListServiceQuotas", Quotas=[
        quota(preflight.CLUSTER_QUOTA_NAME.format(instance_type=name), a.quota_values.get(name, a.quota_value))
        for name in needs]),
        {"ServiceCode": "sagemaker", "MaxResults": preflight.QUOTAS_PAGE_SIZE})
    _cluster_answers(account, settings, a)
    if settings.creates_vpc:
        zones = [{**shape("ec2", "AvailabilityZone"), "ZoneName": z, "State": "available"} for z in a.zones]
        account.add("ec2", "describe_availability_zones", answer("ec2", "DescribeAvailabilityZones",
                                                                 AvailabilityZones=zones))
    offers = [{**shape("ec2", "InstanceTypeOffering"), "InstanceType": preflight.ec2_type(name),
               "LocationType": "availability-zone", "Location": zone}
              for name in needs for zone in a.offered_in_for.get(name, a.offered_in)]
    account.add("ec2", "describe_instance_type_offerings", answer("ec2", "DescribeInstanceTypeOfferings",
                                                                  InstanceTypeOfferings=offers))
    _eks_answers(account, settings, a)
    _identity_answers(account, settings, a)
    _iam_answers(account, settings, a, bootstrap_pending)
    return account


def _cluster_answers(account: StubbedAccount, settings, a: Answers) -> None:
    """This app's own HyperPod cluster (a redeploy), and another one holding ``a.other_cluster_nodes``."""
    own = {**shape("sagemaker", "ClusterSummary"), "ClusterName": f"{settings.name}-hyperpod"}
    other = {**shape("sagemaker", "ClusterSummary"), "ClusterName": "someone-else"}
    account.add("sagemaker", "list_clusters", answer("sagemaker", "ListClusters",
                                                     ClusterSummaries=[own, other] if a.other_cluster_nodes else [own]))
    if a.other_cluster_nodes:
        groups = [{**shape("sagemaker", "ClusterInstanceGroupDetails"), "InstanceType": name, "CurrentCount": count,
                   "TargetCount": count} for name, count in a.other_cluster_nodes.items()]
        account.add("sagemaker", "describe_cluster", answer("sagemaker", "DescribeCluster", InstanceGroups=groups),
                    {"ClusterName": "someone-else"})


def _eks_answers(account: StubbedAccount, settings, a: Answers) -> None:
    k8s = settings.kubernetes_version
    if settings.creates_eks:
        version = {**shape("eks", "ClusterVersionInformation"), "clusterVersion": k8s, "versionStatus": a.version_status}
        account.add("eks", "describe_cluster_versions", answer("eks", "DescribeClusterVersions",
                                                               clusterVersions=[version]), {"clusterVersions": [k8s]})
    caller = preflight.Caller(ACCOUNT, CALLER_ARN)
    for name, configuration in preflight.planned_addons(settings, caller).items():
        account.add("eks", "describe_addon_versions", addon_versions(name, a.addon_kubernetes_version or k8s),
                    {"addonName": name, "kubernetesVersion": k8s})
        if configuration is not None and a.addon_kubernetes_version in (None, k8s):
            schema = {OBSERVABILITY_ADDON: a.observability_schema, SPACES_ADDON: SPACES_SCHEMA,
                      VPC_CNI_ADDON: a.vpc_cni_schema}[name]
            version = (settings.observability_addon_version if name == OBSERVABILITY_ADDON else None) or ADDON_VERSION
            account.add("eks", "describe_addon_configuration",
                        answer("eks", "DescribeAddonConfiguration", addonName=name, addonVersion=version,
                               configurationSchema=json.dumps(schema)),
                        {"addonName": name, "addonVersion": version})


def add_deployer_user(account: StubbedAccount, *, found: bool = True) -> StubbedAccount:
    """identitystore GetUserId for the deploying session's user name (``found``: the store has it)."""
    params = {"IdentityStoreId": IDENTITY_STORE, "AlternateIdentifier": {
        "UniqueAttribute": {"AttributePath": "userName", "AttributeValue": CALLER_ARN.rsplit("/", 1)[1]}}}
    if found:
        account.add("identitystore", "get_user_id", answer("identitystore", "GetUserId", UserId=DEPLOYER_USER_ID,
                                                           IdentityStoreId=IDENTITY_STORE), params)
    else:
        account.stubber("identitystore").add_client_error(
            "get_user_id", service_error_code="ResourceNotFoundException", service_message="no such user (stubbed)",
            http_status_code=404, expected_params=params)
    return account


def _identity_answers(account: StubbedAccount, settings, a: Answers) -> None:
    instance = {**shape("sso-admin", "InstanceMetadata"), "IdentityStoreId": IDENTITY_STORE}
    account.add("sso-admin", "list_instances", answer("sso-admin", "ListInstances",
                                                      Instances=[instance] if a.identity_center else []))
    if not a.identity_center:
        return
    if not (settings.grafana_admin_user_ids or settings.grafana_admin_group_ids):
        add_deployer_user(account, found=a.deployer_in_identity_center)
    for user in settings.grafana_admin_user_ids:
        account.add("identitystore", "describe_user", answer("identitystore", "DescribeUser", UserId=user,
                                                             IdentityStoreId=IDENTITY_STORE))
    for group in settings.grafana_admin_group_ids:
        account.add("identitystore", "describe_group", answer("identitystore", "DescribeGroup", GroupId=group,
                                                              IdentityStoreId=IDENTITY_STORE))


def _iam_answers(account: StubbedAccount, settings, a: Answers, bootstrap_pending: bool) -> None:
    caller = preflight.Caller(ACCOUNT, CALLER_ARN)
    if not bootstrap_pending:
        if a.bootstrapped:
            parameter = {**shape("ssm", "Parameter"), "Value": "21"}
            account.add("ssm", "get_parameter", answer("ssm", "GetParameter", Parameter=parameter),
                        {"Name": preflight.CDK_BOOTSTRAP_PARAMETER.format(qualifier=preflight.CDK_QUALIFIER)})
        else:
            account.error("ssm", "get_parameter", "ParameterNotFound")
    role = {**shape("iam", "Role"), "Arn": DEPLOYER_ROLE, "RoleName": SSO_ROLE}
    account.add("iam", "get_role", answer("iam", "GetRole", Role=role), {"RoleName": SSO_ROLE})
    roles = [preflight.cdk_role_arn(caller, settings.region, kind) for kind in preflight.CDK_CLI_ROLES]
    account.add("iam", "simulate_principal_policy", simulation(["sts:AssumeRole"], roles, a.denied),
                {"PolicySourceArn": DEPLOYER_ROLE, "ActionNames": ["sts:AssumeRole"], "ResourceArns": roles})
    account.add("iam", "simulate_principal_policy", simulation(preflight.DEPLOY_CALLER_ACTIONS, denied=a.denied),
                {"PolicySourceArn": DEPLOYER_ROLE, "ActionNames": list(preflight.DEPLOY_CALLER_ACTIONS),
                 "ResourceArns": ["*"]})
    if bootstrap_pending:
        return
    actions = preflight.EXECUTION_ROLE_ACTIONS + (preflight.VPC_ACTIONS if settings.creates_vpc else ())
    account.add("iam", "simulate_principal_policy", simulation(actions, denied=a.denied),
                {"PolicySourceArn": preflight.cdk_role_arn(caller, settings.region, "cfn-exec"),
                 "ActionNames": list(actions), "ResourceArns": ["*"]})


def add_identity(account: StubbedAccount, times: int = 1) -> StubbedAccount:
    """STS GetCallerIdentity as the deployer's assumed-role session, ``times`` times."""
    for _ in range(times):
        account.add("sts", "get_caller_identity", answer("sts", "GetCallerIdentity", Account=ACCOUNT, Arn=CALLER_ARN,
                                                         UserId="AROAEXAMPLE:me"))
    return account


def deploying_account(settings, answers: Answers | None = None, *, bootstrap_pending: bool = False) -> StubbedAccount:
    """What `skymaze deploy` asks, in order: who calls, the deploy context, then the preflight."""
    account = add_deploy_context(add_identity(StubbedAccount(region=settings.region)), settings)
    return passing_account(settings, answers, bootstrap_pending=bootstrap_pending, account=account)


def add_nothing_deployed(account: StubbedAccount, settings) -> StubbedAccount:
    """What a first deploy finds of the app: no cluster stack, no EKS cluster, no HyperPod cluster."""
    account.stubber("cloudformation").add_client_error(
        "describe_stacks", service_error_code="ValidationError",
        service_message=f"Stack with id {settings.name.capitalize()}Cluster does not exist")
    account.error("eks", "describe_cluster", "ResourceNotFoundException", status=404)
    account.error("sagemaker", "describe_cluster", "ResourceNotFound")
    return account


def cluster_version(version: str, status: str) -> dict:
    """One DescribeClusterVersions entry, every field filled."""
    return {**shape("eks", "ClusterVersionInformation"), "clusterVersion": version, "versionStatus": status}


def add_version_choice(account: StubbedAccount, offered: dict[str, str], hyperpod: tuple[str, ...]) -> StubbedAccount:
    """What the deploy asks to choose the Kubernetes version: EKS's versions (version -> versionStatus) and the
    HyperPod observability add-on's compatible cluster versions."""
    from workload.deployment.settings import KUBECTL_SERVER_VERSIONS

    account.add("eks", "describe_cluster_versions", answer("eks", "DescribeClusterVersions", clusterVersions=[
        cluster_version(v, s) for v, s in offered.items()]), {"clusterVersions": list(KUBECTL_SERVER_VERSIONS)})
    info = shape("eks", "AddonInfo")
    versions = [{**shape("eks", "AddonVersionInfo"), "addonVersion": ADDON_VERSION, "compatibilities": [
        {**shape("eks", "Compatibility"), "clusterVersion": v, "defaultVersion": True} for v in hyperpod]}]
    info.update(addonName=OBSERVABILITY_ADDON, addonVersions=versions)
    account.add("eks", "describe_addon_versions", answer("eks", "DescribeAddonVersions", addons=[info]),
                {"addonName": OBSERVABILITY_ADDON})
    return account


def add_observability_choice(account: StubbedAccount, settings, *, schema: dict | None = None,
                             versions: tuple[str, ...] = (ADDON_VERSION,)) -> StubbedAccount:
    """What the deploy asks to pin the observability add-on and choose who collects Ray's metrics: the add-on's
    versions for the settings' Kubernetes version, then the newest one's configuration schema."""
    from workload.addons import addon_version_number

    k8s = settings.kubernetes_version
    info = shape("eks", "AddonInfo")
    info.update(addonName=OBSERVABILITY_ADDON, addonVersions=[
        {**shape("eks", "AddonVersionInfo"), "addonVersion": v, "compatibilities": [
            {**shape("eks", "Compatibility"), "clusterVersion": k8s, "defaultVersion": False}]} for v in versions])
    account.add("eks", "describe_addon_versions", answer("eks", "DescribeAddonVersions", addons=[info]),
                {"addonName": OBSERVABILITY_ADDON, "kubernetesVersion": k8s})
    newest = max(versions, key=addon_version_number)
    account.add("eks", "describe_addon_configuration",
                answer("eks", "DescribeAddonConfiguration", addonName=OBSERVABILITY_ADDON, addonVersion=newest,
                       configurationSchema=json.dumps(OBSERVABILITY_SCHEMA if schema is None else schema)),
                {"addonName": OBSERVABILITY_ADDON, "addonVersion": newest})
    return account


def add_deploy_context(account: StubbedAccount, settings, *, offered: dict[str, str] | None = None,
                       hyperpod: tuple[str, ...] | None = None, observability: bool = True) -> StubbedAccount:
    """What `skymaze deploy` asks before the preflight: what runs (nothing), the deployer's role, no storage stack,
    no kept bucket, and the Kubernetes versions (default: the settings' one, in standard support, supported by
    HyperPod)."""
    add_nothing_deployed(account, settings)
    add_identity(account, times=2)
    role = {**shape("iam", "Role"), "Arn": DEPLOYER_ROLE, "RoleName": SSO_ROLE}
    account.add("iam", "get_role", answer("iam", "GetRole", Role=role), {"RoleName": SSO_ROLE})
    account.stubber("cloudformation").add_client_error(
        "describe_stack_resources", service_error_code="ValidationError",
        service_message=f"Stack with id {settings.name.capitalize()}Storage does not exist")
    account.error("s3", "head_bucket", "404", status=404)
    add_version_choice(account, offered or {settings.kubernetes_version: "STANDARD_SUPPORT"},
                       hyperpod or (settings.kubernetes_version,))
    if observability:
        add_observability_choice(account, settings)
    add_deployer_lookup(account, settings)
    return account


def add_deployer_lookup(account: StubbedAccount, settings) -> StubbedAccount:
    """What the deploy asks when no Grafana admin is named: Identity Center's store, then the deployer's user."""
    if settings.grafana_admin_user_ids or settings.grafana_admin_group_ids:
        return account
    instance = {**shape("sso-admin", "InstanceMetadata"), "IdentityStoreId": IDENTITY_STORE}
    account.add("sso-admin", "list_instances", answer("sso-admin", "ListInstances", Instances=[instance]))
    return add_deployer_user(account)
