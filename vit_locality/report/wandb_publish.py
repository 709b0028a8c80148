"""`python -m vit_locality.report ... --wandb`: the report just written to --out as one W&B run beside the sweep's
training runs: each table as a W&B Table, each figure as an image, every run's minimum MAD against top-1, and the
per-layer MAD curves. Offline, the run is written under <out>/wandb/ for `wandb sync`.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

from vit_locality.report.aggregate import Aggregate, summarise
from vit_locality.report.figures import layer_table
from vit_locality.report.table_format import Table
from vit_locality.store.file_read import PICTURE_SIZE_LIMIT, UnreadableFile, read_regular_file
from vit_locality.tracking.quiet import quiet_wandb
from vit_locality.tracking.wandb_mode import resolve_mode

DEFAULT_PROJECT = "vit-locality"
SCATTER_KEY = "runs/min_mad_vs_top1"


def sweep_project(agg: Aggregate) -> tuple[str, str | None]:
    """The W&B project and entity most of the runs were logged to (their recorded `logger.wandb`), so the report
    sits beside its training runs; the default project when none used W&B."""
    settings = [
        (run.config or {}).get("logger", {}).get("wandb") or {} for group in agg.groups.values() for run in group.runs
    ]
    chosen = Counter((s.get("project"), s.get("entity")) for s in settings if isinstance(s, dict) and s.get("project"))
    if not chosen:
        return DEFAULT_PROJECT, None
    return chosen.most_common(1)[0][0]


def scatter_rows(agg: Aggregate) -> list[list[Any]]:
    """One row per counted run: name, cell, data set, model, seed, minimum early-layer MAD, top-1 in percent, and
    the settings that set its group apart from the cell's others (`start=weights <hash>`, `optim.lr=0.01`; '' for
    none), so a run started from a checkpoint never reads as a seed of the cell trained from scratch."""
    rows = []
    for key, group in sorted(agg.groups.items(), key=lambda item: (item[0].data, item[0].model, item[0].cell)):
        for run in group.runs:
            headline = run.headline()
            row = [run.run_dir.name, key.cell, key.data, key.model, run.seed, headline.min_mad, headline.acc1 * 100]
            rows.append([*row, key.variant])
    return rows


def layer_curves(agg: Aggregate, data: str, model: str) -> tuple[list[int], list[list[float]], list[str]]:
    """Per cell, the final model's minimum MAD over the heads of each layer, averaged over seeds: (layers, one
    curve per cell, cell names). Runs without a usable per-layer table are left out (the figures note them)."""
    curves, names, depth = [], [], None
    for name, group in agg.cells(data, model).items():
        tables = [table for run in group.runs if (table := layer_table(run, []))]
        if not tables:
            continue
        layers = min(len(table) for table in tables)
        depth = layers if depth is None else min(depth, layers)
        curves.append([summarise(table[layer]["mad_min"] for table in tables).mean for layer in range(layers)])
        names.append(name)
    depth = depth or 0
    return list(range(depth)), [curve[:depth] for curve in curves], names


def read_picture(path: Path, notes: list[str]) -> Any:
    """A figure as a PIL image for W&B, its bytes read through the bounded reader of run files (W&B itself would
    open whatever lies at the path); None, with the one `skipped` line in `notes`, when it is not a regular file."""
    from PIL import Image

    try:
        data = read_regular_file(path, PICTURE_SIZE_LIMIT)
    except UnreadableFile as error:
        notes.append(error.skipped("not published to W&B"))
        return None
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def publish(agg: Aggregate, tables: list[Table], pictures: list[Path], sweep_dirs: list[Path], out: Path) -> Path:
    """Log the report into one new W&B run of the sweep's project; returns the run's local directory."""
    quiet_wandb()
    import wandb

    out.mkdir(parents=True, exist_ok=True)
    project, entity = sweep_project(agg)
    names = "+".join(sorted({Path(d).resolve().name for d in sweep_dirs}))
    run = wandb.init(
        project=project,
        entity=entity,
        name=f"report-{names}",
        job_type="report",
        group="reports",
        tags=["report", *(f"sweep:{Path(d).resolve().name}" for d in sweep_dirs)],
        config={
            "sweep_dirs": [str(Path(d).resolve()) for d in sweep_dirs],
            "runs": sum(len(group.runs) for group in agg.groups.values()),
            "data_models": [f"{data}/{model}" for data, model in agg.models()],
        },
        dir=str(out),
        mode=resolve_mode("auto"),
    )
    where = Path(run.dir).parent
    try:
        logged: dict[str, Any] = {}
        for part in (part for table in tables for part in (table, *table.parts)):
            logged[f"tables/{part.stem}"] = wandb.Table(columns=part.headers, data=part.rows)
        for path in pictures:
            picture = read_picture(path, agg.notes)
            if picture is not None:
                logged[f"figures/{path.stem}"] = wandb.Image(picture, caption=path.stem)
        columns = ["run", "cell", "data", "model", "seed", "min_mad_early", "top1_percent", "settings"]
        runs = wandb.Table(columns=columns, data=scatter_rows(agg))
        logged["runs/all"] = runs
        logged[SCATTER_KEY] = wandb.plot.scatter(
            runs, "min_mad_early", "top1_percent", title="minimum early-layer MAD vs top-1 (%), every run"
        )
        for data, model in agg.models():
            layers, curves, cells = layer_curves(agg, data, model)
            if curves:
                logged[f"layers/min_mad_{data}_{model}"] = wandb.plot.line_series(
                    xs=layers, ys=curves, keys=cells, title=f"{data}, {model}: minimum MAD per layer", xname="layer"
                )
        run.log(logged)
    finally:
        run.finish()
    return where
