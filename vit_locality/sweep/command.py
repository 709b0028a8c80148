"""What a command hands to the processes that run its cells: one `CommandContext`, written as JSON into one
environment variable (COMMAND_ENV) by the entry point, its sweeper and the verdict callback, and read back with
`current_command()` in every process that runs a cell (basic, joblib and SLURM launchers, a DDP cell's own
processes). Nothing else of the command crosses by environment or is kept in a module's variables."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

COMMAND_ENV = "VIT_LOCALITY_COMMAND"
# Each cell's run directory rides along only up to this size of JSON: the environment of every process and SLURM job
# carries it, and one variable must stay far below Linux's 128 KiB per string. A larger sweep's SLURM jobs are then
# named by their overrides in the launcher's lines.
RUN_DIRS_LIMIT = 32 * 1024

RunDirs = tuple[tuple[tuple[str, ...], str], ...]  # (a cell's `cell_key`, its run directory), one pair per cell


def new_command_id() -> str:
    """Unique among commands writing into one sweep directory at once, from one host or several."""
    return f"{os.getpid()}-{secrets.token_hex(6)}"


def cell_key(overrides: Sequence[str]) -> tuple[str, ...]:
    """A cell's overrides sorted, without Hydra's own, which only the pre-check's side lists."""
    return tuple(sorted(o for o in overrides if not o.split("=", 1)[0].lstrip("+~").startswith(("hydra/", "hydra."))))


def run_dirs_of(run_dirs: Mapping[tuple[str, ...], Path]) -> RunDirs:
    """Each cell's run directory, keyed by `cell_key`; none when they would make the environment too large."""
    pairs = tuple((cell_key(cell), str(run_dir)) for cell, run_dir in run_dirs.items())
    return pairs if len(json.dumps(pairs)) <= RUN_DIRS_LIMIT else ()


@dataclass(frozen=True)
class CommandContext:
    """One command as each of its cells sees it, wherever the cell runs."""

    command_id: str = ""  # its cells' verdict and run locks: cells of one command wait for each other's lock
    cell_count: int | None = None  # how many cells a `-m` command runs ("cell k of N"); None for a search or a run
    sweep: bool = False  # a `-m` command: its cells print no config tree (the entry point printed the sweep's)
    run_dirs: RunDirs = ()  # each cell's run directory as the pre-check named it, for the SLURM launcher's lines
    sweep_dir: str | None = None  # where Hydra's multirun wrote, set in the launching process by the verdict callback

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> CommandContext:
        """The context `to_json` wrote; an empty one for anything else (a variable left from another version)."""
        try:
            data = json.loads(text)
            run_dirs = tuple((tuple(key), str(run_dir)) for key, run_dir in data.get("run_dirs", ()))
            count = data.get("cell_count")
            return cls(
                command_id=str(data.get("command_id", "")),
                cell_count=count if isinstance(count, int) and count > 0 else None,
                sweep=data.get("sweep") is True,
                run_dirs=run_dirs,
                sweep_dir=None if data.get("sweep_dir") is None else str(data["sweep_dir"]),
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def run_dir_index(self) -> dict[tuple[str, ...], Path]:
        """Each cell's run directory as the pre-check named it, by `cell_key`."""
        return {cell: Path(run_dir) for cell, run_dir in self.run_dirs}


def current_command(environ: Mapping[str, str] | None = None) -> CommandContext:
    """The context this process inherited (an empty one outside a command of the entry point)."""
    text = (os.environ if environ is None else environ).get(COMMAND_ENV, "")
    return CommandContext.from_json(text) if text else CommandContext()


def publish_command(context: CommandContext, environ: MutableMapping[str, str] | None = None) -> CommandContext:
    """Hand `context` to every process this one starts from now on (and to this one's later readers)."""
    (os.environ if environ is None else environ)[COMMAND_ENV] = context.to_json()
    return context
