"""Entry point of the ``skymaze`` command.

Every module in this package that defines ``register(app: typer.Typer)`` adds its
commands or command group; modules import heavy dependencies (torch, ray, boto3)
inside their commands so that ``skymaze --help`` stays fast.

Exit codes for every command: 0 success, 1 the operation failed, 2 bad usage or input; a command
raises ``workload.errors.SkymazeError`` (which carries its code) and the group below prints it once.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer
from typer.core import TyperGroup

import workload.cli as cli_package
from workload.errors import SkymazeError


def _aws_errors() -> tuple[type[Exception], ...]:
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # images without boto3 have no AWS errors to translate
        return ()
    return (BotoCoreError, ClientError)


def error_exit(exc: Exception) -> int:
    """The one translation of an error that ends a command: ``error: ...`` on stderr, and the exit code.

    A :class:`SkymazeError` says what to do and carries its code (1 failed, 2 bad input); an AWS SDK
    error that escaped a command becomes one line and exit 1, so that a credentials or permissions
    problem never reaches the user as a botocore traceback.
    """
    if isinstance(exc, SkymazeError):
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    from workload.ops.identity import CREDENTIALS_HELP

    typer.echo(f"error: AWS call failed: {_one_line(exc)}; {CREDENTIALS_HELP}", err=True)
    return 1


class _Commands(TyperGroup):
    """The `skymaze` group: the errors of every command are caught here, once."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (SkymazeError, *_aws_errors()) as exc:
            raise typer.Exit(code=error_exit(exc)) from None


app = typer.Typer(
    cls=_Commands,
    name="skymaze",
    help=(
        "Visual-maze GRPO + LoRA: rehearse on a laptop, train on SageMaker HyperPod, serve and evaluate.\n\n"
        "Example:  skymaze maze show --seed 0 --size 9 -o maze.png"
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _register_command_modules() -> None:
    for info in sorted(pkgutil.iter_modules(cli_package.__path__), key=lambda m: m.name):
        if info.name in {"main"} or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{cli_package.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if callable(register):
            register(app)


def package_version() -> str:
    """The installed skymaze distribution's version; "unknown" where the package is only on PYTHONPATH."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("skymaze")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"skymaze {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="print the version and exit"),
) -> None:
    """Visual-maze GRPO + LoRA on SageMaker HyperPod, with a CPU rehearsal."""


_register_command_modules()


def run(application: typer.Typer = app, argv: list[str] | None = None) -> int:
    """Run ``application`` and return its exit code; an error that escaped it is translated by :func:`error_exit`
    (the `skymaze` group itself translates its commands' errors the same way)."""
    from workload.cli._common import deprecated_flag_warning

    warning = deprecated_flag_warning(sys.argv[1:] if argv is None else argv)
    if warning:
        typer.echo(warning, err=True)
    try:
        application(args=argv, standalone_mode=True)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except (SkymazeError, *_aws_errors()) as exc:
        return error_exit(exc)
    return 0


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    main()
