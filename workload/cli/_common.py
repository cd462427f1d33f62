"""Helpers shared by the CLI modules: the shared options, stderr errors with exit codes, next-step hints."""

from __future__ import annotations

from typing import NoReturn

import typer

from workload.config import DEFAULT_PROFILE, DEPLOY_FLAG, RECIPE_FLAG

# The command line's one grammar: `--set KEY=VALUE` edits a recipe (cluster or rehearsal),
# `--deploy-set KEY=VALUE` (short `-c`, as `cdk -c`) a deploy setting, `--profile` picks the deploy
# profile with one default everywhere (the Makefile's PROFILE too). tests/cli/test_grammar.py holds it.
RECIPE_SET_HELP = ("Change one recipe setting, KEY=VALUE (repeatable): a field such as fixes.seeded_groups=false "
                   "or trainer.eval_interval=5; `skymaze recipe show NAME --fields` lists them.")
DEPLOY_SET_HELP = "Change one deploy setting, KEY=VALUE (repeatable), as `cdk -c`: e.g. -c worker_count=2; README lists them."
PROFILE_HELP = "Deploy profile: small (one GPU node, no endpoint) or blog (the published 3 GPU nodes, with the endpoint)."
PROFILE_OPTION = typer.Option(DEFAULT_PROFILE, "--profile", help=PROFILE_HELP)
RECIPE_SETS_OPTION = typer.Option(None, RECIPE_FLAG, metavar="KEY=VALUE", help=RECIPE_SET_HELP)
DEPLOY_SETS_OPTION = typer.Option([], DEPLOY_FLAG, "-c", metavar="KEY=VALUE", help=DEPLOY_SET_HELP)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def fail(message: str, *, code: int = EXIT_FAILED) -> NoReturn:
    """Print ``error: message`` to stderr and exit with ``code`` (1 failed, 2 bad input)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=code)


def next_step(*commands: str) -> None:
    """Print the commands a user most likely runs next (stdout, last lines)."""
    typer.echo("\nNext:")
    for command in commands:
        typer.echo(f"  {command}")


def deploy_setting(profile: str, name: str):
    """One deployment setting of ``profile`` (infra/settings.py), or exit 2 saying what to pass.

    Inside the trainer image the deploy settings are not installed: the caller's explicit
    option is then the only source.
    """
    try:
        from infra.settings import SettingsError, load_settings
    except ImportError:
        fail("deploy settings are not installed here; pass the value explicitly (see --help)", code=EXIT_USAGE)
    try:
        return getattr(load_settings({"profile": profile}), name)
    except SettingsError as err:
        fail(str(err), code=EXIT_USAGE)


def deploy_setting_if_installed(profile: str, name: str):
    """Like :func:`deploy_setting`, but None inside the trainer image (no deploy settings there)."""
    try:
        import infra.settings  # noqa: F401
    except ImportError:
        return None
    return deploy_setting(profile, name)
