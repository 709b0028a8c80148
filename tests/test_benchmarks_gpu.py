"""The GPU bench (benchmarks/gpu.py) runs end to end in its CPU smoke mode, writes BENCHMARKS.md between its markers
only, turns a failing section into a row, and projects cell and grid times by the stated formula. No assertion
depends on this machine's speed."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from helpers import Spawner

from benchmarks import gpu
from benchmarks.__main__ import main
from benchmarks.common import Report

CPU = torch.device("cpu")


def _numbers(record: dict, section: str) -> list[float]:
    """The leading number of every row of a section whose value starts with one."""
    heads = [r["value"].split()[0].rstrip("x%;") for r in record["rows"] if r["section"] == section]
    return [float(h) for h in heads if re.fullmatch(r"[-+]?[0-9.]+", h)]


def _smoke(tmp_path, sections: str) -> tuple[dict, str]:
    benchmarks = tmp_path / "BENCHMARKS.md"
    benchmarks.write_text(f"# Benchmarks\n\nbefore\n\n{gpu.BEGIN}\nnot measured\n{gpu.END}\n\nafter\n")
    out, rows = tmp_path / "gpu.json", tmp_path / "rows.md"
    args = ["gpu", "--device", "cpu", "--smoke", "--sections", sections, "--out", str(out), "--markdown", str(rows)]
    record = main([*args, "--benchmarks", str(benchmarks)])
    assert json.loads(out.read_text())["rows"] == record["rows"]
    text = benchmarks.read_text()
    assert text.startswith("# Benchmarks\n\nbefore\n\n") and text.endswith(f"{gpu.END}\n\nafter\n")
    assert "not measured" not in text and rows.read_text().strip() in text
    return record, text


def test_smoke_run_without_packing_writes_every_row(tmp_path, capsys) -> None:
    torch._dynamo.reset()  # a warm dynamo (another test's compile in this process) would time the compile as 0.0 s
    record, text = _smoke(tmp_path, "model,autoaugment,e2e,probe,memory,projection")
    assert {r["section"] for r in record["rows"]} == {"model", "autoaugment", "e2e", "probe", "memory", "projection"}
    assert not any(r["quantity"] == "section failed" for r in record["rows"])
    for section in ("model", "autoaugment", "e2e", "probe"):
        numbers = _numbers(record, section)
        assert numbers and all(math.isfinite(v) and v != 0 for v in numbers), (section, numbers)
    e2e = [r["quantity"] for r in record["rows"] if r["section"] == "e2e"]
    for cell in ("Baseline", "Modern"):
        assert f"{cell} cell step img/s, on-device" in e2e and f"{cell} cell step img/s, 2 workers" in e2e
    (overhead,) = [r for r in record["rows"] if r["target"] == "<= 5%"]
    assert overhead["status"] == ""  # judged at the paper config only, not on the smoke's tiny model
    projection = [r for r in record["rows"] if r["section"] == "projection"]
    assert len(projection) == 2 and all(r["status"] == "" and float(r["value"]) > 0 for r in projection)
    assert any(r["value"] == "True" for r in record["rows"] if r["section"] == "autoaugment")  # same pixels
    assert record["meta"]["smoke"] and record["meta"]["machine"]["device"] == "cpu"
    assert "### GPU bench (cpu)" in text and "Versions: torch" in text
    printed = capsys.readouterr().out
    assert "e2e: modern" in printed and "|  on-device" in printed and "|  data path" in printed  # Compare's table


def test_smoke_run_with_packed_cells(tmp_path, spawns: Spawner) -> None:  # packed cells are subprocesses
    record, _ = _smoke(tmp_path, "model,e2e,probe,pack,projection")
    pack = [r for r in record["rows"] if r["section"] == "pack"]
    assert [r["quantity"].split()[0] for r in pack] == ["1", "1", "2", "2"]
    assert all(v > 0 for v in _numbers(record, "pack"))
    grid = [r for r in record["rows"] if r["section"] == "projection" and "grid" in r["quantity"]]
    assert len(grid) == 1 and float(grid[0]["value"]) > 0


def test_projection_follows_its_formula() -> None:
    state = {"e2e_modern_img_s": 50_000.0, "eval_img_s": 100_000.0, "probe_s": 0.01, "compile_s": 30.0}
    state["pack_img_s"] = {1: 50_000.0, 2: 80_000.0, 4: 100_000.0, 8: 100_000.0}
    report = Report(section="projection")
    gpu.projection_section(report, gpu.FULL, torch.device("cuda"), state)
    cell, grid = report.rows
    # 200 x (50,000 / 50,000 + 10,000 / 100,000 + 0.01) s of work plus 30 s of compile
    assert float(cell["value"]) == pytest.approx((200 * 1.11 + 30) / 60, abs=0.05) and cell["status"] == "NOT met"
    # packing 4 (the first best): each cell at 25,000 img/s, 2x slower; 24 cells in 6 waves
    assert "4 cells packed" in grid["quantity"]
    assert float(grid["value"]) == pytest.approx(6 * (200 * 1.11 * 2 + 30) / 60, abs=0.05)
    smoke = Report(section="projection")
    gpu.projection_section(smoke, gpu.SMOKE, CPU, {})
    assert smoke.rows[0]["value"].startswith("not computed")


def test_markers_are_checked(tmp_path) -> None:
    plain = tmp_path / "BENCHMARKS.md"
    plain.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        gpu.write_benchmarks(plain, "rows")
    assert plain.read_text() == "# no markers\n"


def test_a_failing_section_becomes_a_row_and_the_rest_still_runs(tmp_path, monkeypatch) -> None:
    """One GPU call must bring back whatever it measured: an error is the section's row, not the end of the run."""

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA out of memory | 2 GiB")

    monkeypatch.setitem(gpu.SECTIONS, "probe", broken)
    out = tmp_path / "gpu.json"
    record = main(["gpu", "--device", "cpu", "--smoke", "--sections", "probe,projection", "--out", str(out)])
    assert [r["section"] for r in record["rows"]] == ["probe", "projection"]
    assert record["rows"][0]["value"] == "RuntimeError: CUDA out of memory / 2 GiB"  # no stray table column
    assert json.loads(out.read_text())["rows"] == record["rows"]
