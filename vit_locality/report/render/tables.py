"""The paper's two tables, protocols and ablation (with its claims, main effects and contrasts), from runs."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict
from typing import Any

from vit_locality.attention.units import MIN_HEAD_KEYS, min_head_control, recorded_band, surround_reading
from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.load.aggregate import LEVELS, UNITS_NOTE, Aggregate, Group, Stat, summarise
from vit_locality.report.load.run_settings import UNSET, run_settings, slug
from vit_locality.report.render.table_format import MISSING, Table, figure_label, format_difference, format_figure
from vit_locality.report.stats.claim_units import DIAGONAL, GRID_SIDE, conversion_notes
from vit_locality.report.stats.claims import (
    NOT_INFORMATIVE,
    ONE_SEED,
    PAPER_MIN_MAD,
    ablation_claims,
    measured,
    more_local,
    more_local_shown,
    shown_verdict,
)
from vit_locality.report.stats.effects import LEVEL, contrasts, main_effects
from vit_locality.store.record import HEADLINE_NAMES

LEVEL_NAMES = {"run": "per run", "mean": "per cell mean"}
CLAIM_NOTES = (
    "per run: every run stands for its cell (the highest CutMix run, the lowest other run, the lowest gain of a"
    " cell's run over a Baseline run); per cell mean: each cell's mean does; with one run per cell the two agree",
    "(a) the paper's bounds hold when both bound rows hold; the separation compares the highest CutMix value with"
    " the lowest value without CutMix",
    "a value is compared with a printed bound at the bound's printed precision, one rule in every convention: read"
    " to 6 significant digits (what a float32 keeps), then rounded half up: 0.210 holds for anything that rounds to"
    " 0.210 or above (0.2097 and 0.2095 hold, 0.2094 fails; 0.0245 is above 0.024); gains at two decimals of a point",
    "(c) the gain over Baseline in points must be at least 5 (the paper: about 6-7); per run the lowest run of the"
    " cell minus the highest Baseline run",
    "each verdict says how many seeds (runs per cell) it rests on: '1 seed' is one run's anecdote, not an effect;"
    " a fixed bound is judged on any number of seeds",
    f"{ONE_SEED}: a comparison of measured cells (the separation) with one run in a cell, which gives no spread;"
    f" {NOT_INFORMATIVE}: a run the claim reads has every early head within 0.01 of uniform attention's MAD on its"
    " grid (named), so whichever way the figure goes it says nothing about the trained ViT the claim is about",
    "(d) an equivalence test on cell means (two one-sided Welch t-tests at 5%): holds when the 90% interval of the"
    " cell's mean minus Baseline's lies inside +-margin, margin = max(0.02, 2 x Baseline's seed std); undetermined"
    " with fewer than 2 runs in Baseline, the cell or +CM, or when CutMix's own shift is not significant or within"
    " the margin; one test, shown in both columns",
    "min MAD in the paper's convention: unit square, renormalised, first 2 layers (other early layers re-read per"
    " layer from each record); not comparable when a run cannot be (raw weights), with the reason",
    "the measured columns divide distances by the image side (ours, 'grid side'); the diagonal columns by the image"
    " diagonal (values / sqrt 2), since the paper does not say which; 'differ' flags a verdict that depends on it;"
    " claim (d)'s margin, floor included, is / sqrt 2 with them, so its verdict never differs",
    "not enough runs: a cell the claim needs has no run with that figure (missing: the cells)",
)
MIN_HEAD_HEADERS = ["min head: control MAD", "min head: surround pref"]
BAND_HEADERS = ["noise band", "min head reads"]
MIN_HEAD_NOTE = (
    "min head: the early head with the minimum MAD; its control MAD is the MAD it would have if every query used its"
    " query-averaged weights, surround pref = control - MAD; left out for runs recorded before the control existed."
    " About 0: the head's MAD is its query-averaged pattern's, fixed patches or query-dependent attention without a"
    " spatial bias (row, object or content heads) alike; positive: it looks nearer each query than that pattern,"
    " which is not yet 3 x 3 locality (row or object heads score high too)"
)
BAND_NOTE = (
    "noise band: the largest |surround pref| of any head of the run's model at initialisation (4 fixed init seeds,"
    " the run's probe images), the largest over the cell's runs; min head reads 'surround preference' only where"
    " surround pref is above its run's band, 'none measured' at or below it (per run, counted where runs differ);"
    " 'band not recorded' for runs recorded before the band was measured"
)
PAPER_LS = 0.1  # the paper's label smoothing where a cell has it on: what a cell without runs shows
INTERVAL_NOTE = (
    "each effect is a contrast of cell means (every cell weighs 1/4, whatever its seeds); 95% intervals: paired t"
    " by seed when every seed ran all 8 cells, else Welch from the cells' variances"
    " (vit_locality/report/stats/effects.py)"
)


def protocols_table(agg: Aggregate) -> Table:
    """Rows = (data set, model); Baseline and Modern side by side for each figure, and the paper's reference."""
    sides = [f"{figure_label(figure)} {name}" for figure in HEADLINE_NAMES for name in ("Baseline", "Modern")]
    headers = ["data", "model", *sides]
    headers += [f"Modern more local ({LEVEL_NAMES[per]})" for per in LEVELS] + ["paper min MAD (Baseline -> Modern)"]
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
            row.append(more_local_shown(cells, per))
            record[f"modern_more_local_{per}"] = more_local(cells, per).verdict
            record[f"modern_more_local_{per}_diagonal"] = more_local(cells, per, DIAGONAL).verdict
        paper = PAPER_MIN_MAD.get(data)
        row.append(f"{paper[0]:.3f} -> {paper[1]:.3f}" if paper else MISSING)
        record["paper_min_mad_baseline"], record["paper_min_mad_modern"] = paper if paper else (math.nan, math.nan)
        rows.append(row)
        records.append(record)
    notes = [
        "mean ± sample std (number of seeds) where several seeds ran; top-1 test accuracy in percent"
        " (a fraction in the CSV)",
        "paper (CIFAR-100): minimum early-layer MAD 0.316 under Baseline, 0.008 under Modern",
        "Modern more local (claim b): the paper's magnitudes and the direction; per run, every Baseline run at or"
        " above 0.210, every Modern run at or below 0.024 and every Modern run below every Baseline run in min MAD"
        " (paper's convention, bounds at their printed precision); per cell mean, the same on the two means; the two"
        " bounds are judged on any number of seeds and a failed one fails the claim (named in brackets); only the"
        " comparison waits: one seed: no verdict with one run in either cell; not informative while attention is"
        " still uniform, whichever way it would go; not enough runs without both cells; each verdict with the seeds"
        " it rests on; the diagonal's verdict is added where it differs",
        UNITS_NOTE,
    ]
    return Table("protocols", "Baseline vs Modern protocol", headers, rows, records, notes)


