"""The report commands the extras add to `python -m vit_locality.report`: the instruments' tables and figures, one
HTML page per sweep, and the report as a W&B run."""

from __future__ import annotations

from pathlib import Path

from vit_locality.extras.html_page import build_page, page_name
from vit_locality.extras.instrument_figures import write_instrument_figures
from vit_locality.extras.instrument_tables import instrument_tables, measure
from vit_locality.extras.wandb_publish import publish
from vit_locality.report.load.aggregate import Aggregate
from vit_locality.report.load.measurement import PAPER, MeasurementChoice

__all__ = ["publish", "write_instruments", "write_pages"]


def write_instruments(agg: Aggregate, out: Path, box_images: int) -> list[Path]:
    """Every instrument's tables (printed too) and figures for each (data set, model)."""
    written: list[Path] = []
    for data, model in agg.models():
        found = measure(agg, data, model, box_images)
        for table in instrument_tables(found):
            print(table.markdown(), end="\n\n")
            written += table.write(out)
        written += write_instrument_figures(found, out)
        agg.notes.extend(found.notes)
    return written


def write_pages(
    sweep_dirs: list[Path],
    out: Path,
    data: list[str] | None,
    model: list[str] | None,
    box_images: int,
    choice: MeasurementChoice = PAPER,
) -> int:
    """One HTML page per sweep directory, each run read in the measurement `choice` asks for; 1 when none of them
    holds a complete run."""
    pages, used = [], set()
    for sweep_dir in sweep_dirs:
        name, n = page_name(sweep_dir), 2
        while name in used:  # two sweeps of one name (a/main, b/main): main.html and main_2.html
            name, n = f"{page_name(sweep_dir)}_{n}", n + 1
        used.add(name)
        page = build_page(sweep_dir, out, data, model, box_images, name, choice)
        print(f"{sweep_dir}: {page if page else 'no complete run, no page'}")
        pages += [page] if page else []
    return 0 if pages else 1
