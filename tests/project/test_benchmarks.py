"""The benchmark suite (benchmarks/suite.py) runs end to end on tiny settings, its FLOP formula is right, its sides
alternate, and it trains in the precision the Trainer would. No assertion depends on how fast this machine is."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from helpers import InProcessTraining
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.__main__ import main, sections_arg
from benchmarks.common import (
    Report,
    alternating,
    autocast,
    bench_config,
    build_vit,
    per_round,
    self_timed,
    side_by_side,
)
from benchmarks.suite import SECTIONS, counted_flops, linear_flops, model_flops
from vit_locality.model.vit import count_parameters

CPU = torch.device("cpu")


# Trains through Trainer.fit and a DataLoader with workers: about a minute on two idle cores.
def test_quick_suite_prints_and_writes_every_section(tmp_path, capsys, trains: InProcessTraining) -> None:
    out, rows = tmp_path / "bench.json", tmp_path / "rows.md"
    main(["--quick", "--device", "cpu", "--out", str(out), "--markdown", str(rows)])
    record = json.loads(out.read_text())
    assert [s for s in SECTIONS if any(r["section"] == s for r in record["rows"])] == list(SECTIONS)
    for name, value in record["figures"].items():
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (name, value)
    # one judged row per target: ours/timm, tiny ms and paper %, two headrooms, probe in steps and per epoch, FLOPs,
    # the host time of the data path, of Trainer + project and of the compiled Modern step over the plain loop
    judged = [row for row in record["rows"] if row["target"]]
    assert len(judged) == 14 and all(row["status"] in ("met", "NOT met") for row in judged)
    host = {r["quantity"] for r in record["rows"] if r["section"] == "host"}
    compiled = "host: compiled Modern over the plain -AA loop, ms/step"
    assert {"host: data path ms/batch", "host: Trainer + project over the plain loop, ms/step", compiled} <= host
    assert any(q.startswith("host: compiled Modern: aten ops dispatched a step") for q in host)
    assert any("self time of Lightning: hook dispatch" in q for q in host)
    assert all(row["status"] == "" for row in record["rows"] if not row["target"])
    (cause,) = [r["value"] for r in record["rows"] if r["quantity"] == "tiny: added ms per step, by cause"]
    assert cause.startswith("loop ") and "module logging/metrics" in cause and "bar+logger" in cause
    assert record["meta"]["quick"] and record["meta"]["machine"]["versions"]["torch"] == torch.__version__.split("+")[0]
    text = rows.read_text()
    assert "| section | quantity | value | target | status |" in text and "Targets met:" in text
    assert text.count("\n| ") == len(record["rows"]) + 1  # every row, plus the title row
    printed = capsys.readouterr().out
    assert all(row["quantity"] in printed for row in record["rows"]) and "Targets met:" in printed
    # Compare's tables put the sides of each comparison side by side
    for title, sides in [("train step: ours vs timm", ("ours", "timm")), ("framework: per step", ("plain loop",))]:
        assert title in printed and all(f"|  {side}" in printed for side in sides)


def test_sections_are_checked() -> None:
    parse = sections_arg(list(SECTIONS))
    assert parse("flops,model") == ["model", "flops"]  # the model's rate feeds the flops section
    with pytest.raises(Exception, match="unknown sections"):
        parse("model,gpu")


def test_targets_compare_the_right_way() -> None:
    report = Report(section="s")
    report.row("q", "v", "ours_over_timm", 1.0)
    report.row("q", "v", "ours_over_timm", 0.99)
    report.row("q", "v", "tiny_added_ms", 1.0)
    report.row("q", "v", "tiny_added_ms", 1.01)
    report.row("q", "v", "probe_in_steps", math.nan)  # not measured here: no verdict
    report.row("q", "v")
    assert [r["status"] for r in report.rows] == ["met", "NOT met", "met", "NOT met", "", ""]
    assert report.rows[4]["target"] == "<= 1.5 steps"
    assert report.rows[5] == {"section": "s", "quantity": "q", "value": "v", "target": "", "status": ""}


def test_hand_written_steps_use_the_trainers_precision() -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with autocast(bench_config("vit_tiny", CPU)):
        assert (a @ b).dtype == torch.float32  # precision auto on the CPU: 32-true
    with autocast(bench_config("vit_tiny", CPU, ["trainer.precision=bf16-mixed"])):
        assert (a @ b).dtype == torch.bfloat16


def test_linear_flops_by_hand() -> None:
    # qkv of the paper config on one image: 65 tokens x 192 inputs x 576 outputs, 2 FLOPs per multiply-add
    assert linear_flops(65, 192, 576) == 2 * 65 * 192 * 576 == 14_376_960
    with FlopCounterMode(display=False) as counter:
        nn.Linear(192, 576)(torch.randn(65, 192))
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


def test_sides_alternate_after_a_warm_up_and_keep_their_times_in_order() -> None:
    assert list(alternating(["a", "b"], 4)) == ["a", "b", "b", "a", "a", "b", "b", "a"]
    with pytest.raises(ValueError):
        list(alternating(["a"], 0))
    calls: list[str] = []
    seconds = iter([9.0, 9.0, 1.0, 3.0, 2.0, 4.0])  # warm-up a, b; then a b, b a

    def run(name: str) -> float:
        calls.append(name)
        return next(seconds)

    times = self_timed("label", "sub", {"a": lambda: run("a"), "b": lambda: run("b")}, rounds=2, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a"]
    assert times["a"].times == [1.0, 4.0] and times["b"].times == [3.0, 2.0]  # the warm-up is not kept
    assert per_round(times["b"], times["a"]) == (0.5, 3.0)
    assert times["a"].task_spec.description == "a" and times["a"].task_spec.label == "label"


def test_side_by_side_times_each_side_on_its_threads() -> None:
    before, seen = torch.get_num_threads(), []

    def sleeper(seconds: float):
        return lambda: (seen.append(torch.get_num_threads()), time.sleep(seconds))

    torch.set_num_threads(2)
    try:
        times = side_by_side("l", "s", {"fast": sleeper(0.01), "slow": sleeper(0.03)}, rounds=2, threads={"fast": 1})
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    # each round: Timer's two untimed calls, then the timed one; the second round in reverse order
    assert seen == [1, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 1]
    assert times["fast"].median >= 0.0095 and times["slow"].median >= 0.0295  # sleep never returns early
    assert len(times["slow"].times) == 2 and per_round(times["slow"], times["fast"])[0] > 1