def ablation_table(agg: Aggregate, data: str, model: str) -> Table:
    """The 8 cells in the paper's order (a row per setting where runs differ), with claims, effects and contrasts."""
    cells = agg.cells(data, model)
    variants = agg.variants(data, model)
    setting_keys = sorted({key for groups in variants.values() for g in groups for key, _ in g.key.settings})
    baseline_acc = _stat(cells.get("Baseline"), "acc1").mean
    headers = ["cell", "AA", "CM", "LS", "runs", "top-1 (%)", "Δ top-1 vs Baseline", "min MAD", "entropy"]
    headers += MIN_HEAD_HEADERS + BAND_HEADERS + setting_keys
    rows, records = [], []
    for name, group in [(cell, group) for cell in CELL_ORDER for group in variants.get(cell) or [None]]:
        aa, cm, ls_on = CELL_FLAGS[name]
        ls = "/".join(f"{v:g}" for v in group.ls_values) if group else (f"{PAPER_LS:g}" if ls_on else "0")
        stats = {figure: _stat(group, figure) for figure in HEADLINE_NAMES}
        min_head = {f"min_head_{key}": min_head_stat(group, key) for key in MIN_HEAD_KEYS}
        band, reading = noise_band_reading(group)
        delta = stats["acc1"].mean - baseline_acc
        settings = {key: group_setting(group, key) for key in setting_keys}
        acc, mad, entropy = (format_figure(stat, figure) for figure, stat in stats.items())
        row = [name, str(int(aa)), str(int(cm)), ls, str(len(group.runs)) if group else MISSING, acc]
        row += [MISSING if math.isnan(delta) else f"{100 * delta:+.2f}", mad, entropy]
        row += [format_figure(stat, "min_mad") for stat in min_head.values()]
        rows.append([*row, MISSING if math.isnan(band) else f"{band:.4f}", reading, *settings.values()])
        record: dict[str, Any] = {"cell": name, "AA": int(aa), "CM": int(cm)}
        record["LS"] = group.ls_values[0] if group and len(group.ls_values) == 1 else math.nan
        record["runs"] = len(group.runs) if group else 0
        for prefix, stat in {**stats, **min_head}.items():
            record.update(_stat_record(prefix, stat))
        record.update({"surround_pref_band": band, "min_head_reads": reading, "acc1_diff_baseline": delta})
        records.append(record | settings)
    notes = [
        f"{group.key.cell} [{group.key.variant}]: its own row, left out of the claims and effects"
        for group in agg.left_out(data, model)
    ]
    notes.append(f"{UNITS_NOTE}; the claims, main effects and contrasts below read the same values")
    notes += [MIN_HEAD_NOTE, BAND_NOTE]
    stem = slug(f"ablation_{data}_{model}")
    claims = claims_table(cells, data, model, f"{stem}_claims")
    effects = effects_table(cells, f"{stem}_effects")
    against = contrasts_table(agg, data, model, f"{stem}_contrasts")
    title = f"8-cell ablation: {data}, {model}"
    return Table(stem, title, headers, rows, records, notes, [claims, effects, against])


