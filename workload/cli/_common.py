"""Helpers shared by the CLI modules: the shared options, stderr errors with exit codes, next-step hints."""

from __future__ import annotations

import inspect
from typing import Any, NoReturn

import typer

from workload import config
from workload.config import DEFAULT_PROFILE, DEPLOY_FLAG, RECIPE_FLAG
from workload.errors import UsageError

# The command line's one grammar: `--set KEY=VALUE` edits a recipe (cluster or rehearsal),
# `--deploy-set KEY=VALUE` (short `-c`, as `cdk -c`) a deploy setting, `--size` picks the cluster size
# (deploy profile) with one default everywhere (the Makefile's SIZE too). tests/cli/test_grammar.py holds it.
RECIPE_SET_HELP = ("Change one recipe setting, KEY=VALUE (repeatable), e.g. trainer.eval_interval=5 (a key every "
                   "recipe has); `skymaze recipe show NAME --fields` lists a recipe's settings.")
DEPLOY_SET_HELP = "Change one deploy setting, KEY=VALUE (repeatable), as `cdk -c`: e.g. -c worker_count=2; docs/settings.md lists them."
SIZE_FLAG = "--size"
OLD_SIZE_FLAG = "--profile"  # the size's old name; `aws` and `cdk` use --profile for credentials profiles
SIZE_HELP = ("Cluster size: small (one GPU node, no endpoint) or blog (the published 3 GPU nodes, with the "
             "endpoint). Default: the size `skymaze deploy` or `skymaze use` recorded here, else small. "
             "--profile is its old name; AWS credentials profiles are chosen with AWS_PROFILE=NAME.")
SIZE_OPTION = typer.Option(None, SIZE_FLAG, OLD_SIZE_FLAG, metavar="SIZE", help=SIZE_HELP)
PROFILE_OPTION = SIZE_OPTION
# Each size has a cluster recipe of the same name sized for its GPUs, so the defaults of
# deploy, plan and submit always fit each other.
RUN_RECIPE_OPTION = typer.Option(
    None, "--recipe", help="Cluster recipe name (skymaze recipe list); default: the one named like the size."
)


def deprecated_flag_warning(argv: list[str]) -> str | None:
    """The warning for a command line that uses the size's old flag name, or None."""
    if any(arg == OLD_SIZE_FLAG or arg.startswith(f"{OLD_SIZE_FLAG}=") for arg in argv):
        return (f"warning: {OLD_SIZE_FLAG} is now {SIZE_FLAG} (same values; the old name still works). "
                "An AWS credentials profile is chosen with AWS_PROFILE=NAME.")
    return None


def _sizes() -> tuple[str, ...] | None:
    """The sizes the deploy settings define; None inside the trainer image, which has no deploy settings."""
    try:
        from workload.ops.profiles import PROFILES
    except ImportError:
        return None
    return tuple(PROFILES)


def recorded_context():
    """The deployment `skymaze deploy` or `skymaze use` recorded in this project, or None; an unreadable record
    raises ``ContextError`` (exit 2)."""
    from workload.ops.context import read_context

    return read_context()


def environment_region() -> tuple[str, str] | None:
    """(region, where from) the AWS CLI and the CDK CLI would use: ``AWS_REGION``, else ``AWS_DEFAULT_REGION``,
    else the credentials profile's ``region``; None when none is set. Read once, by the command line."""
    import os

    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if os.environ.get(name):
            return os.environ[name], name
    try:
        import botocore.session
    except ImportError:  # the trainer image has no AWS SDK and no deploy settings
        return None
    region = botocore.session.Session().get_scoped_config().get("region")
    return (region, "the AWS profile's region") if region else None


def resolve_size(size: str | None, deploy_sets: list[str] | tuple[str, ...] | None = ()) -> tuple[str, list[str]]:
    """``(size, -c pairs)`` a command acts on: the size given, else the recorded deployment's, else small.

    The recorded deployment's `-c` settings come first when its size is the one in effect, so that
    `teardown` or `cost` after `deploy --size blog -c worker_count=2` see the same cluster; the
    pairs given on the command line follow and win. The region: `-c region=`, else the recorded
    deployment's, else the environment's (``AWS_REGION``, as `aws` and `cdk` read it), added as a
    ``region=`` pair so that cdk and the record see it too. A size that is not one exits 2, saying that
    an AWS credentials profile is chosen with AWS_PROFILE (`--profile` is the size's old name).
    """
    import os

    sets = list(deploy_sets or [])
    context = recorded_context()
    if size is None:
        size = context.size if context is not None else DEFAULT_PROFILE
    sizes = _sizes()
    if sizes is not None and size not in sizes:
        aws_profile = f" (AWS_PROFILE is {os.environ['AWS_PROFILE']!r} here)" if os.environ.get("AWS_PROFILE") else ""
        fail(f"{SIZE_FLAG} {size!r}: not a cluster size; choose one of {', '.join(sizes)}. {OLD_SIZE_FLAG} is the "
             f"old name of {SIZE_FLAG}: to use AWS credentials profile {size!r}, run `AWS_PROFILE={size} skymaze ...`"
             f"{aws_profile}", code=EXIT_USAGE)
    if context is not None and context.size == size:
        sets = [*context.deploy_sets, *sets]  # a region from the environment at deploy time is among them
    elif sizes is not None and not any(pair.startswith("region=") for pair in sets):
        sets = [*_environment_region_pair(), *sets]
    return size, sets


