"""The paper's two tables (protocols, ablation) built from aggregated runs, as Markdown, CSV and LaTeX
(`table_format.Table`). A missing cell or figure is shown as "-" and left empty in the CSV.

Each of the paper's claims is stated beside the paper's figure, the measured one and a verdict, judged on every
run and on the cells' means (the rules: `claims`): claim (b) in the protocols table, (a), (c) and (d) in the
part "Paper's claims checked" under each ablation table (`claims_table`); under it the main effects, and each
cell against Baseline with an interval over seeds (`contrasts`).
"""

from __future__ import annotations

import math
from typing import Any

from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.aggregate import LEVELS, Aggregate, Group, Stat
from vit_locality.report.claims import PAPER_MIN_MAD, more_local
from vit_locality.report.claims_table import LEVEL_NAMES, claims_table
from vit_locality.report.contrasts import contrasts_table
from vit_locality.report.factorial import main_effects
from vit_locality.report.run_settings import UNSET, run_settings, slug
from vit_locality.report.table_format import DIGITS, MISSING, SHOWN_SCALE, Table, figure_label, format_figure
from vit_locality.run.record import HEADLINE_NAMES

INTERVAL_NOTE = (
    "each effect is a contrast of cell means (every cell weighs 1/4, whatever its seeds); 95% intervals: paired t"
    " by seed when every seed ran all 8 cells, else Welch from the cells' variances (vit_locality/report/factorial.py)"
)


def protocols_table(agg: Aggregate) -> Table:
    """Rows = (data set, model); Baseline and Modern side by side for each figure, and the paper's reference."""
    headers = ["data", "model"]
    for figure in HEADLINE_NAMES:
        headers += [f"{figure_label(figure)} Baseline", f"{figure_label(figure)} Modern"]
    headers += [f"Modern more local ({LEVEL_NAMES[per]})" for per in LEVELS]
    headers += ["paper min MAD (Baseline -> Modern)"]
    rows, records = [], []
    for data, model in agg.models():
        cells = agg.cells(data, model)
        row, record = [data, model], {"data": data, "model": model}
        for figure in HEADLINE_NAMES:
            for name in ("Baseline", "Modern"):
                stat = _stat(cells.get(name), figure)
                row.append(format_figure(stat, figure))
                record.update(_stat_record(f"{name.lower()}_{figure}", stat))
        for per in LEVELS:
            judgement = more_local(cells, per)
            row.append(judgement.verdict)
            record[f"modern_more_local_{per}"] = judgement.verdict
        paper = PAPER_MIN_MAD.get(data)
        row.append(f"{paper[0]:.3f} -> {paper[1]:.3f}" if paper else MISSING)
        record["paper_min_mad_baseline"], record["paper_min_mad_modern"] = paper if paper else (math.nan, math.nan)
        rows.append(row)
        records.append(record)
    notes = [
        "mean ± sample std (number of seeds) where several seeds ran; top-1 test accuracy in percent"
        " (a fraction in the CSV)",
        "paper (CIFAR-100): minimum early-layer MAD 0.316 under Baseline, 0.008 under Modern",
        "Modern more local (claim b): per run, every Modern run below every Baseline run in min MAD; per cell mean,"
        " the Modern mean below the Baseline mean; not enough runs without both cells",
    ]
    return Table("protocols", "Baseline vs Modern protocol", headers, rows, records, notes)


