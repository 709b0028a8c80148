"""The bench suite runs end to end on tiny settings, its FLOP formula is right, and its timer interleaves.

No assertion here depends on how fast this machine is: ratios must only be positive and finite.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vit_locality.bench import probe_cost
from vit_locality.bench.common import PAPER, TINY
from vit_locality.bench.flops import counted_flops, linear_flops, model_flops
from vit_locality.bench.suite import SECTIONS, main, parse_sections
from vit_locality.bench.timing import interleaved, paired_ratios, timed


def _walk_ratios(record: dict) -> dict[str, float]:
    return {
        f"{name}.{key}": value
        for name, section in record["sections"].items()
        for key, value in section["ratios"].items()
    }


def test_quick_suite_writes_every_section(tmp_path) -> None:
    out, rows = tmp_path / "bench.json", tmp_path / "rows.md"
    main(["--quick", "--device", "cpu", "--out", str(out), "--markdown", str(rows)])
    record = json.loads(out.read_text())
    assert set(record["sections"]) == set(SECTIONS)
    ratios = _walk_ratios(record)
    assert ratios, "every section reports ratios"
    for name, value in ratios.items():
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (name, value)
    for section in SECTIONS:
        assert any(key.startswith(f"{section}.") for key in ratios), section
    assert record["targets"] and all(isinstance(t["met"], bool) for t in record["targets"])
    meta = record["meta"]
    assert meta["quick"] and meta["machine"]["torch_threads"] >= 1 and meta["precision"] == "fp32"
    assert meta["machine"]["versions"]["torch"]
    tiny = record["sections"]["framework"]["cases"]["tiny"]
    assert set(tiny["attribution_ms_per_step"]) == {
        "lightning_loop",
        "module_step_logging_metrics",
        "progress_bar_and_csv_logger",
    }
    text = rows.read_text()
    assert "| section | quantity | value | target | status |" in text and "Targets met:" in text


def test_sections_are_checked() -> None:
    assert parse_sections("flops,model") == ["model", "flops"]  # the model's rate feeds the flops section
    with pytest.raises(Exception, match="unknown sections"):
        parse_sections("model,gpu")


def test_linear_flops_by_hand() -> None:
    # qkv of the paper config on one image: 65 tokens x 192 inputs x 576 outputs, 2 FLOPs per multiply-add
    assert linear_flops(65, 192, 576) == 2 * 65 * 192 * 576 == 14_376_960
    layer = nn.Linear(192, 576)
    with FlopCounterMode(display=False) as counter:
        layer(torch.randn(65, 192))
    assert counter.get_total_flops() == linear_flops(65, 192, 576)


def test_analytic_flops_match_flop_counter_on_tiny_model() -> None:
    model = TINY.build()
    analytic = model_flops(model)
    explicit = counted_flops(model, explicit=True)
    assert explicit == pytest.approx(analytic.forward, rel=0.01)
    # The fused path: the counter either has a formula for the SDPA kernel (CUDA) or misses the attention matmuls.
    fused = counted_flops(model)
    assert fused == pytest.approx(analytic.forward, rel=0.01) or fused == pytest.approx(
        analytic.forward - analytic.attention, rel=0.01
    )
    train = counted_flops(model, explicit=True, backward=True)
    assert 2.5 * analytic.forward < train <= analytic.train_step * 1.01


def test_paper_flops_are_the_reference_figures() -> None:
    flops = model_flops(PAPER.build())
    patch, per_block, head = 2 * 64 * 48 * 192, 2 * 65 * 192 * (576 + 192 + 2 * 384) + 4 * 65 * 65 * 192, 2 * 192 * 100
    assert flops.forward == patch + 8 * per_block + head == 333_884_928  # about 0.33 GFLOP
    assert flops.train_step == pytest.approx(1.0e9, rel=0.01)
    assert flops.attention / flops.forward < 0.08  # REFERENCE.md: attention matmuls under 8%


def test_interleaved_timer_alternates_and_takes_medians() -> None:
    calls: list[str] = []

    def sleeper(name: str, seconds: float):
        def fn() -> None:
            calls.append(name)
            time.sleep(seconds)

        return timed(fn, torch.device("cpu"))

    timings = interleaved({"a": sleeper("a", 0.01), "b": sleeper("b", 0.03)}, repeats=4, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]  # warm-up, then A B, B A, A B, B A
    a, b = timings["a"], timings["b"]
    assert len(a.samples) == len(b.samples) == 4
    assert a.median >= 0.0095 and b.median >= 0.0295  # sleep never returns early; no upper bound asserted
    assert b.median > a.median
    assert all(r > 1 for r in paired_ratios(b, a))
    with pytest.raises(ValueError):
        interleaved({"a": sleeper("a", 0.0)}, repeats=0)


def test_probe_cost_cli_still_works(capsys) -> None:
    probe_cost.main(["--probe", "16", "--batch", "8", "--repeats", "1", "--train-images", "800", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "probe / training step" in out and "probe / epoch" in out
