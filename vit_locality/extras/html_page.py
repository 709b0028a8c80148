"""One self-contained HTML page per sweep (images as `data:` URIs, inline style, no script) with everything on it."""

from __future__ import annotations

import base64
import html
from datetime import datetime, timezone
from pathlib import Path

from vit_locality.attention.stats_log import MAPS_PNG
from vit_locality.extras.instrument_figures import write_instrument_figures
from vit_locality.extras.instrument_tables import BOX_IMAGES, instrument_tables, measure
from vit_locality.extras.references import figure_references
from vit_locality.report.load.aggregate import Aggregate, aggregate
from vit_locality.report.load.measurement import PAPER, MeasurementChoice
from vit_locality.report.load.run_settings import slug
from vit_locality.report.render.figures import write_figures
from vit_locality.report.render.table_format import Table
from vit_locality.report.render.tables import ablation_tables, protocols_table
from vit_locality.store.file_read import PICTURE_SIZE_LIMIT, UnreadableFile, read_regular_file

END_COLOUR = "#2a9d8f"  # the footer's bar: a reader (or a test) that sees it has seen the whole page
STYLE = f"""
body {{ font-family: sans-serif; max-width: 1200px; margin: 1em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0; font-size: 13px; }}
th, td {{ border: 1px solid #bbb; padding: 2px 6px; text-align: left; }}
th {{ background: #eee; }}
figure {{ margin: 1em 0; }}
figure img {{ max-width: 100%; border: 1px solid #ddd; }}
figcaption {{ font-size: 12px; color: #555; }}
ul.notes {{ font-size: 12px; color: #444; }}
footer {{ margin-top: 2em; padding: 0.6em; background: {END_COLOUR}; color: white; }}
"""


def render_page(title: str, source: str, sections: list[tuple[str, str]], notes: list[str]) -> str:
    """The page: title, source, contents, the sections of (heading, HTML) and the notes."""
    contents = "".join(
        f'<li><a href="#s{i}">{html.escape(heading)}</a></li>' for i, (heading, _) in enumerate(sections)
    )
    body = "".join(
        f'<section id="s{i}"><h2>{html.escape(heading)}</h2>{content}</section>'
        for i, (heading, content) in enumerate(sections)
    )
    listed = "".join(f"<li>{html.escape(note)}</li>" for note in notes) or "<li>none</li>"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(source)} Written {stamp} by"
        " python -m vit_locality.report page.</p>"
        f'<nav><ul>{contents}<li><a href="#notes">Notes and skipped runs</a></li></ul></nav>{body}'
        f'<section id="notes"><h2>Notes and skipped runs</h2><ul class="notes">{listed}</ul></section>'
        '<footer id="end">End of the report.</footer></body></html>\n'
    )


def table_html(table: Table) -> str:
    """A report table with its notes and its parts, escaped."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in table.notes)
    parts = "".join(table_html(part) for part in table.parts)
    listed = f'<ul class="notes">{notes}</ul>' if notes else ""
    return f"<h3>{html.escape(table.title)}</h3><table><tr>{head}</tr>{rows}</table>{listed}{parts}"


def image_html(path: Path, caption: str) -> str:
    """A PNG embedded as a data URI; UnreadableFile for a FIFO, a device or an oversized file."""
    data = base64.b64encode(read_regular_file(path, PICTURE_SIZE_LIMIT)).decode("ascii")
    alt = html.escape(caption, quote=True)
    return f'<figure><img src="data:image/png;base64,{data}" alt="{alt}"><figcaption>{alt}</figcaption></figure>'


def central_maps_html(agg: Aggregate, notes: list[str]) -> str:
    """Per (data set, model) and cell, the central-query attention maps each run of the cell's lowest seed saved."""
    parts = []
    for data, model in agg.models():
        parts.append(f"<h3>{html.escape(f'{data}, {model}')}</h3>")
        for name, group in agg.cells(data, model).items():
            first_seed = min(run.seed for run in group.runs)
            for run in sorted((r for r in group.runs if r.seed == first_seed), key=lambda r: r.run_dir.name):
                picture = run.run_dir / MAPS_PNG
                if not picture.exists() and not picture.is_symlink():
                    notes.append(f"{run.run_dir}: no {MAPS_PNG}; it has no attention maps on the page")
                    continue
                try:
                    parts.append(image_html(picture, f"{name}: {run.run_dir.name} (seed {run.seed})"))
                except UnreadableFile as error:
                    notes.append(error.skipped("its attention maps are not on the page"))
    return "".join(parts)


def page_name(sweep_dir: Path) -> str:
    """The page's file stem: the sweep directory's own name, file-name safe."""
    return slug(sweep_dir.resolve().name)


def build_page(
    sweep_dir: Path,
    out_dir: Path,
    data: list[str] | None = None,
    model: list[str] | None = None,
    box_images: int = BOX_IMAGES,
    name: str | None = None,
    choice: MeasurementChoice = PAPER,
) -> Path | None:
    """Everything of one sweep into <out>/<sweep>/ and the page <out>/<sweep>.html, each run read in the measurement
    `choice` asks for; None without a complete run."""
    agg = aggregate([sweep_dir], data, model, choice)
    if not agg.groups:
        return None
    name = name or page_name(sweep_dir)
    assets = out_dir / name
    runs = sum(len(group.runs) for group in agg.groups.values())
    notes, sections = list(agg.notes), []

    def add(heading: str, tables: list[Table], paths: list[Path]) -> None:
        for table in tables:
            table.write(assets)
        pictures = "".join(image_html(p, p.stem) for p in paths if p.suffix == ".png")
        sections.append((heading, "".join(table_html(t) for t in tables) + pictures))

    add("Tables", [protocols_table(agg), *ablation_tables(agg)], [])
    add("Figures", [], write_figures(agg, assets, notes, figure_references))
    for data_name, model_name in agg.models():
        found = measure(agg, data_name, model_name, box_images)
        add(f"Instruments: {found.title}", instrument_tables(found), write_instrument_figures(found, assets))
        notes += found.notes
    sections.append(("Central-query attention maps, layers 0 and 1", central_maps_html(agg, notes)))
    notes += [f"skipped {run_dir}: {why}" for run_dir, why in agg.skipped]
    source = f"{runs} complete run{'s' if runs != 1 else ''} under {sweep_dir}."
    path = out_dir / f"{name}.html"
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(f"vit-locality: {name}", source, sections, notes), encoding="utf-8")
    return path


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