def ablation_table(agg: Aggregate, data: str, model: str) -> Table:
    """The 8 cells in the paper's order, their accuracy gap to Baseline, and the claims checked on them.

    A cell whose runs differ in a setting has one row per combination (the cell's counted group first, the one
    the claims and effects read), with a column for each setting that differs."""
    cells = agg.cells(data, model)
    variants = agg.variants(data, model)
    setting_keys = sorted({key for groups in variants.values() for g in groups for key, _ in g.key.settings})
    baseline_acc = _stat(cells.get("Baseline"), "acc1").mean
    headers = ["cell", "AA", "CM", "LS", "runs", "top-1 (%)", "Δ top-1 vs Baseline", "min MAD", "entropy"]
    headers += setting_keys
    rows, records = [], []
    rows_of = [(cell, group) for cell in CELL_ORDER for group in variants.get(cell) or [None]]
    for name, group in rows_of:
        aa, cm, ls_on = CELL_FLAGS[name]
        ls = "/".join(f"{v:g}" for v in group.ls_values) if group else ("on" if ls_on else "0")
        stats = {figure: _stat(group, figure) for figure in HEADLINE_NAMES}
        delta = stats["acc1"].mean - baseline_acc
        rows.append(
            [
                name,
                str(int(aa)),
                str(int(cm)),
                ls,
                str(len(group.runs)) if group else MISSING,
                format_figure(stats["acc1"], "acc1"),
                MISSING if math.isnan(delta) else f"{100 * delta:+.2f}",
                format_figure(stats["min_mad"], "min_mad"),
                format_figure(stats["entropy"], "entropy"),
                *(group_setting(group, key) for key in setting_keys),
            ]
        )
        record: dict[str, Any] = {"cell": name, "AA": int(aa), "CM": int(cm)}
        record["LS"] = group.ls_values[0] if group and len(group.ls_values) == 1 else math.nan
        record["runs"] = len(group.runs) if group else 0
        for figure, stat in stats.items():
            record.update(_stat_record(figure, stat))
        record["acc1_diff_baseline"] = delta
        record.update({key: group_setting(group, key) for key in setting_keys})
        records.append(record)
    notes = [
        f"{group.key.cell} [{group.key.variant}]: its own row, left out of the claims and effects"
        for group in agg.left_out(data, model)
    ]
    stem = slug(f"ablation_{data}_{model}")
    claims = claims_table(cells, data, model, f"{stem}_claims")
    effects = effects_table(cells, f"{stem}_effects")
    against = contrasts_table(agg, data, model, f"{stem}_contrasts")
    title = f"8-cell ablation: {data}, {model}"
    return Table(stem, title, headers, rows, records, notes, [claims, effects, against])


def group_setting(group: Group | None, key: str) -> str:
    """A setting's value in one group's row: the value that splits it off, else the value all its runs share."""
    if group is None:
        return MISSING
    split = dict(group.key.settings)
    if key in split:
        return split[key]
    values = {run_settings(run).get(key, UNSET) for run in group.runs if run.config is not None}
    return values.pop() if len(values) == 1 else MISSING


def ablation_tables(agg: Aggregate) -> list[Table]:
    return [ablation_table(agg, data, model) for data, model in agg.models()]


def effects_table(cells: dict[str, Group], stem: str) -> Table:
    """Main effect of each factor on min MAD and on accuracy (points), with its 95% interval over seeds."""
    headers = ["factor", "figure", "main effect", "95% interval", "interval method", "n"]
    rows, records = [], []
    for figure in ("min_mad", "acc1"):
        digits = DIGITS[figure] + 1
        for effect in main_effects(cells, figure):
            scale = SHOWN_SCALE[figure]
            low, high, value = scale * effect.low, scale * effect.high, scale * effect.estimate
            interval = f"[{low:+.{digits}f}, {high:+.{digits}f}]" if math.isfinite(effect.low) else "n/a"
            estimate = MISSING if math.isnan(value) else f"{value:+.{digits}f}"
            rows.append([effect.factor, figure_label(figure), estimate, interval, effect.method, str(effect.n)])
            records.append(
                {
                    "factor": effect.factor,
                    "figure": figure,
                    "estimate": effect.estimate,
                    "low": effect.low,
                    "high": effect.high,
                    "df": effect.df,
                    "n": effect.n,
                    "method": effect.method,
                }
            )
    title = (
        "Main effects (mean of the 4 cell means with the factor on minus the 4 with it off; accuracy in points;"
        " a fraction in the CSV)"
    )
    return Table(stem, title, headers, rows, records, [INTERVAL_NOTE])


def _stat(group: Group | None, figure: str) -> Stat:
    return group.stat(figure) if group else Stat(math.nan, math.nan, 0)


def _stat_record(prefix: str, stat: Stat) -> dict[str, Any]:
    return {f"{prefix}_mean": stat.mean, f"{prefix}_std": stat.std, f"{prefix}_n": stat.n}
