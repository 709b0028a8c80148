"""Paper tables and figures from finished sweeps (results.json and attention_stats.csv only).

python -m vit_locality.report {ablation,protocols,figures,all} SWEEP_DIR [SWEEP_DIR ...]
       [--out reports] [--data cifar100[,cifar10]] [--model vit_paper]

Prints the tables, writes Markdown, CSV, LaTeX, PNG and PDF into --out, then lists the runs it skipped and why
(and the runs a figure left out). A model name whose runs differ in architecture is a warning on stderr.
Exit status: 0 done; 1 no complete run found; 2 a sweep directory does not exist, or --out is not a directory
this user can write.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import ConfigError, check_directory
from .aggregate import aggregate
from .summary import architecture_warnings, sweep_dirs_problem
from .tables import ablation_tables, protocols_table

WHAT = ("ablation", "protocols", "figures", "all")


def _names(text: str | None) -> list[str] | None:
    return [name for name in text.split(",") if name] if text else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vit_locality.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=WHAT, help="which output to build")
    parser.add_argument("sweep_dirs", nargs="+", type=Path, help="sweep directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output directory (default: reports)")
    parser.add_argument("--data", help="only these data sets (comma-separated; default: every one found)")
    parser.add_argument("--model", help="only these models (comma-separated; default: every one found)")
    args = parser.parse_args(argv)
    problem = sweep_dirs_problem(args.sweep_dirs) or out_problem(args.out)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    agg = aggregate(args.sweep_dirs, _names(args.data), _names(args.model))
    for warning in architecture_warnings(run for group in agg.groups.values() for run in group.runs):
        print(f"warning: {warning}", file=sys.stderr)
    if not agg.groups:
        for run_dir, why in agg.skipped:
            print(f"skipped {run_dir}: {why}")
        wanted = "".join(
            f" {flag} {value}" for flag, value in (("--data", args.data), ("--model", args.model)) if value
        )
        where = ", ".join(str(d) for d in args.sweep_dirs)
        print(f"error: no complete run{' matching' + wanted if wanted else ''} found under {where}", file=sys.stderr)
        return 1

    written: list[Path] = []
    tables = []
    if args.what in ("protocols", "all"):
        tables.append(protocols_table(agg))
    if args.what in ("ablation", "all"):
        tables += ablation_tables(agg)
    for table in tables:
        print(table.markdown(), end="\n\n")
        written += table.write(args.out)
    if args.what in ("figures", "all"):
        from .figures import write_figures  # matplotlib and torch only when figures are asked for

        written += write_figures(agg, args.out, agg.notes)
    print(f"wrote {len(written)} files into {args.out}: {', '.join(p.name for p in written)}")
    for note in agg.notes:
        print(f"note: {note}")
    for run_dir, why in agg.skipped:
        print(f"skipped {run_dir}: {why}")
    return 0


def out_problem(out: Path) -> str | None:
    """Why the tables and figures could not be written into `out`, found before any work is done."""
    try:
        check_directory("--out", str(out), out)
    except ConfigError as error:
        return str(error)
    return None


def cli() -> None:
    """The installed console script."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
