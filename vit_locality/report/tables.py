"""The paper's two tables (protocols, ablation) built from aggregated runs, as Markdown, CSV and LaTeX.

One table object holds both the display strings (Markdown, LaTeX) and the plain numbers (CSV), so the three
files always say the same thing. A missing cell or figure is shown as "-" and left empty in the CSV.

Each of the paper's claims is stated beside the paper's figure, the measured one and a verdict, judged on every
run and on the cells' means (the rules: `claims`): claim (b) in the protocols table, (a), (c) and (d) in the
part "Paper's claims checked" under each ablation table.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vit_locality.catalog import CELL_FLAGS, CELL_ORDER
from vit_locality.report.aggregate import LEVELS, Aggregate, Group, Stat
from vit_locality.report.claim_units import DIAGONAL, conversion_notes
from vit_locality.report.claims import (
    NOT_COMPARABLE,
    NOT_ENOUGH,
    PAPER_MIN_MAD,
    UNDETERMINED,
    Claim,
    Judgement,
    ablation_claims,
    more_local,
)
from vit_locality.report.factorial import main_effects
from vit_locality.report.run_settings import UNSET, run_settings, slug
from vit_locality.report.summary import format_table
from vit_locality.run.record import HEADLINE_NAMES

INTERVAL_NOTE = (
    "each effect is a contrast of cell means (every cell weighs 1/4, whatever its seeds); 95% intervals: paired t"
    " by seed when every seed ran all 8 cells, else Welch from the cells' variances (vit_locality/report/factorial.py)"
)
LEVEL_NAMES = {"run": "per run", "mean": "per cell mean"}
CLAIM_NOTES = (
    "per run: every run stands for its cell (the highest CutMix run, the lowest other run, the lowest gain of a"
    " cell's run over a Baseline run); per cell mean: each cell's mean does; with one run per cell the two agree",
    "(a) the paper's bounds hold when both bound rows hold; the separation compares the highest CutMix value with"
    " the lowest value without CutMix",
    "(c) the gain over Baseline in points must be at least 5 (the paper: about 6-7); per run the lowest run of the"
    " cell minus the highest Baseline run",
    "(d) an equivalence test on cell means (two one-sided Welch t-tests at 5%): holds when the 90% interval of the"
    " cell's mean minus Baseline's lies inside +-margin, margin = max(0.02, 2 x Baseline's seed std); undetermined"
    " with fewer than 2 runs in Baseline, the cell or +CM, or when CutMix's own shift is not significant or within"
    " the margin; one test, shown in both columns",
    "min MAD in the paper's convention: unit square, renormalised, first 2 layers, converted exactly from each"
    " record's stats settings (pixels / image size, grid / grid side, diagonal x sqrt 2, other early layers re-read"
    " per layer); not comparable when a run cannot be (raw weights, no patch size for pixels), with the reason",
    "the measured columns divide distances by the image side (ours, 'grid side'); the diagonal columns by the image"
    " diagonal (values / sqrt 2), since the paper does not say which; 'differ' flags a verdict that depends on it",
    "not enough runs: a cell the claim needs has no run with that figure (missing: the cells)",
)
DIGITS = {"acc1": 2, "min_mad": 3, "entropy": 3}
# Printed tables show accuracy in percent, the paper's unit; the CSVs keep the record's fraction.
SHOWN_SCALE = {"acc1": 100.0, "min_mad": 1.0, "entropy": 1.0}
MISSING = "-"


@dataclass
class Table:
    stem: str  # file name without extension
    title: str
    headers: list[str]
    rows: list[list[str]]  # what is shown
    records: list[dict[str, Any]]  # the same rows as numbers, for the CSV
    notes: list[str] = field(default_factory=list)  # lines under the table
    parts: list[Table] = field(default_factory=list)  # further tables shown under it, each with its own CSV

    def markdown(self) -> str:
        body = format_table([dict(zip(self.headers, row, strict=True)) for row in self.rows])
        text = [f"### {self.title}", "", body]
        if self.notes:
            text += ["", *(f"- {note}" for note in self.notes)]
        for part in self.parts:
            text += ["", part.markdown()]
        return "\n".join(text)

    def latex(self) -> str:
        lines = [
            "% needs \\usepackage{booktabs}",
            "\\begin{table}[t]",
            "\\centering",
            f"\\caption{{{latex_escape(self.title)}}}",
            f"\\begin{{tabular}}{{{'l' * len(self.headers)}}}",
            "\\toprule",
            " & ".join(latex_escape(h) for h in self.headers) + " \\\\",
            "\\midrule",
            *(" & ".join(latex_escape(c) for c in row) + " \\\\" for row in self.rows),
            "\\bottomrule",
            "\\end{tabular}",
            "\\end{table}",
        ]
        if self.notes:
            lines += ["\\begin{itemize}", *(f"\\item {latex_escape(n)}" for n in self.notes), "\\end{itemize}"]
        for part in self.parts:
            lines += ["", part.latex()]
        return "\n".join(lines)

    def write(self, out_dir: Path) -> list[Path]:
        """<stem>.md, <stem>.tex and <stem>.csv, plus one CSV per part; returns the paths written."""
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / f"{self.stem}.md", out_dir / f"{self.stem}.tex"]
        paths[0].write_text(self.markdown() + "\n")
        paths[1].write_text(self.latex() + "\n")
        for table in (self, *self.parts):
            path = out_dir / f"{table.stem}.csv"
            with path.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(table.records[0]) if table.records else [])
                writer.writeheader()
                writer.writerows({k: _csv_value(v) for k, v in rec.items()} for rec in table.records)
            paths.append(path)
        return paths


def protocols_table(agg: Aggregate) -> Table:
    """Rows = (data set, model); Baseline and Modern side by side for each figure, and the paper's reference."""
    headers = ["data", "model"]
    for figure in HEADLINE_NAMES:
        headers += [f"{_short(figure)} Baseline", f"{_short(figure)} Modern"]
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
    title = f"8-cell ablation: {data}, {model}"
    return Table(stem, title, headers, rows, records, notes, [claims, effects])


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
            rows.append([effect.factor, _short(figure), estimate, interval, effect.method, str(effect.n)])
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


