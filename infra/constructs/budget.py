"""A cap on the bill: a monthly AWS Budget with alerts, and a guard on how long GPUs stay deployed.

- ``AWS::Budgets::Budget`` (monthly COST, the whole account: a filter on the ``project`` tag
  counts nothing until that tag is activated as a cost allocation tag in Billing) notifies an
  encrypted SNS topic, and through it the e-mail addresses, at 80 % of actual spend and 100 %
  of forecast spend.
- The deploy guard: EventBridge Scheduler runs a small Lambda every ``CHECK_PERIOD``; it warns
  (SNS) ``warn_before_hours`` before the deployment reaches ``max_deployed_hours``, then scales
  the HyperPod GPU groups to zero. It never deletes anything (cluster, FSx, S3 stay). It counts from the
  later of the cluster's creation and the last deploy (``deployed_at``), so a redeploy, which brings the
  GPU group back, restarts its clock. A CloudWatch alarm on the guard function's own errors (a check that
  raised: no scale-down, no e-mail from the function) e-mails the same topic.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_budgets as budgets
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.constructs.lambdas import handler_function
from infra.constructs.nag import acknowledge
from workload.deployment.settings import DEPLOY_GUARD_WARN_HOURS

ACTUAL_ALERT_PERCENT = 80
FORECAST_ALERT_PERCENT = 100
CHECK_PERIOD = Duration.minutes(15)
BUDGETS_PRINCIPAL = "budgets.amazonaws.com"
# CloudWatch publishes alarm actions to an encrypted topic only when the key lets it (SNS developer guide,
# "Enable compatibility between event sources from AWS services and encrypted topics").
CLOUDWATCH_PRINCIPAL = "cloudwatch.amazonaws.com"
KEY_DELETION_WINDOW = Duration.days(7)  # the shortest waiting period KMS allows before deleting a key


class SpendingGuard(Construct):
    """Alert topic, and what the settings ask for around it.

    With ``budget_usd_per_month`` the budget, with ``max_deployed_hours`` the scheduled GPU scale-down.
    """

    def __init__(self, scope: Construct, construct_id: str, *, name: str, budget_usd_per_month: float | None,
                 alert_emails: Sequence[str], deployed_at: str, max_deployed_hours: float | None = None,
                 warn_before_hours: float = DEPLOY_GUARD_WARN_HOURS,
                 hyperpod_cluster_name: str | None = None, hyperpod_cluster_arn: str | None = None,
                 execution_role_arn: str | None = None, gpu_groups: Sequence[str] = (), destroy: bool = False) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        # With removal=dev `cdk destroy` schedules the key's deletion (after the shortest waiting period)
        # instead of leaving a key that bills $1 a month; with retain it stays, like the data.
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, description=f"{name}: spending alert topic",
                      removal_policy=RemovalPolicy.DESTROY if destroy else RemovalPolicy.RETAIN,
                      pending_window=KEY_DELETION_WINDOW if destroy else None)
        key.add_to_resource_policy(iam.PolicyStatement(
            actions=["kms:GenerateDataKey*", "kms:Decrypt"],
            principals=[iam.ServicePrincipal(BUDGETS_PRINCIPAL), iam.ServicePrincipal(CLOUDWATCH_PRINCIPAL)],
            resources=["*"], conditions={"StringEquals": {"aws:SourceAccount": stack.account}}))
        self.topic = sns.Topic(self, "Alerts", display_name=f"{name} spending alerts", master_key=key, enforce_ssl=True)
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            actions=["sns:Publish"], principals=[iam.ServicePrincipal(BUDGETS_PRINCIPAL)],
            resources=[self.topic.topic_arn], conditions={"StringEquals": {"aws:SourceAccount": stack.account}}))
        for email in alert_emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self.budget = None
        if budget_usd_per_month is not None:
            self.budget = budgets.CfnBudget(self, "Budget", budget=budgets.CfnBudget.BudgetDataProperty(
                budget_name=f"{name}-monthly", budget_type="COST", time_unit="MONTHLY",
                budget_limit=budgets.CfnBudget.SpendProperty(amount=budget_usd_per_month, unit="USD"),
            ), notifications_with_subscribers=[
                self._notification("ACTUAL", ACTUAL_ALERT_PERCENT),
                self._notification("FORECASTED", FORECAST_ALERT_PERCENT),
            ])
        self.guard = None
        if max_deployed_hours is not None:
            self.guard = self._guard(max_deployed_hours, warn_before_hours, hyperpod_cluster_name, hyperpod_cluster_arn,
                                     execution_role_arn, gpu_groups, key, deployed_at)

    def _notification(self, kind: str, percent: int) -> budgets.CfnBudget.NotificationWithSubscribersProperty:
        return budgets.CfnBudget.NotificationWithSubscribersProperty(
            notification=budgets.CfnBudget.NotificationProperty(
                notification_type=kind, comparison_operator="GREATER_THAN", threshold=percent,
                threshold_type="PERCENTAGE"),
            subscribers=[budgets.CfnBudget.SubscriberProperty(subscription_type="SNS", address=self.topic.topic_arn)],
        )

    def _guard(self, max_hours, warn_hours, cluster_name, cluster_arn, execution_role_arn, gpu_groups, key,
               deployed_at):
        if not (cluster_name and cluster_arn and execution_role_arn and gpu_groups):
            raise ValueError("max_deployed_hours needs the HyperPod cluster, its execution role and its GPU groups")
        if not 0 < warn_hours < max_hours:
            raise ValueError(
                f"warn_before_hours={warn_hours} must be > 0 and below max_deployed_hours={max_hours}"
            )
        function = handler_function(
            self, "GuardFunction", handler_dir="deploy_guard", handler="handler", timeout=Duration.minutes(1),
            environment={"CLUSTER_NAME": cluster_name, "GPU_GROUPS": ",".join(gpu_groups),
                         "TOPIC_ARN": self.topic.topic_arn,
                         "MAX_HOURS": str(max_hours), "WARN_HOURS": str(warn_hours),
                         "PERIOD_HOURS": str(CHECK_PERIOD.to_minutes() / 60), "DEPLOYED_AT": deployed_at},
            initial_policy=[
                iam.PolicyStatement(actions=["sagemaker:DescribeCluster", "sagemaker:UpdateCluster"],
                                    resources=[cluster_arn]),
                iam.PolicyStatement(actions=["iam:PassRole"], resources=[execution_role_arn],
                                    conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}),
            ],
        )
        self.topic.grant_publish(function)
        key.grant_encrypt(function)
        invoker = iam.Role(self, "GuardInvoker", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"),
                           description="deploy guard: EventBridge Scheduler invokes the guard function")
        schedule = scheduler.Schedule(self, "GuardSchedule", schedule=scheduler.ScheduleExpression.rate(CHECK_PERIOD),
                                      target=targets.LambdaInvoke(function, role=invoker),
                                      description="deploy guard: warn, then scale GPU groups to 0")
        # The guard's own failure is loud: any check that raised within a period e-mails the alert topic.
        self.guard_alarm = cloudwatch.Alarm(
            self, "GuardErrors", metric=function.metric_errors(period=CHECK_PERIOD, statistic="Sum"), threshold=1,
            evaluation_periods=1, comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"{Stack.of(self).stack_name}: the deploy guard's check failed, so it may not scale "
                              "the GPU groups down; see the function's log group")
        self.guard_alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.topic))
        function_id = Stack.of(self).get_logical_id(function.node.default_child)
        acknowledge(invoker, {
            f"AwsSolutions-IAM5[Resource::<{function_id}.Arn>:*]":
                "deploy guard: CDK's invoke grant covers the function's versions",
        })
        acknowledge(function, {
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]":
                "deploy guard: Lambda needs only to write its own CloudWatch logs",
            "AwsSolutions-L1": "deploy guard: runtime pinned by this project",
            "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]":
                "deploy guard: CDK's grant for publishing to the encrypted topic",
            "AwsSolutions-IAM5[Action::kms:ReEncrypt*]":
                "deploy guard: CDK's grant for publishing to the encrypted topic",
        })
        return schedule
