"""The project's errors and the exit status each one means, in one place.

Every error a user can cause or meet carries its `exit_code`, so an entry point turns any of them into a one-line
message and a status without a table of isinstance checks: 2 a bad setting, file or data (nothing ran, or nothing
was overwritten), 3 a training run that diverged, 1 anything else.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


class VitLocalityError(Exception):
    """Base of the project's errors; the message is one line a person can act on."""

    exit_code = 1


class ConfigError(VitLocalityError, ValueError):
    """A setting has a value that is not allowed; the message names the key, the value and what is allowed."""

    exit_code = 2


def first_line(error: BaseException) -> str:
    """`Type: first line of the message`, for errors that are not the project's own (their text may run on)."""
    text = str(error) if isinstance(error, VitLocalityError) else f"{type(error).__name__}: {error}"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def exit_code_of(error: BaseException) -> int:
    """The exit status an entry point gives for `error`."""
    return getattr(error, "exit_code", 1) if isinstance(error, VitLocalityError) else 1


def run_as_command(main: Callable[[], int]) -> None:
    """Run an entry point's `main` and exit with its status; a project error becomes its one line on stderr and the
    status it carries."""
    try:
        status = main()
    except VitLocalityError as error:
        print(f"error: {first_line(error)}", file=sys.stderr)
        status = exit_code_of(error)
    sys.exit(status)
