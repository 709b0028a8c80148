"""The claims (a), (c) and (d) under an ablation table, as claims.py judges them."""

from __future__ import annotations

from typing import Any

from vit_locality.report.load.aggregate import LEVELS, Group
from vit_locality.report.render.table_format import Table
from vit_locality.report.stats.claim_units import DIAGONAL, GRID_SIDE, conversion_notes
from vit_locality.report.stats.claims import NOT_INFORMATIVE, ONE_SEED, ablation_claims, measured, shown_verdict

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
    "min MAD in the paper's convention: unit square, renormalised, first 2 layers, converted exactly from each"
    " record's stats settings (pixels / image size, grid / grid side, diagonal x sqrt 2, other early layers re-read"
    " per layer); not comparable when a run cannot be (raw weights, no patch size for pixels), with the reason",
    "the measured columns divide distances by the image side (ours, 'grid side'); the diagonal columns by the image"
    " diagonal (values / sqrt 2), since the paper does not say which; 'differ' flags a verdict that depends on it;"
    " claim (d)'s margin, floor included, is / sqrt 2 with them, so its verdict never differs",
    "not enough runs: a cell the claim needs has no run with that figure (missing: the cells)",
)


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
