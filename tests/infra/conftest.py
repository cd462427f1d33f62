"""One synth of the whole app per test session, shared by every infra test.

The App gets the same context the CDK CLI would pass (cdk.json's "context" merged with
cdk.context.json, then the profile), so the templates here are the ones `cdk synth` writes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

PROFILE = "blog"  # the published topology: every stack, serving on
ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def cli_context(**overrides: str) -> dict:
    """What `cdk synth -c k=v` hands the app: cdk.json context, then cdk.context.json, then -c."""
    context = dict(json.loads((ROOT / "cdk.json").read_text()).get("context", {}))
    context.update(json.loads((ROOT / "cdk.context.json").read_text()))
    context.update(overrides)
    return context


@dataclass(frozen=True)
class Synth:
    """The synthesized app: stacks by role, their templates as dicts, and the cloud assembly dir."""

    stacks: dict
    templates: dict[str, dict]
    outdir: Path
    settings: object


def synth_app(context: dict, outdir: Path) -> Synth:
    """Compose and synthesize the app for `context` into `outdir`; cdk-nag raises on any finding."""
    import aws_cdk as cdk
    from aws_cdk.assertions import Template

    import app as cdk_app
    from workload.deployment.settings import load_settings

    app = cdk.App(context=context, outdir=str(outdir))
    settings = load_settings(context)
    stacks = cdk_app.compose(app, settings)
    app.synth()
    templates = {role: Template.from_stack(stack).to_json() for role, stack in stacks.items()}
    return Synth(stacks=stacks, templates=templates, outdir=outdir, settings=settings)


@pytest.fixture(scope="session")
def synth(tmp_path_factory) -> Synth:
    return synth_app(cli_context(profile=PROFILE), tmp_path_factory.mktemp("cdk.out"))


def nag_report_is_clean(outdir: Path) -> bool:
    """cdk-nag's validation report: every plugin succeeded with no violation."""
    report = json.loads((outdir / "validation-report.json").read_text())
    return all(p["violations"] == [] and p["conclusion"] == "success" for p in report["pluginReports"])


def cfn_lint(outdir: Path, region: str = "us-west-2") -> list[str]:
    """cfn-lint's errors over every template in `outdir`: what `cfn-lint -r REGION --non-zero-exit-code error`
    fails on (matches of severity "error"; warnings and informational ones do not fail it).

    cfn-lint runs in this process through its own API (cfnlint.api.lint_by_config, the engine its command
    line runs): its rules and resource schemas load once a session, not once a subprocess (about 2.5 CPU s
    each, for 5 checks).
    """
    from cfnlint.api import ManualArgs, lint_by_config

    templates = sorted(str(p) for p in outdir.glob("*.template.json"))
    assert templates, f"no templates in {outdir}"
    matches = lint_by_config(ManualArgs(templates=templates, regions=[region]))
    return [str(match) for match in matches if match.rule.severity == "error"]


def mask_asset_hashes(template: dict) -> dict:
    """Replace content hashes (assets, images) so edits to Dockerfiles, dashboards or handlers
    by other parts of the project do not change the snapshots."""
    return json.loads(ASSET_HASH.sub("<asset-hash>", json.dumps(template, sort_keys=True)))


def resources(template: dict, resource_type: str) -> dict[str, dict]:
    """Logical id -> resource, for every resource of one CloudFormation type."""
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def one(template: dict, resource_type: str, **properties) -> tuple[str, dict]:
    """The single resource of a type whose Properties hold `properties` (fails when there are none or several)."""
    found = {k: v for k, v in resources(template, resource_type).items()
             if all(v["Properties"].get(key) == value for key, value in properties.items())}
    assert len(found) == 1, f"expected one {resource_type} with {properties}, found {sorted(found)}"
    return next(iter(found.items()))


def k8s_manifests(template: dict) -> list[dict]:
    """Every Kubernetes object applied by the template's KubernetesManifest resources.

    Tokens inside a manifest (a Fn::Join) are replaced by "<token>" so the JSON can be parsed.
    """
    objects = []
    for resource in resources(template, "Custom::AWSCDK-EKS-KubernetesResource").values():
        raw = resource["Properties"]["Manifest"]
        if isinstance(raw, dict):
            raw = "".join(part if isinstance(part, str) else "<token>" for part in raw["Fn::Join"][1])
        objects.extend(json.loads(raw))
    return objects


def manifest_of_kind(template: dict, kind: str) -> dict:
    """The one Kubernetes object of `kind` in the template."""
    found = [m for m in k8s_manifests(template) if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]
