"""The one error base of the command line: a message for the user and the exit code it ends with.

Layers below the CLI raise a subclass; `skymaze` catches :class:`SkymazeError` once, at its top
(``workload.cli.main``), prints ``error: MESSAGE`` on stderr and exits with ``exit_code``: 1 the
operation failed (rerunning may help), 2 bad usage or input (change the command). A message says
what is wrong, why, and how to fix it, naming the key or option.
"""

from __future__ import annotations

EXIT_FAILED = 1
EXIT_USAGE = 2


class SkymazeError(Exception):
    """An operation failed; ``exit_code`` 1."""

    exit_code = EXIT_FAILED


class UsageError(SkymazeError, ValueError):
    """Bad input (a setting, an option, a file the user gave); ``exit_code`` 2."""

    exit_code = EXIT_USAGE
