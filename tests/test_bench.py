"""The bench suite runs end to end on tiny settings, its FLOP formula is right, its timer interleaves, and it
trains in the precision the Trainer would.

No assertion here depends on how fast this machine is: ratios must only be positive and finite.
"""

from __future__ import annotations

import json
import math
import statistics
import time

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vit_locality.bench.common import autocast, bench_config, build_vit, interleaved, per_round, timed
from vit_locality.bench.sections import counted_flops, linear_flops, model_flops
from vit_locality.bench.suite import SECTIONS, main, make_row, parse_sections
from vit_locality.model.vit import count_parameters

CPU = torch.device("cpu")


def test_quick_suite_writes_every_section(tmp_path, capsys) -> None:
    out, rows = tmp_path / "bench.json", tmp_path / "rows.md"
    main(["--quick", "--device", "cpu", "--out", str(out), "--markdown", str(rows)])
    record = json.loads(out.read_text())
    assert list(record["sections"]) == list(SECTIONS)
    for section, figures in record["sections"].items():
        assert figures["ratios"], f"{section} reports no ratio"
        for key, value in figures["ratios"].items():
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (section, key, value)
    # one judged row per target: ours/timm, tiny ms and paper %, two headrooms, probe in steps and per epoch, FLOPs
    judged = [row for row in record["rows"] if row["target"]]
    assert len(judged) == 8 and all(row["status"] in ("met", "NOT met") for row in judged)
    assert all(row["status"] == "" for row in record["rows"] if not row["target"])
    cases = record["sections"]["framework"]["cases"]
    for low, high in [record["sections"]["model"]["per_round_ratio"], *(c["per_round_ratio"] for c in cases.values())]:
        assert 0 < low <= high
    meta = record["meta"]
    assert meta["quick"] and meta["machine"]["torch_threads"] >= 1 and meta["precision"] == "32-true"
    assert meta["machine"]["versions"]["torch"] == torch.__version__.split("+")[0]
    tiny = cases["tiny"]
    parts = tiny["attribution_ms_per_step"]
    assert set(parts) == {"lightning_loop", "module_step_logging_metrics", "progress_bar_and_csv_logger"}
    assert sum(parts.values()) == pytest.approx(tiny["added_ms_per_step"])
    assert "attribution_ms_per_step" not in cases["paper"]
    text = rows.read_text()
    assert "| section | quantity | value | target | status |" in text and "Targets met:" in text
    assert text.count("\n| ") == len(record["rows"]) + 1  # every row, plus the title row
    printed = capsys.readouterr().out
    assert all(row["quantity"] in printed for row in record["rows"]) and "Targets met:" in printed


def test_sections_are_checked() -> None:
    assert parse_sections("flops,model") == ["model", "flops"]  # the model's rate feeds the flops section
    with pytest.raises(Exception, match="unknown sections"):
        parse_sections("model,gpu")


def test_targets_compare_the_right_way() -> None:
    assert make_row("model", "q", "v", "ours_over_timm", 1.0)["status"] == "met"
    assert make_row("model", "q", "v", "ours_over_timm", 0.99)["status"] == "NOT met"
    assert make_row("framework", "q", "v", "tiny_added_ms", 1.0)["status"] == "met"
    assert make_row("framework", "q", "v", "tiny_added_ms", 1.01)["status"] == "NOT met"
    assert make_row("stats", "q", "v", "probe_in_steps", 1.6)["target"] == "<= 1.5 steps"
    assert make_row("data", "q", "v") == {"section": "data", "quantity": "q", "value": "v", "target": "", "status": ""}


def test_hand_written_steps_use_the_trainers_precision() -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(bench_config("vit_tiny", CPU)):
        assert (a @ b).dtype == torch.float32  # precision auto on the CPU: 32-true
    with autocast(bench_config("vit_tiny", CPU, ["trainer.precision=bf16-mixed"])):
        assert (a @ b).dtype == torch.bfloat16


def test_linear_flops_by_hand() -> None:
    # qkv of the paper config on one image: 65 tokens x 192 inputs x 576 outputs, 2 FLOPs per multiply-add
    assert linear_flops(65, 192, 576) == 2 * 65 * 192 * 576 == 14_376_960
    layer = nn.Linear(192, 576)
    with FlopCounterMode(display=False) as counter:
        layer(torch.randn(65, 192))
    assert counter.get_total_flops() == linear_flops(65, 192, 576)


@pytest.mark.parametrize("name", ["vit_tiny", "vit_paper"])
def test_analytic_flops_match_flop_counter(name: str) -> None:
    model = build_vit(bench_config(name, CPU))
    analytic = model_flops(model)
    assert counted_flops(model, explicit=True) == pytest.approx(analytic["forward"], rel=0.01)
    # The fused path: the counter either has a formula for the SDPA kernel (CUDA) or misses the attention matmuls.
    fused = counted_flops(model)
    assert fused == pytest.approx(analytic["forward"], rel=0.01) or fused == pytest.approx(
        analytic["forward"] - analytic["attention"], rel=0.01
    )
    train = counted_flops(model, explicit=True, backward=True)
    assert 2.5 * analytic["forward"] < train <= analytic["train_step"] * 1.01


def test_paper_config_is_the_papers_model_and_flops() -> None:
    model = build_vit(bench_config("vit_paper", CPU))  # composed from conf/model/vit_paper.yaml
    assert count_parameters(model) == 2_417_956
    flops = model_flops(model)
    patch, per_block, head = 2 * 64 * 48 * 192, 2 * 65 * 192 * (576 + 192 + 2 * 384) + 4 * 65 * 65 * 192, 2 * 192 * 100
    assert flops["forward"] == patch + 8 * per_block + head == 333_884_928  # about 0.33 GFLOP
    assert flops["train_step"] == pytest.approx(1.0e9, rel=0.01)
    assert flops["attention"] / flops["forward"] < 0.08  # the attention matmuls are a small share


def test_interleaved_timer_alternates_and_takes_medians() -> None:
    calls: list[str] = []

    def sleeper(name: str, seconds: float):
        def fn() -> None:
            calls.append(name)
            time.sleep(seconds)

        return timed(fn, CPU)

    samples = interleaved({"a": sleeper("a", 0.01), "b": sleeper("b", 0.03)}, repeats=4, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]  # warm-up, then A B, B A, A B, B A
    a, b = samples["a"], samples["b"]
    assert len(a) == len(b) == 4
    assert statistics.median(a) >= 0.0095 and statistics.median(b) >= 0.0295  # sleep never returns early
    assert per_round(b, a)[0][0] > 1
    assert per_round([2.0, 3.0], [1.0, 2.0]) == ([1.5, 2.0], "(per-round ratio 1.500..2.000)")
    with pytest.raises(ValueError):
        interleaved({"a": sleeper("a", 0.0)}, repeats=0)


def test_timed_runs_on_the_threads_asked_and_restores_them() -> None:
    before, seen = torch.get_num_threads(), []
    timed(lambda: seen.append(torch.get_num_threads()), CPU, threads=1)()
    timed(lambda: seen.append(torch.get_num_threads()), CPU)()
    assert seen == [1, before] and torch.get_num_threads() == before
