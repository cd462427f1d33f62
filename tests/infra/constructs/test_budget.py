"""The spending guard: budget and topic wiring, and the guard's decisions and requests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import aws_cdk as cdk
import botocore.session
import pytest
from aws_cdk.assertions import Template
from botocore.stub import Stubber
from botocore.validate import ParamValidator

from infra.constructs.budget import CHECK_PERIOD, SpendingGuard
from infra.constructs.handlers.deploy_guard import index as guard
from tests.infra.conftest import one, resources
from tests.service_shapes import filled_output, validation_errors
from workload.supervise.hyperpod import update_request

ARN = "arn:aws:sagemaker:us-west-2:111111111111:cluster/abc123abc123"
ROLE = "arn:aws:iam::111111111111:role/exec"
CREATED = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
PERIOD_H = CHECK_PERIOD.to_minutes() / 60


def _template(**kwargs) -> dict:
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region="us-west-2"))
    kwargs.setdefault("deployed_at", "0")  # no deploy recorded (Settings.deployed_at's default)
    SpendingGuard(stack, "Spend", name="skymaze", budget_usd_per_month=2500, alert_emails=["ops@example.com"], **kwargs)
    return Template.from_stack(stack).to_json()


@pytest.mark.slow  # CDK synth
def test_budget_alerts_at_80_percent_actual_and_100_percent_forecast_through_the_topic():
    template = _template()
    _, budget = one(template, "AWS::Budgets::Budget")
    props = budget["Properties"]
    assert props["Budget"]["BudgetLimit"] == {"Amount": 2500, "Unit": "USD"}
    assert props["Budget"]["TimeUnit"] == "MONTHLY"
    alerts = {(n["Notification"]["NotificationType"], n["Notification"]["Threshold"]) for n in props["NotificationsWithSubscribers"]}
    assert alerts == {("ACTUAL", 80), ("FORECASTED", 100)}
    _, topic = one(template, "AWS::SNS::Topic")
    assert "KmsMasterKeyId" in topic["Properties"]
    (subscription,) = resources(template, "AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Endpoint"] == "ops@example.com"
    assert not resources(template, "AWS::Scheduler::Schedule")  # no hour limit: no guard


@pytest.mark.slow  # CDK synth
def test_the_guard_is_scheduled_and_may_touch_only_its_cluster():
    template = _template(max_deployed_hours=24, warn_before_hours=2, hyperpod_cluster_name="skymaze-hyperpod",
                         hyperpod_cluster_arn=ARN, execution_role_arn=ROLE, gpu_groups=["workers"])
    _, schedule = one(template, "AWS::Scheduler::Schedule")
    assert schedule["Properties"]["ScheduleExpression"] == "rate(15 minutes)"
    statements = [s for p in resources(template, "AWS::IAM::Policy").values() for s in p["Properties"]["PolicyDocument"]["Statement"]]
    update = next(s for s in statements if "sagemaker:UpdateCluster" in s["Action"])
    assert update["Resource"] == ARN
    assert not any("Delete" in a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))


@pytest.mark.slow  # CDK synth
def test_a_failing_guard_check_alarms_to_the_same_topic_the_e_mails_subscribe_to():
    template = _template(max_deployed_hours=16, warn_before_hours=2, hyperpod_cluster_name="skymaze-hyperpod",
                         hyperpod_cluster_arn=ARN, execution_role_arn=ROLE, gpu_groups=["workers"])
    topic_id, _ = one(template, "AWS::SNS::Topic")
    function_id = next(key for key, value in resources(template, "AWS::Lambda::Function").items()
                       if "MAX_HOURS" in value["Properties"].get("Environment", {}).get("Variables", {}))
    _, alarm = one(template, "AWS::CloudWatch::Alarm")
    props = alarm["Properties"]
    assert (props["Namespace"], props["MetricName"], props["Statistic"]) == ("AWS/Lambda", "Errors", "Sum")
    assert props["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    assert props["Period"] == CHECK_PERIOD.to_seconds() and props["EvaluationPeriods"] == 1
    assert (props["Threshold"], props["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert props["TreatMissingData"] == "notBreaching"
    assert props["AlarmActions"] == [{"Ref": topic_id}]
    # The topic is encrypted: CloudWatch may publish only where the key lets it.
    _, key = one(template, "AWS::KMS::Key")
    services = [s["Principal"].get("Service") for s in key["Properties"]["KeyPolicy"]["Statement"]
                if "kms:Decrypt" in s["Action"] and isinstance(s.get("Principal"), dict)]
    assert any("cloudwatch.amazonaws.com" in (svc if isinstance(svc, list) else [svc]) for svc in services), services


@pytest.mark.slow  # CDK synth
def test_a_warning_later_than_the_limit_is_refused():
    with pytest.raises(ValueError, match="warn_before_hours=30 must be > 0 and below max_deployed_hours=24"):
        _template(max_deployed_hours=24, warn_before_hours=30, hyperpod_cluster_name="c", hyperpod_cluster_arn=ARN,
                  execution_role_arn=ROLE, gpu_groups=["workers"])


@pytest.mark.parametrize(
    ("age_h", "expected"),
    [(0, None), (21.9, None), (22.0, "warn"), (22.2, "warn"), (22.25, None), (23.9, None), (24.0, "scale_down"), (100, "scale_down")],
)
def test_decide_warns_once_then_scales_down(age_h, expected):
    assert guard.decide(age_h, max_h=24, warn_h=2, period_h=PERIOD_H) == expected


def _described(count: int) -> dict:
    group = {"InstanceGroupName": "workers", "InstanceType": "ml.g7e.12xlarge", "CurrentCount": count, "TargetCount": count,
             "LifeCycleConfig": {"SourceS3Uri": "s3://b/", "OnCreate": "on_create.sh"}, "ExecutionRole": ROLE, "ThreadsPerCore": 1}
    return {"ClusterArn": ARN, "ClusterName": "skymaze-hyperpod", "ClusterStatus": "InService", "CreationTime": CREATED,
            "InstanceGroups": [group]}


def test_the_guard_and_the_supervisor_send_the_same_validated_request():
    request = guard.scale_request(_described(3), "workers", 0)
    assert request == update_request(_described(3), "workers", 0)
    model = botocore.session.get_session().get_service_model("sagemaker").operation_model("UpdateCluster")
    assert not ParamValidator().validate(request, model.input_shape).has_errors()


def test_the_guard_restates_a_fully_described_group_as_a_valid_request():
    described = filled_output("sagemaker", "DescribeCluster")  # every field of the output shape filled
    group = described["InstanceGroups"][0]["InstanceGroupName"]
    request = guard.scale_request(described, group, 0)
    assert validation_errors("sagemaker", "UpdateCluster", request) == ""
    assert request == update_request(described, group, 0)


def _clients():
    session = botocore.session.get_session()
    make = lambda name: session.create_client(name, region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="y")  # noqa: E731
    return make("sagemaker"), make("sns")


def test_at_the_limit_the_guard_scales_to_zero_and_says_so():
    sagemaker, sns = _clients()
    topic = "arn:aws:sns:us-west-2:111111111111:alerts"
    with Stubber(sagemaker) as sm, Stubber(sns) as sn:
        sm.add_response("describe_cluster", _described(3), {"ClusterName": "skymaze-hyperpod"})
        sm.add_response("update_cluster", {"ClusterArn": ARN}, guard.scale_request(_described(3), "workers", 0))
        sn.add_response("publish", {"MessageId": "m"}, {"TopicArn": topic, "Subject": "skymaze-hyperpod: GPU groups scaled to 0 after 24 h",
                                                        "Message": "Scaled to 0 (was {'workers': 3}); FSx, S3 and the cluster are kept. Tear down: skymaze teardown."})
        done = guard.run(sagemaker, sns, cluster="skymaze-hyperpod", groups=["workers"], topic_arn=topic, max_h=24, warn_h=2,
                         period_h=PERIOD_H, now=CREATED + timedelta(hours=24, minutes=5), deployed_at="0")
        sm.assert_no_pending_responses()
    assert done["scaled"] == {"workers": 3}


def test_a_group_already_at_zero_is_left_alone():
    sagemaker, sns = _clients()
    with Stubber(sagemaker) as sm, Stubber(sns):
        sm.add_response("describe_cluster", _described(0), {"ClusterName": "skymaze-hyperpod"})
        done = guard.run(sagemaker, sns, cluster="skymaze-hyperpod", groups=["workers"], topic_arn="arn:aws:sns:us-west-2:111111111111:a",
                         max_h=24, warn_h=2, period_h=PERIOD_H, now=CREATED + timedelta(hours=30), deployed_at="0")
    assert done == {"action": "scale_down", "age_h": 30.0, "scaled": {}}


def test_a_redeploy_restarts_the_guards_clock():
    """30 h after the cluster's creation but 1 h after a redeploy (which brought the GPU group back), the guard
    of a 24 h limit does nothing; without the redeploy's time it scales the group down again."""
    sagemaker, sns = _clients()
    redeployed = (CREATED + timedelta(hours=29)).strftime("%Y%m%dT%H%M%SZ")
    with Stubber(sagemaker) as sm, Stubber(sns):
        sm.add_response("describe_cluster", _described(3), {"ClusterName": "skymaze-hyperpod"})
        done = guard.run(sagemaker, sns, cluster="skymaze-hyperpod", groups=["workers"], topic_arn="arn:aws:sns:us-west-2:111111111111:a",
                         max_h=24, warn_h=2, period_h=PERIOD_H, now=CREATED + timedelta(hours=30), deployed_at=redeployed)
        sm.assert_no_pending_responses()
    assert done == {"action": None, "age_h": 1.0}
    assert guard.started(CREATED, "0") == CREATED


@pytest.mark.slow  # CDK synth
@pytest.mark.parametrize(("destroy", "policy"), [(True, "Delete"), (False, "Retain")])
def test_the_topic_key_follows_the_removal_setting(destroy, policy):
    _, key = one(_template(destroy=destroy), "AWS::KMS::Key")
    assert (key["DeletionPolicy"], key["UpdateReplacePolicy"]) == (policy, policy)
    assert key["Properties"].get("PendingWindowInDays") == (7 if destroy else None)
