"""`python -m vit_locality`: the package has four commands, not one; this says which and how to start each."""

from __future__ import annotations

import sys

# (installed command, the same as a module, what it does); pyproject.toml's [project.scripts]
# (tests/project/test_package.py)
COMMANDS = (
    ("vit-locality-train", "vit_locality.train", "train one cell, or a sweep with -m (in a checkout: python train.py)"),
    ("vit-locality-report", "vit_locality.report", "tables, figures and the HTML page of sweeps"),
    ("vit-locality-summary", "vit_locality.report.summary", "the table of a sweep's finished cells"),
    ("vit-locality-analyze", "vit_locality.extras.analyze", "attention statistics of a checkpoint"),
)


def usage() -> str:
    """The four commands, each with its module form; `--help` after any of them says the rest."""
    width = max(len(name) for name, _, _ in COMMANDS)
    rows = [f"  {name:<{width}}  python -m {module:<27}  {what}" for name, module, what in COMMANDS]
    return "\n".join(["vit-locality has four commands (add --help to one for its settings):", *rows])


def main(argv: list[str] | None = None) -> int:
    """Print the commands; 0 when asked for them (no argument, -h, --help), 2 for anything else."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] not in ("-h", "--help"):
        print(f"error: python -m vit_locality runs no command (got {args[0]!r}); use one of these", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    print(usage())
    return 0


if __name__ == "__main__":
    sys.exit(main())
