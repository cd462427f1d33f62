"""Hostile input ends in one `error:` line and exit 2, before anything heavy runs; a legitimate value with the
same shape is accepted. One row a case, each through the real command."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from workload.cli.main import app

runner = CliRunner()

DEEP_JSON = '{"a": ' * 5_000 + "1" + "}" * 5_000  # json.loads nests one call a level: a RecursionError today
DEEP_YAML = "[" * 5_000 + "]" * 5_000
ALIASES = "[&a [x, x], &b [*a, *a], &c [*b, *b], &d [*c, *c]]"  # each level doubles once expanded

REFUSED = [
    (["recipe", "show", "blog", "--set", "skyrl=1"], r"skyrl=1: Input should be a valid dictionary"),
    (["recipe", "show", "blog", "--set", "skyrl={}"], r"trainer.train_batch_size is missing.*set one key instead"),
    (["recipe", "show", "blog", "--set", "trainer.policy.model.lora.exclude_modules=${oc.env:HOME}"],
     r"exclude_modules='\$\{oc.env:HOME\}': OmegaConf would resolve"),
    (["recipe", "show", "blog", "--set", f"trainer.policy.model.lora.exclude_modules={ALIASES}"],
     r"YAML anchors and aliases \(&name, \*name\) are not taken"),
    (["recipe", "show", "blog", "--set", f"trainer.policy.model.lora.exclude_modules={DEEP_YAML}"],
     r"nested more than 16 levels deep"),
    (["maze", "show", "--size", "4001"], r"odd integer from 5 to 163"),
    (["maze", "show", "--size", "161", "--cell-px", "100"], r"16100 px a side, over the 4096 px drawn at most"),
    (["submit", "--runtime-env-json", DEEP_JSON], r"--runtime-env-json is nested more than 16 levels deep"),
    (["cost", "--size", "blog", "--hours", "nan"], r"--hours nan: give a finite number >= 0"),
    (["cost", "--size", "blog", "--hours", "inf"], r"--hours inf: give a finite number >= 0"),
    (["cost", "--size", "blog", "--hours", "12", "--left-up-hours", "72", "--guard-hours", "nan"],
     r"--guard-hours nan: give a finite number >= 0"),
    (["teardown", "--size", "blog", "--keep-data", "--export-timeout-s", "nan", "--dry-run"],
     r"--export-timeout-s nan: give a finite number >= 0"),  # a NaN deadline: the export wait would never end
    (["teardown", "--size", "blog", "--poll-s", "0", "--dry-run"], r"--poll-s 0.0: give a finite number >= 0.001"),
    (["supervise", "raysubmit_x", "--poll-s", "nan", "--address", "http://127.0.0.1:9"],
     r"supervise.poll_s=nan: must be a finite number > 0"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=lambda value: " ".join(value)[:60]
                         if isinstance(value, list) else None)
def test_hostile_input_is_one_line_and_exit_2(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing the command might write lands in the project
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert __import__("re").search(message, lines[0]), lines[0]


def test_a_regex_with_braces_is_a_legitimate_skyrl_value():
    result = runner.invoke(app, ["recipe", "show", "blog", "--set",
                                 "trainer.policy.model.lora.exclude_modules=.*visual.{0,3}"])
    assert result.exit_code == 0, result.output
    assert "trainer.policy.model.lora.exclude_modules=.*visual.{0,3}" in result.stdout
    (run_name,) = [line.split("=", 1)[1] for line in result.stdout.splitlines() if line.startswith("trainer.run_name=")]
    assert run_name.startswith("maze-blog-")  # submit's name: the --set changes the recipe
    assert f"trainer.ckpt_path=/shared/runs/{run_name}/ckpts" in result.stdout, "the recipe's own {run_dir} is still filled in"