def claims_table(cells: dict[str, Group], data: str, model: str, stem: str) -> Table:
    """The paper's claims (a), (c), (d) on one (data set, model): the paper's figure, the measured one and the
    verdict, per run and per cell mean, with distances over the image side and over its diagonal. The CSV keeps
    the compared numbers (accuracy as a fraction)."""
    headers = ["claim", "paper (CIFAR-100)"]
    for per in LEVELS:
        headers += [f"measured {LEVEL_NAMES[per]}", LEVEL_NAMES[per]]
    headers += [f"diagonal, {LEVEL_NAMES[per]}" for per in LEVELS] + ["conventions"]
    rows, records = [], []
    for claim in ablation_claims(cells):
        row = [claim.statement, claim.paper]
        record: dict[str, Any] = {"claim": claim.key, "statement": claim.statement, "paper": claim.paper}
        for per, judgement in zip(LEVELS, (claim.per_run, claim.per_mean), strict=True):
            row += [measured(claim, judgement), judgement.verdict]
            record.update({f"{per}_value": judgement.value, f"{per}_bound": judgement.bound})
            record[f"{per}_verdict"] = judgement.verdict
            record[f"{per}_reason"] = judgement.reason
        for per in LEVELS:
            diagonal = claim.judgement(DIAGONAL, per)
            row.append(f"{diagonal.verdict}: {measured(claim, diagonal)}")
            record.update({f"{per}_diagonal_value": diagonal.value, f"{per}_diagonal_bound": diagonal.bound})
            record[f"{per}_diagonal_verdict"] = diagonal.verdict
        differ = claim.disagreements
        row.append(f"differ ({', '.join(LEVEL_NAMES[per] for per in differ)})" if differ else "agree")
        record["conventions"] = "differ: " + ", ".join(differ) if differ else "agree"
        rows.append(row)
        records.append(record)
    title = f"Paper's claims checked: {data}, {model} (the paper's figures are CIFAR-100's)"
    notes = [*CLAIM_NOTES, *conversion_notes((name, run) for name, group in cells.items() for run in group.runs)]
    return Table(stem, title, headers, rows, records, notes)


def measured(claim: Claim, judgement: Judgement) -> str:
    """The figure a verdict was reached on, as printed: min MAD in the paper's convention, a top-1 gain in points;
    the reason where a claim could not be judged."""
    if judgement.verdict == NOT_ENOUGH:
        return f"missing {', '.join(judgement.missing)}"
    if judgement.verdict == NOT_COMPARABLE:
        return judgement.reason
    digits = DIGITS[claim.figure]
    value, bound = SHOWN_SCALE[claim.figure] * judgement.value, SHOWN_SCALE[claim.figure] * judgement.bound
    if claim.style == "gain":
        return f"{value:+.{digits}f}"
    if claim.style == "equivalence":
        if math.isnan(value):
            return judgement.reason
        low, high = judgement.interval
        shown = f"{value:+.{digits}f}, 90% [{low:+.{digits}f}, {high:+.{digits}f}] (margin {bound:.{digits}f})"
        return f"{shown}; {judgement.reason}" if judgement.verdict == UNDETERMINED else shown
    shown = f"{value:.{digits}f} ({judgement.value_cell})"
    return f"{shown} vs {bound:.{digits}f} ({judgement.bound_cell})" if claim.style == "versus" else shown


def format_figure(stat: Stat, figure: str) -> str:
    """A headline figure as printed: accuracy in percent, the others as recorded."""
    scale = SHOWN_SCALE[figure]
    return format_stat(Stat(scale * stat.mean, scale * stat.std, stat.n), DIGITS[figure])


def format_stat(stat: Stat, digits: int) -> str:
    """'mean' for one value, 'mean ± std (n)' for several, '-' for none."""
    if stat.n == 0:
        return MISSING
    if stat.n == 1:
        return f"{stat.mean:.{digits}f}"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f} ({stat.n})"


def latex_escape(text: str) -> str:
    specials = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_"}
    specials.update({"{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"})
    escaped = "".join(specials.get(ch, ch) for ch in text)
    for plain, math_mode in (("±", "$\\pm$"), ("->", "$\\to$"), ("Δ", "$\\Delta$"), ("<=", "$\\le$"), (">=", "$\\ge$")):
        escaped = escaped.replace(plain, math_mode)
    return escaped


def _stat(group: Group | None, figure: str) -> Stat:
    return group.stat(figure) if group else Stat(math.nan, math.nan, 0)


def _stat_record(prefix: str, stat: Stat) -> dict[str, Any]:
    return {f"{prefix}_mean": stat.mean, f"{prefix}_std": stat.std, f"{prefix}_n": stat.n}


def _short(figure: str) -> str:
    return {"acc1": "top-1 (%)", "min_mad": "min MAD", "entropy": "entropy"}[figure]


def _csv_value(value: Any) -> Any:
    """Full precision for numbers (round trips), an empty field for a missing one."""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    if value is None:
        return ""
    return value
