"""Unattended-run settings through the whole app: supervisor, budget and deploy guard synthesize,
pass cdk-nag and cfn-lint; bad values fail naming the key."""

from __future__ import annotations

import pytest

from tests.infra.conftest import cfn_lint, cli_context, k8s_manifests, one, resources

GUARDED = {"budget_usd_per_month": "3000", "alert_emails": "ops@example.com,ml@example.com", "max_deployed_hours": "14",
           "supervise.group_idle_s": "1800", "supervise.group_idle_count": "1"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    import app as cdk_app
    from workload.deployment.settings import load_settings

    outdir = tmp_path_factory.mktemp("cdk.out")
    context = cli_context(profile="blog", **GUARDED)
    app = cdk.App(context=context, outdir=str(outdir))
    stacks = cdk_app.compose(app, load_settings(context))
    app.synth()  # cdk-nag runs here and raises on any unacknowledged finding
    return {role: Template.from_stack(stack).to_json() for role, stack in stacks.items()}, outdir


@pytest.mark.slow
def test_supervisor_budget_and_guard_are_in_the_templates(guarded):
    templates, _ = guarded
    deployment = next(o for o in k8s_manifests(templates["ray"]) if o["kind"] == "Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert {"group_idle_s=1800", "group_idle_count=1"} <= {command[i + 1] for i, arg in enumerate(command) if arg == "--set"}
    assert command[command.index("--expected-workers") + 1] == "3"
    assert resources(templates["ray"], "AWS::EKS::PodIdentityAssociation")
    _, budget = one(templates["cluster"], "AWS::Budgets::Budget")
    assert budget["Properties"]["Budget"]["BudgetLimit"]["Amount"] == 3000
    assert len(resources(templates["cluster"], "AWS::SNS::Subscription")) == 2
    functions = [f for f in resources(templates["cluster"], "AWS::Lambda::Function").values()
                 if f["Properties"].get("Environment", {}).get("Variables", {}).get("MAX_HOURS") == "14.0"]
    assert len(functions) == 1
    assert functions[0]["Properties"]["Environment"]["Variables"]["GPU_GROUPS"] == "workers"


@pytest.mark.slow
def test_the_guarded_templates_pass_cfn_lint(guarded):
    _, outdir = guarded
    assert cfn_lint(outdir) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"budget_usd_per_month": "3000"}, "set alert_emails=you@example.com"),
        ({"alert_emails": "not-an-address"}, "'not-an-address' is not an e-mail address"),
        ({"supervise.max_submissions": "0"}, "supervise.max_submissions"),
    ],
)
def test_bad_unattended_settings_name_the_key(overrides, message):
    from workload.deployment.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_settings({"profile": "blog", **overrides})


def test_by_default_the_supervisor_and_a_16_hour_guard_are_on_and_no_budget():
    from workload.deployment.settings import load_settings

    settings = load_settings({"profile": "blog"})
    assert settings.supervisor and settings.budget_usd_per_month is None and settings.deploy_guard_hours == 16.0
    assert load_settings({"profile": "small", "max_deployed_hours": "0"}).deploy_guard_hours is None
    assert load_settings({"profile": "blog", "alert_emails": "a@example.com, b@example.com"}).alert_emails == (
        "a@example.com", "b@example.com")


@pytest.mark.slow
def test_a_default_gpu_deploy_has_the_guard_and_its_failure_alarm(synth):
    """No setting given: the cluster stack scales the GPU group down 16 h after the deploy (README's 160-step run
    takes about 14), and the guard's own errors raise an alarm on the alert topic."""
    cluster = synth.templates["cluster"]
    functions = [f for f in resources(cluster, "AWS::Lambda::Function").values()
                 if "MAX_HOURS" in f["Properties"].get("Environment", {}).get("Variables", {})]
    assert [f["Properties"]["Environment"]["Variables"]["MAX_HOURS"] for f in functions] == ["16.0"]
    _, alarm = one(cluster, "AWS::CloudWatch::Alarm")
    assert alarm["Properties"]["MetricName"] == "Errors" and len(alarm["Properties"]["AlarmActions"]) == 1
    assert not resources(cluster, "AWS::Budgets::Budget")
