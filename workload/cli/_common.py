"""Helpers shared by the CLI modules: stderr errors with exit codes, next-step hints."""

from __future__ import annotations

from typing import NoReturn

import typer

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