def _environment_region_pair() -> list[str]:
    """``["region=R"]`` for the environment's region when it is not the settings' default; refused (exit 2) when
    the app does not deploy there."""
    from workload.deployment.settings import SUPPORTED_REGIONS, Settings

    found = environment_region()
    if found is None or found[0] == Settings.model_fields["region"].default:
        return []
    region, source = found
    if region not in SUPPORTED_REGIONS:
        raise UsageError(f"region {region!r} (from {source}) is not one this app deploys to; choose one of "
                         f"{', '.join(SUPPORTED_REGIONS)} with -c region=REGION, or change {source}")
    return [f"region={region}"]


def flags(flag: str, values: list[str] | tuple[str, ...] | None) -> str:
    """`` --set a=1 --set b=2``: the values a user gave, as a hint repeats them (shell-quoted)."""
    import shlex

    return "".join(f" {flag} {shlex.quote(value)}" for value in values or ())


def recipe_for_profile(recipe_name: str | None, profile: str) -> str:
    """The recipe a command runs: the one named, else the recipe sized for ``profile``."""
    return recipe_name or profile
RECIPE_SETS_OPTION = typer.Option(None, RECIPE_FLAG, metavar="KEY=VALUE", help=RECIPE_SET_HELP)
DEPLOY_SETS_OPTION = typer.Option([], DEPLOY_FLAG, "-c", metavar="KEY=VALUE", help=DEPLOY_SET_HELP)


def setting_option(model: type[config.ConfigModel], key: str, *, explicit: bool = False, flag: str | None = None,
                   **extra: Any) -> Any:
    """The option ``--KEY`` (or ``flag``) for setting ``key`` of ``model``: its help is the field's description,
    its default the model's.

    ``explicit=True``: the option's value is None unless given (the command tells a given value
    from a default, e.g. to refuse one an adapter contradicts); ``--help`` still shows the model's default.
    """
    info = config.field_named(model, key)
    flag = flag or "--" + key.replace("_", "-")
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


def doc_help(doc: str | None) -> str:
    """A command's docstring as its --help text, each paragraph joined into one line.

    Typer's rich help keeps a docstring's single line breaks, so a paragraph wrapped in the source would
    print wrapped at those breaks; joined, the terminal wraps it to its own width. A paragraph with an
    indented line (a block of examples, one command a line) keeps its line breaks.
    """
    paragraphs = inspect.cleandoc(doc or "").split("\n\n")
    return "\n\n".join(paragraph if any(line[:1].isspace() for line in paragraph.splitlines())
                       else " ".join(paragraph.splitlines()) for paragraph in paragraphs)


def require_finite(values: list[tuple[str, float | None, float]], *, example: str) -> None:
    """Refuse (exit 2) each ``(flag, value, floor)`` whose value is NaN, infinite or below the floor (None: not
    given): typer takes ``nan`` and ``inf`` as floats, and a NaN deadline or interval is never reached."""
    import math

    for flag, value, low in values:
        if value is not None and not (math.isfinite(value) and value >= low):
            raise UsageError(f"{flag} {value}: give a finite number >= {low:g}, e.g. {flag} {example}")


def next_step(*commands: str) -> None:
    """Print the commands a user most likely runs next (stdout, last lines)."""
    typer.echo("\nNext:")
    for command in commands:
        typer.echo(f"  {command}")


def aws_identity(region: str, *, expected_account: str | None = None, err: bool = False):
    """A boto3 session in ``region`` and the caller's identity, printed as one line (on stderr with
    ``err``, for commands whose stdout is JSON); exit 1 if unreadable.

    Commands that act on AWS call this once, first, so that nothing is synthesized, deleted or
    read before the user sees which account and region the command acts on.
    """
    import boto3

    from workload.ops.identity import check_identity

    session = boto3.Session(region_name=region)
    identity = check_identity(session, region, expected_account=expected_account)
    typer.echo(identity.line(), err=err)
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

    A bind without SO_REUSEPORT fails on any listener, including servers that set
    SO_REUSEPORT themselves and would otherwise silently share the port with a second server.
    SO_REUSEADDR (which Serve's proxy sets too) lets it past the connections of a server that just
    stopped (TIME_WAIT, ~60 s), which hold the port for nobody.
    """
    import socket

    if port == 0:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def deploy_target(profile: str, context: list[str], *, keep_data: bool = False) -> tuple[tuple[tuple[str, str], ...], Any, Any]:
    """``(overrides, settings, target)`` of a deploy command's ``--size`` and ``-c`` pairs; a bad
    setting raises ``SettingsError`` (exit 2) naming it."""
    from workload.ops.profiles import parse_overrides, settings_for, target_for

    overrides = parse_overrides(context)
    settings = settings_for(profile, overrides)
    return overrides, settings, target_for(settings, overrides=overrides, keep_data=keep_data)


def load_run(recipe_name: str, sets: list[str], *, keep_run_name: bool = False):
    """The recipe with ``sets``; changed settings get their own run name unless ``keep_run_name``."""
    from workload.skyrl.recipe import load_recipe
    from workload.skyrl.run_naming import distinct_run_sets

    recipe = load_recipe(recipe_name, sets=sets)
    if keep_run_name:
        return recipe
    named, new_id = distinct_run_sets(recipe.run_id, sets)
    if new_id is None:
        return recipe
    typer.echo(f"run name {new_id}: settings differ from recipe {recipe_name} (run {recipe.run_id}); "
               f"--keep-run-name resumes {recipe.run_id} instead", err=True)
    return load_recipe(recipe_name, sets=named)
