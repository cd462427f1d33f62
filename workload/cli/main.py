"""Entry point of the ``skymaze`` command.

Every module in this package that defines ``register(app: typer.Typer)`` adds its
commands or command group; modules import heavy dependencies (torch, ray, boto3)
inside their commands so that ``skymaze --help`` stays fast.

Exit codes for every command: 0 success, 1 the operation failed, 2 bad usage or input.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

import workload.cli as cli_package

app = typer.Typer(
    name="skymaze",
    help=(
        "Visual-maze GRPO + LoRA: rehearse on a laptop, train on SageMaker HyperPod, serve and evaluate.\n\n"
        "Example:  skymaze maze show --seed 0 --size 9 -o maze.png"
    ),
    no_args_is_help=True,
    add_completion=False,
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


@app.callback()
def _root() -> None:
    """Visual-maze GRPO + LoRA on SageMaker HyperPod, with a CPU rehearsal."""


_register_command_modules()


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())


if __name__ == "__main__":
    main()
