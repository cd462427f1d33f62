"""Every command that reports has --json, and its stdout is one JSON document with no hints."""

from __future__ import annotations

import json

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from workload.cli.main import app

runner = CliRunner()

# Commands that act rather than report, each with the reason it prints text.
ACTING = {
    "deploy": "streams cdk's own output",
    "diff": "streams cdk diff's own output",
    "teardown": "prints its steps while deleting",
    "logs": "prints the job's log as is",
    "stop": "one acknowledgement",
    "serve": "a server; prints its address",
    "rehearse": "a training run; writes run.json",
    "study": "six seeds of training; writes seed-N.json and summary.json",
    "promote": "an upload; prints the S3 URI",
    "dataset build": "writes parquet files",
    "maze show": "writes a picture",
    "maze freeze": "writes a held-out set file",
    "recipe show": "stdout is SkyRL's argv by design",
    "use": "records the deployment later commands act on; prints it",
    "supervise": "a long-running supervisor whose every decision is already one JSON line",
}
OFFLINE_REPORTS = [
    ["cost", "--size", "small", "--hours", "2"],
    ["plan", "--recipe", "blog", "--size", "blog"],
    ["recipe", "list"],
    ["recipe", "check", "blog", "--size", "blog"],
    ["maze", "heldout", "--heldout", "easy-64"],
]


def _commands(command, prefix=()):
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in subcommands.items():
            yield from _commands(sub, (*prefix, name))
    else:
        yield " ".join(prefix), command


def test_every_reporting_command_has_json():
    commands = dict(_commands(get_command(app)))
    assert set(ACTING) <= set(commands), set(ACTING) - set(commands)
    missing = [name for name, command in commands.items() if name not in ACTING
               and not any("--json" in param.opts for param in command.params)]
    assert missing == []


@pytest.mark.parametrize("args", OFFLINE_REPORTS, ids=lambda a: " ".join(a[:2]))
def test_json_output_is_one_document_without_hints(args):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document and "Next:" not in result.stdout


def test_json_keeps_the_figures_of_the_text_report():
    text = runner.invoke(app, ["cost", "--size", "small", "--hours", "2"]).stdout
    data = json.loads(runner.invoke(app, ["cost", "--size", "small", "--hours", "2", "--json"]).stdout)
    assert f"{data['usd_per_run']:,.2f}" in text and data["hours"] == 2 and len(data["lines"]) >= 3
    plan = json.loads(runner.invoke(app, ["plan", "--recipe", "blog", "--size", "blog", "--json"]).stdout)
    assert plan["policy_gpus"] == 6 and plan["run_id"] == "maze-blog" and plan["fits_fsx"] is True