def min_head_stat(group: Group | None, key: str) -> Stat:
    """`key` (mad_control or surround_pref) of each run's minimum-MAD early head, over the runs that record it."""
    found = [min_head_control(run.final_attention) for run in group.runs] if group else []
    return summarise(values[key] for values in found if values is not None)


def noise_band_reading(group: Group | None) -> tuple[float, str]:
    """(the largest recorded noise band of the group's runs or NaN, how their minimum heads read against it)."""
    runs = group.runs if group else []
    controls = [(min_head_control(run.final_attention), recorded_band(run.data)) for run in runs]
    found = [(control["surround_pref"], band) for control, band in controls if control is not None]
    bands = [band for _, band in found if band is not None]
    readings = Counter(surround_reading(pref, band) for pref, band in found)
    band = max(bands) if bands else math.nan
    if len(readings) <= 1:
        return band, next(iter(readings), MISSING)
    return band, "; ".join(f"{r} ({n} of {len(found)} runs)" for r, n in sorted(readings.items()))


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
        for effect in main_effects(cells, figure):
            estimate, interval = format_difference(figure, effect.estimate, effect.low, effect.high)
            rows.append([effect.factor, figure_label(figure), estimate, interval, effect.method, str(effect.n)])
            records.append(asdict(effect))
    title = (
        "Main effects (mean of the 4 cell means with the factor on minus the 4 with it off; accuracy in points;"
        " a fraction in the CSV)"
    )
    return Table(stem, title, headers, rows, records, [INTERVAL_NOTE])


def _stat(group: Group | None, figure: str) -> Stat:
    return group.stat(figure) if group else Stat(math.nan, math.nan, 0)


def _stat_record(prefix: str, stat: Stat) -> dict[str, Any]:
    return {f"{prefix}_mean": stat.mean, f"{prefix}_std": stat.std, f"{prefix}_n": stat.n}


def contrasts_table(agg: Aggregate, data: str, model: str, stem: str) -> Table:
    headers = ["cell", "figure", "runs (cell / Baseline)", "difference", f"{LEVEL:.0%} interval", "verdict"]
    rows, records = [], []
    for item in contrasts(agg, data, model):
        shown, interval = format_difference(item.figure, item.difference, item.low, item.high)
        runs = f"{item.runs} / {item.baseline_runs}"
        rows.append([item.cell, figure_label(item.figure), runs, shown, interval, item.verdict])
        records.append(asdict(item))
    title = "Each cell against Baseline (mean difference, Welch interval over seeds; accuracy in points)"
    cells = agg.cells(data, model)
    empty = "(no Baseline cell in this sweep)" if "Baseline" not in cells else "(no cell besides Baseline)"
    notes = [
        "lower / higher: the 95% interval of the cell's mean minus Baseline's excludes 0; n/a: fewer than 2 runs in"
        " the cell or in Baseline (one seed gives no spread); cells beyond the paper's 8 (e.g. Baseline+MU) are"
        " compared here only",
        UNITS_NOTE,
    ]
    return Table(stem, title, headers, rows, records, notes, empty=empty)


def claims_table(cells: dict[str, Group], data: str, model: str, stem: str) -> Table:
    """Claims (a), (c), (d) on one (data set, model): paper, measured and verdict per level and convention."""
    headers = ["claim", "paper (CIFAR-100)"]
    for per in LEVELS:
        headers += [f"measured {LEVEL_NAMES[per]}", LEVEL_NAMES[per]]
    headers += [f"diagonal, {LEVEL_NAMES[per]}" for per in LEVELS] + ["conventions"]
    rows, records = [], []
    for claim in ablation_claims(cells):
        row = [claim.statement, claim.paper]
        record: dict[str, Any] = {"claim": claim.key, "statement": claim.statement, "paper": claim.paper}
        for per in LEVELS:
            judgement = claim.judgements[GRID_SIDE, per]
            row += [measured(claim, judgement), shown_verdict(judgement)]
            record |= {f"{per}_{key}": getattr(judgement, key) for key in ("value", "bound", "verdict", "reason")}
            record[f"{per}_seeds"] = "-".join(str(n) for n in sorted(set(judgement.seeds)))
        for per in LEVELS:
            diagonal = claim.judgements[DIAGONAL, per]
            row.append(f"{shown_verdict(diagonal)}: {measured(claim, diagonal)}")
            record |= {f"{per}_diagonal_{key}": getattr(diagonal, key) for key in ("value", "bound", "verdict")}
        differ = claim.disagreements
        row.append(f"differ ({', '.join(LEVEL_NAMES[per] for per in differ)})" if differ else "agree")
        record["conventions"] = "differ: " + ", ".join(differ) if differ else "agree"
        rows.append(row)
        records.append(record)
    title = f"Paper's claims checked: {data}, {model} (the paper's figures are CIFAR-100's)"
    notes = [*CLAIM_NOTES, *conversion_notes((name, run) for name, group in cells.items() for run in group.runs)]
    return Table(stem, title, headers, rows, records, notes)
