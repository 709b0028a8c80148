"""Paper tables and figures from finished sweeps (results.json and attention_stats.csv only).

python -m vit_locality.report {ablation,protocols,figures,instruments,page,all} SWEEP_DIR [SWEEP_DIR ...]
       [--out reports] [--data cifar100[,cifar10]] [--model vit_paper] [--wandb] [--box-images 128]
       [--probe-size N] [--raw-attention] [--early-layers N]

Prints the tables, writes Markdown, CSV, LaTeX, PNG and PDF into --out, then lists the runs it skipped and why
(and the runs a figure left out). `instruments` adds the tables and figures of docs/instruments.md (locality
masses, position embeddings, the pasted box, matched accuracy, dose-response; `all` includes them); `page` writes
one self-contained HTML page per sweep directory, <out>/<sweep>.html, with everything on it. A model name whose
runs differ in architecture is a warning on stderr. How each run's measurement is chosen: docs/reports.md.
Exit status: 0 done, or every run found left out (each listed with the reason); 2 a sweep directory does not
exist or holds no complete run, or --out is not a directory this user can write.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from vit_locality.errors import ConfigError, run_as_command
from vit_locality.precheck.command_line import check_directory
from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.load.measurement import add_measurement_options, measurement_choice
from vit_locality.report.render.tables import ablation_tables, protocols_table
from vit_locality.report.summary import architecture_warnings, sweep_dirs_problem

WHAT = ("ablation", "protocols", "figures", "instruments", "page", "all")
# The report's plugin seam: what the extras package (vit_locality/extras/) adds to the report, declared in
# pyproject.toml's entry point group of this name (page, instruments, publish, references), loaded when asked.
PLUGIN_GROUP = "vit_locality.report"


def plugin(name: str) -> Any:
    """What the installed package declares as `name` in PLUGIN_GROUP; ConfigError when it declares none (a checkout
    used without `pip install -e .`, whose entry points are then unknown)."""
    found = [point for point in entry_points(group=PLUGIN_GROUP) if point.name == name]
    if not found:
        raise ConfigError(f"{name}: no {PLUGIN_GROUP} entry point installed; install the package (make install)")
    return found[0].load()


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
    parser.add_argument(
        "--box-images", type=int, default=128, help="probe images for the pasted-box instrument (0: leave it out)"
    )
    parser.add_argument("--wandb", action="store_true", help="also publish them as one W&B run (offline: wandb sync)")
    add_measurement_options(parser)
    args = parser.parse_args(argv)
    choice = measurement_choice(args)
    if problem := sweep_dirs_problem(args.sweep_dirs) or out_problem(args.out):
        print(f"error: {problem}", file=sys.stderr)
        return 2

    if args.what == "page":
        return plugin("page")(args.sweep_dirs, args.out, _names(args.data), _names(args.model), args.box_images, choice)
    agg = aggregate(args.sweep_dirs, _names(args.data), _names(args.model), choice)
    for warning in architecture_warnings(run for group in agg.groups.values() for run in group.runs):
        print(f"warning: {warning}", file=sys.stderr)
    if not agg.groups:
        for run_dir, why in agg.skipped:
            print(f"skipped {run_dir}: {why}")
        wanted = "".join(
            f" {flag} {value}" for flag, value in (("--data", args.data), ("--model", args.model)) if value
        )
        where = ", ".join(str(d) for d in args.sweep_dirs)
        if agg.skipped and not wanted:  # runs there, each left out for the reason listed: the command is fine
            print(f"no table: every run under {where} was left out (above)")
            return 0
        print(f"error: no complete run{' matching' + wanted if wanted else ''} found under {where}", file=sys.stderr)
        return 2

    written: list[Path] = []
    tables = [protocols_table(agg)] if args.what in ("protocols", "all") else []
    tables += ablation_tables(agg) if args.what in ("ablation", "all") else []
    for table in tables:
        print(table.markdown(), end="\n\n")
        written += table.write(args.out)
    if args.what in ("figures", "all"):
        from vit_locality.report.render.figures import write_figures

        written += write_figures(agg, args.out, agg.notes, plugin("references"))
    if args.what in ("instruments", "all"):
        written += plugin("instruments")(agg, args.out, args.box_images)
    print(f"wrote {len(written)} files into {args.out}: {', '.join(p.name for p in written)}")
    if args.wandb:
        pictures = [path for path in written if path.suffix == ".png"]
        print(f"W&B report run: {plugin('publish')(agg, tables, pictures, args.sweep_dirs, args.out)}")
    for note in agg.notes:
        print(f"note: {note}")
    for run_dir, why in agg.skipped:
        print(f"skipped {run_dir}: {why}")
    return 0


def out_problem(out: Path) -> str | None:
    """Why nothing could be written into `out`, or None."""
    try:
        check_directory("--out", str(out), out)
    except ConfigError as error:
        return str(error)
    return None


def cli() -> None:
    """The installed console script: a project error is its one line on stderr and its exit status."""
    run_as_command(main)


if __name__ == "__main__":
    cli()
