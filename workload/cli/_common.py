"""Helpers shared by the CLI modules: the shared options, stderr errors with exit codes, next-step hints."""

from __future__ import annotations

from typing import Any, NoReturn

import typer

from workload import config
from workload.config import DEFAULT_PROFILE, DEPLOY_FLAG, RECIPE_FLAG

# The command line's one grammar: `--set KEY=VALUE` edits a recipe (cluster or rehearsal),
# `--deploy-set KEY=VALUE` (short `-c`, as `cdk -c`) a deploy setting, `--profile` picks the deploy
# profile with one default everywhere (the Makefile's PROFILE too). tests/cli/test_grammar.py holds it.
RECIPE_SET_HELP = ("Change one recipe setting, KEY=VALUE (repeatable): a field such as fixes.seeded_groups=false "
                   "or trainer.eval_interval=5; `skymaze recipe show NAME --fields` lists them.")
DEPLOY_SET_HELP = "Change one deploy setting, KEY=VALUE (repeatable), as `cdk -c`: e.g. -c worker_count=2; docs/settings.md lists them."
PROFILE_HELP = "Deploy profile: small (one GPU node, no endpoint) or blog (the published 3 GPU nodes, with the endpoint)."
PROFILE_OPTION = typer.Option(DEFAULT_PROFILE, "--profile", help=PROFILE_HELP)
# Each deploy profile has a cluster recipe of the same name sized for its GPUs, so the defaults of
# deploy, plan and submit always fit each other.
RUN_RECIPE_OPTION = typer.Option(
    None, "--recipe", help="Cluster recipe name (skymaze recipe list); default: the one named like --profile."
)


def recipe_for_profile(recipe_name: str | None, profile: str) -> str:
    """The recipe a command runs: the one named, else the recipe sized for ``profile``."""
    return recipe_name or profile
RECIPE_SETS_OPTION = typer.Option(None, RECIPE_FLAG, metavar="KEY=VALUE", help=RECIPE_SET_HELP)
DEPLOY_SETS_OPTION = typer.Option([], DEPLOY_FLAG, "-c", metavar="KEY=VALUE", help=DEPLOY_SET_HELP)


def setting_option(model: type[config.ConfigModel], key: str, *, explicit: bool = False, **extra: Any) -> Any:
    """The option ``--KEY`` for setting ``key`` of ``model``: its help is the field's description, its default the model's.

    ``explicit=True``: the option's value is None unless given (the command tells a given value
    from a default, e.g. to refuse one an adapter contradicts); ``--help`` still shows the model's default.
    """
    info = config.field_named(model, key)
    flag = "--" + key.replace("_", "-")
    if info.is_required():
        return typer.Option(..., flag, help=info.description, **extra)
    default = info.get_default(call_default_factory=True)
    if explicit:
        shown = config.show_value(default) if default is not None else False
        return typer.Option(None, flag, help=info.description, show_default=shown, **extra)
    return typer.Option(default, flag, help=info.description, **extra)


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
    """One deployment setting of ``profile`` (workload/deployment/settings.py), or exit 2 saying what to pass."""
    from workload.deployment.settings import SettingsError, load_settings

    try:
        return getattr(load_settings({"profile": profile}), name)
    except SettingsError as err:
        fail(str(err), code=EXIT_USAGE)


def aws_identity(region: str, *, expected_account: str | None = None):
    """A boto3 session in ``region`` and the caller's identity, printed as one line; exit 1 if unreadable.

    Commands that act on AWS call this once, first, so that nothing is synthesized, deleted or
    read before the user sees which account and region the command acts on.
    """
    import boto3

    from workload.ops.identity import IdentityError, check_identity

    session = boto3.Session(region_name=region)
    try:
        identity = check_identity(session, region, expected_account=expected_account)
    except IdentityError as err:
        fail(str(err))
    typer.echo(identity.line())
    return session, identity


JSON_OPTION = typer.Option(False, "--json", help="print one JSON document on stdout instead of text (no hints)")


def print_json(value) -> None:
    """Machine output: one JSON document on stdout (dataclasses as objects, paths as strings)."""
    import dataclasses
    import json

    def default(obj):
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj)
        if isinstance(obj, (set, frozenset)):
            return sorted(obj)
        return str(obj)

    typer.echo(json.dumps(value, default=default, indent=2))


def port_taken(host: str, port: int) -> bool:
    """Whether something already listens on ``host:port`` (port 0 never is).

    A plain bind without SO_REUSEPORT fails on any listener, including servers that set
    SO_REUSEPORT themselves and would otherwise silently share the port with a second server.
    """
    import socket

    if port == 0:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def deploy_target_or_exit(profile: str, context: list[str]) -> tuple[tuple[tuple[str, str], ...], Any, Any]:
    """``(overrides, settings, target)`` of a deploy command's ``--profile`` and ``-c`` pairs; a bad
    setting exits 2 naming it."""
    from workload.ops.profiles import SettingsError, parse_overrides, settings_for, target_for

    try:
        overrides = parse_overrides(context)
        settings = settings_for(profile, overrides)
        return overrides, settings, target_for(settings, overrides=overrides)
    except SettingsError as exc:
        fail(str(exc), code=EXIT_USAGE)
