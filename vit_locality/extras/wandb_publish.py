"""`python -m vit_locality.report ... --wandb`: the report as one W&B run beside the sweep's training runs."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

from vit_locality.report.load.aggregate import Aggregate, summarise
from vit_locality.report.render.figures import layer_table
from vit_locality.report.render.table_format import Table
from vit_locality.store.file_read import PICTURE_SIZE_LIMIT, UnreadableFile, read_regular_file
from vit_locality.tracking.wandb_mode import quiet_wandb, resolve_mode

DEFAULT_PROJECT = "vit-locality"
SCATTER_KEY = "runs/min_mad_vs_top1"


def sweep_project(agg: Aggregate) -> tuple[str, str | None]:
    """The W&B project and entity most of the runs were logged to; the default project when none used W&B."""
    settings = [
        (run.config or {}).get("logger", {}).get("wandb") or {} for group in agg.groups.values() for run in group.runs
    ]
    chosen = Counter((s.get("project"), s.get("entity")) for s in settings if isinstance(s, dict) and s.get("project"))
    return chosen.most_common(1)[0][0] if chosen else (DEFAULT_PROJECT, None)


def scatter_rows(agg: Aggregate) -> list[list[Any]]:
    """One row per run: name, cell, data set, model, seed, min MAD, top-1 in percent, and its group's settings."""
    rows = []
    for key, group in sorted(agg.groups.items(), key=lambda item: (item[0].data, item[0].model, item[0].cell)):
        for run in group.runs:
            headline = run.headline()
            row = [run.run_dir.name, key.cell, key.data, key.model, run.seed, headline.min_mad, headline.acc1 * 100]
            rows.append([*row, key.variant])
    return rows


def layer_curves(agg: Aggregate, data: str, model: str) -> tuple[list[int], list[list[float]], list[str]]:
    """(layers, per cell the minimum head MAD of each layer averaged over seeds, cell names)."""
    curves, names = [], []
    for name, group in agg.cells(data, model).items():
        tables = [table for run in group.runs if (table := layer_table(run, []))]
        if tables:
            layers = range(min(len(table) for table in tables))
            curves.append([summarise(table[layer]["mad_min"] for table in tables).mean for layer in layers])
            names.append(name)
    depth = min((len(curve) for curve in curves), default=0)
    return list(range(depth)), [curve[:depth] for curve in curves], names


def read_picture(path: Path, notes: list[str]) -> Any:
    """A figure as a PIL image for W&B, read through the bounded reader; None, noted, when it is no regular file."""
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
    resolved = [Path(d).resolve() for d in sweep_dirs]
    config = {"sweep_dirs": [str(d) for d in resolved], "runs": sum(len(g.runs) for g in agg.groups.values())}
    config["data_models"] = [f"{data}/{model}" for data, model in agg.models()]
    init = {"project": project, "entity": entity, "job_type": "report", "group": "reports", "dir": str(out)}
    name, tags = "report-" + "+".join(sorted({d.name for d in resolved})), [f"sweep:{d.name}" for d in resolved]
    run = wandb.init(name=name, tags=["report", *tags], config=config, mode=resolve_mode("auto"), **init)
    where = Path(run.dir).parent
    try:
        logged: dict[str, Any] = {}
        for part in (part for table in tables for part in (table, *table.parts)):
            logged[f"tables/{part.stem}"] = wandb.Table(columns=part.headers, data=part.rows)
        for path in pictures:
            if (picture := read_picture(path, agg.notes)) is not None:
                logged[f"figures/{path.stem}"] = wandb.Image(picture, caption=path.stem)
        columns = ["run", "cell", "data", "model", "seed", "min_mad_early", "top1_percent", "settings"]
        logged["runs/all"] = runs = wandb.Table(columns=columns, data=scatter_rows(agg))
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
