"""The bench's rows as one table (printed, and as BENCHMARKS.md rows), each target met or not.

The targets, set for the CPU (on a GPU they are figures to read, not verdicts): our ViT trains at least as fast
as timm's of the same shape; `Trainer.fit` adds at most 1 ms per step on the tiny model and at most 5% at the
paper config; one core of per-sample augmentation outruns one core of model training at least 20x; one
attention-statistics probe costs at most 1.5 training steps and at most 1% of an epoch; the FLOP formula and
FlopCounterMode agree within 3%.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

TARGETS = {  # name: (comparison, threshold, unit)
    "ours_over_timm": (">=", 1.0, ""),
    "tiny_added_ms": ("<=", 1.0, " ms"),
    "paper_overhead_pct": ("<=", 5.0, "%"),
    "headroom": (">=", 20.0, "x"),
    "probe_in_steps": ("<=", 1.5, " steps"),
    "probe_pct_of_epoch": ("<=", 1.0, "%"),
    "flops_apart_pct": ("<=", 3.0, "% apart"),
}
COMPARE = {">=": operator.ge, "<=": operator.le}


@dataclass
class Row:
    section: str
    quantity: str
    value: str
    target: str = ""
    met: bool | None = None

    @property
    def status(self) -> str:
        return "" if self.met is None else ("met" if self.met else "NOT met")


def make_row(section: str, quantity: str, value: str, target: str | None = None, measured: float = 0.0) -> Row:
    """A row; with `target` (a key of TARGETS), the target's text and whether `measured` meets it."""
    if target is None:
        return Row(section, quantity, value)
    op, threshold, unit = TARGETS[target]
    return Row(section, quantity, value, f"{op} {threshold:g}{unit}", bool(COMPARE[op](measured, threshold)))


def spread(paired: dict[str, float]) -> str:
    return f"(per-round ratio {paired['paired_ratio_min']:.3f}..{paired['paired_ratio_max']:.3f})"


def _header(meta: dict[str, Any]) -> list[str]:
    m = meta["machine"]
    gpu = f" ({m['gpu']})" if "gpu" in m else ""
    return [
        f"Command: `{meta['command']}`",
        f"Date: {meta['date']}; machine: {m['processor']}, {m['usable_cores']} usable cores, "
        f"{m['torch_threads']} torch threads, device {m['device']}{gpu}",
        f"Precision: {meta['precision']}; load average (1, 5, 15 min) at start {meta['load_start']}, "
        f"at end {meta['load_end']}; elapsed {meta['elapsed_s']:.0f} s",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
    ] + (["The targets are set for the CPU: on a GPU read them as figures, not verdicts."] if gpu else [])


def _summary(rows: list[Row]) -> list[str]:
    judged = [r for r in rows if r.met is not None]
    missed = [f"{r.section}: {r.quantity} ({r.value}, target {r.target})" for r in judged if not r.met]
    return [f"Targets met: {sum(r.met for r in judged)} of {len(judged)}."] + (
        ["Not met: " + "; ".join(missed) + "."] if missed else []
    )


def _cells(rows: list[Row]) -> list[tuple[str, ...]]:
    return [("section", "quantity", "value", "target", "status")] + [
        (r.section, r.quantity, r.value, r.target, r.status) for r in rows
    ]


def format_table(rows: list[Row], meta: dict[str, Any]) -> str:
    """For a terminal: columns padded to their widest cell."""
    cells = _cells(rows)
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join([*_header(meta), "", *lines, "", *_summary(rows)])


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    """BENCHMARKS.md rows, under a header that says where and how they were measured."""
    title, *body = _cells(rows)
    table = ["| " + " | ".join(title) + " |", "|---|---|---|---|---|", *("| " + " | ".join(c) + " |" for c in body)]
    header = [f"{line}  " for line in _header(meta)]
    return (
        "\n".join([f"## Bench suite ({meta['machine']['device']})", "", *header, "", *table, "", *_summary(rows)])
        + "\n"
    )
