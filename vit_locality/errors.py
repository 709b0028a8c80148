"""The project's errors, each carrying its exit status (`exit_code`): 2 a bad setting, file or data (nothing ran,
nothing was overwritten), 3 a training run that diverged, 1 anything else."""

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
    """The first line of the message, prefixed `Type: ` for errors that are not the project's own."""
    text = str(error) if isinstance(error, VitLocalityError) else f"{type(error).__name__}: {error}"
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def exit_code_of(error: BaseException) -> int:
    """The exit status an entry point gives for `error`."""
    return getattr(error, "exit_code", 1) if isinstance(error, VitLocalityError) else 1


def run_as_command(main: Callable[[], int]) -> None:
    """Run an entry point's `main` and exit with its status; a project error becomes one line on stderr."""
    try:
        status = main()
    except VitLocalityError as error:
        print(f"error: {first_line(error)}", file=sys.stderr)
        status = exit_code_of(error)
    sys.exit(status)
