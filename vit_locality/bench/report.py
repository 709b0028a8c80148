"""Turn the bench's results into one table: printed, as BENCHMARKS.md rows, and the targets met or not."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

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


def _target(value: float, op: str, threshold: float, unit: str = "") -> tuple[str, bool]:
    return f"{op} {threshold:g}{unit}", bool(COMPARE[op](value, threshold))


def _model_rows(r: dict[str, Any]) -> list[Row]:
    m = r["model"]
    shape = f"{m['name']} ({r['params']:,} params), batch {r['batch']}"
    ratio = r["ratios"]["ours_over_timm"]
    target, met = _target(ratio, ">=", 1.0)
    spread = f" (per-round {r['paired_ratio_min']:.3f}..{r['paired_ratio_max']:.3f})"
    return [
        Row("model", f"ours: train step img/s, {shape}", f"{r['ours_img_s']:.1f}"),
        Row("model", "timm VisionTransformer, same config: train step img/s", f"{r['timm_img_s']:.1f}"),
        Row("model", "ours / timm (images/s)", f"{ratio:.3f}{spread}", target, met),
    ]


def _framework_rows(r: dict[str, Any]) -> list[Row]:
    rows = []
    for label, case in r["cases"].items():
        m = case["model"]
        where = f"{label}: {m['name']}, batch {case['batch']}, {case['timed_steps']} steps"
        rows.append(Row("framework", f"{where}: plain loop ms/step", f"{case['plain_ms_per_step']:.2f}"))
        rows.append(
            Row("framework", f"{where}: Trainer.fit ms/step (bar + CSV log)", f"{case['lightning_ms_per_step']:.2f}")
        )
        if "lightning_bare_ms_per_step" in case:
            bare = f"{case['lightning_bare_ms_per_step']:.2f}"
            rows.append(Row("framework", f"{where}: Trainer.fit ms/step (no bar, no logger)", bare))
        if "lightning_loss_only_ms_per_step" in case:
            loss_only = f"{case['lightning_loss_only_ms_per_step']:.2f}"
            rows.append(Row("framework", f"{where}: Trainer.fit ms/step (bare, loss-only training_step)", loss_only))
            parts = case["attribution_ms_per_step"]
            split = (
                f"loop {parts['lightning_loop']:+.2f}, module logging/metrics "
                f"{parts['module_step_logging_metrics']:+.2f}, bar+logger {parts['progress_bar_and_csv_logger']:+.2f}"
            )
            rows.append(Row("framework", f"{label}: added ms per step, by cause", split))
        added = case["added_ms_per_step"]
        pct = case["overhead_pct"]
        spread = f" (per-round ratio {case['paired_ratio_min']:.3f}..{case['paired_ratio_max']:.3f})"
        if case.get("target") == "ms":
            target, met = _target(added, "<=", 1.0, " ms")
            rows.append(
                Row("framework", f"{label}: added ms per step", f"{added:+.2f} ms ({pct:+.1f}%){spread}", target, met)
            )
        else:
            target, met = _target(pct, "<=", 5.0, "%")
            rows.append(
                Row("framework", f"{label}: Trainer overhead", f"{pct:+.1f}% ({added:+.1f} ms){spread}", target, met)
            )
    return rows


def _data_rows(r: dict[str, Any]) -> list[Row]:
    rates, ratios = r["img_s"], r["ratios"]
    model = r["model"]["name"]
    threads = "1 thread" if r["model_threads"] == 1 else "on the device"
    rows = [
        Row("data", "Baseline per-sample pipeline (crop+flip), one core: img/s", f"{rates['baseline']:.0f}"),
        Row(
            "data",
            f"Modern per-sample pipeline (+AutoAugment {r['policy']}), one core: img/s",
            f"{rates['modern']:.0f}",
        ),
        Row("data", "DataModule train loader (Modern), 1 worker: img/s", f"{rates['loader_1w']:.0f}"),
        Row("data", "DataModule train loader (Modern), 2 workers: img/s", f"{rates['loader_2w']:.0f}"),
        Row(
            "data",
            f"model training img/s, {model}, batch {r['model_batch']}, {threads}",
            f"{rates['model_one_core']:.1f}",
        ),
    ]
    for name in ("baseline", "modern"):
        value = ratios[f"headroom_{name}"]
        target, met = _target(value, ">=", 20.0, "x")
        rows.append(
            Row(
                "data", f"headroom, {name.capitalize()} (pipeline / model, one core each)", f"{value:.1f}x", target, met
            )
        )
    return rows


def _stats_rows(r: dict[str, Any]) -> list[Row]:
    model = r["model"]["name"]
    steps_target, steps_met = _target(r["probe_in_steps"], "<=", 1.5, " steps")
    pct_target, pct_met = _target(r["probe_pct_of_epoch"], "<=", 1.0, "%")
    epoch = f"epoch of {r['train_images']:,} images ({r['steps_per_epoch']} steps)"
    return [
        Row("stats", f"train step ms, {model}, batch {r['batch']}", f"{1000 * r['train_step_s']:.1f}"),
        Row("stats", f"probe pass ms ({r['probe_images']} images, explicit fp32)", f"{1000 * r['probe_s']:.1f}"),
        Row("stats", "probe / training step", f"{r['probe_in_steps']:.2f} steps", steps_target, steps_met),
        Row("stats", f"probe / {epoch}", f"{r['probe_pct_of_epoch']:.3f}%", pct_target, pct_met),
    ]


def _flops_rows(r: dict[str, Any]) -> list[Row]:
    a = r["analytic"]
    agree = r["ratios"]["counted_explicit_over_analytic"]
    target, met = _target(abs(agree - 1) * 100, "<=", 3.0, "% apart")
    rows = [
        Row("flops", "analytic forward GFLOP/image", f"{a['forward'] / 1e9:.4f}"),
        Row("flops", "analytic train step GFLOP/image (3 x forward)", f"{a['train_step'] / 1e9:.4f}"),
        Row("flops", "attention matmuls / forward", f"{100 * r['attention_share']:.1f}%"),
        Row("flops", "FlopCounterMode forward (explicit attention) / analytic", f"{agree:.4f}", target, met),
        Row(
            "flops",
            "FlopCounterMode forward (fused SDPA) / analytic",
            f"{r['ratios']['counted_fused_over_analytic']:.4f} (gap {100 * r['fused_gap']:.1f}% = attention matmuls: "
            "the counter has no formula for CPU's fused SDPA kernel)",
        ),
        Row("flops", "FlopCounterMode train step GFLOP/image", f"{r['counted_train_step_explicit'] / 1e9:.4f}"),
    ]
    if "achieved_flop_s" in r:
        rows.append(Row("flops", "achieved GFLOP/s in the measured train step", f"{r['achieved_flop_s'] / 1e9:.1f}"))
    return rows


BUILDERS = {
    "model": _model_rows,
    "framework": _framework_rows,
    "data": _data_rows,
    "stats": _stats_rows,
    "flops": _flops_rows,
}


def build_rows(sections: dict[str, Any]) -> list[Row]:
    return [row for name, builder in BUILDERS.items() if name in sections for row in builder(sections[name])]


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    return [
        {"section": r.section, "quantity": r.quantity, "value": r.value, "target": r.target, "met": r.met}
        for r in rows
        if r.met is not None
    ]


def header_lines(meta: dict[str, Any]) -> list[str]:
    m = meta["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    return [
        f"Command: `{meta['command']}`",
        f"Date: {meta['date']}; machine: {m['processor']}, {m['usable_cores']} usable cores, "
        f"{m['torch_threads']} torch threads, device {m['device']}" + (f" ({m['gpu']})" if "gpu" in m else ""),
        f"Precision: {meta['precision']}; load average (1, 5, 15 min) at start {meta['load_start']}, "
        f"at end {meta['load_end']}; elapsed {meta['elapsed_s']:.0f} s",
        f"Versions: {versions}",
    ] + (["Targets are issue 6's CPU targets; on a GPU read them as figures, not verdicts."] if "gpu" in m else [])


def format_table(rows: list[Row], meta: dict[str, Any]) -> str:
    widths = [max(len(getattr(r, f)) for r in rows) for f in ("section", "quantity", "value", "target")]
    lines = header_lines(meta) + [""]
    titles = ("section", "quantity", "value", "target")
    lines.append("  ".join(t.ljust(w) for t, w in zip(titles, widths, strict=True)) + "  status")
    for r in rows:
        cells = (r.section, r.quantity, r.value, r.target)
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + f"  {r.status}".rstrip())
    met = [r for r in rows if r.met is not None]
    lines.append("")
    lines.append(f"targets met: {sum(r.met for r in met)} of {len(met)}")
    return "\n".join(lines)


def markdown(rows: list[Row], meta: dict[str, Any]) -> str:
    device = meta["machine"]["device"]
    lines = [f"## Bench suite ({device})", ""]
    lines += [f"{line}  " for line in header_lines(meta)]
    lines += ["", "| section | quantity | value | target | status |", "|---|---|---|---|---|"]
    lines += [f"| {r.section} | {r.quantity} | {r.value} | {r.target} | {r.status} |" for r in rows]
    met = [r for r in rows if r.met is not None]
    lines += ["", f"Targets met: {sum(r.met for r in met)} of {len(met)}."]
    missed = [f"{r.section}: {r.quantity} ({r.value}, target {r.target})" for r in met if not r.met]
    if missed:
        lines.append("Not met: " + "; ".join(missed) + ".")
    return "\n".join(lines) + "\n"
