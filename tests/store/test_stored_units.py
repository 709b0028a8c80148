"""One stored unit: the attention-statistics callback writes the unit square whatever `stats.units` says, and
`stats.units` changes only what a person reads (the log line, the run's MAD-entropy picture).

The probed model's attention is known by hand: the study's ViT restricted to each patch's 3 x 3 neighbourhood with
zeroed query and key projections spreads every patch query evenly over the patches it may see, so on the 8 x 8
grid every head's MAD is (36 (4 + 4 sqrt 2) / 9 + 24 (3 + 2 sqrt 2) / 6 + 4 (2 + sqrt 2) / 4) / 64 patch steps.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from vit_locality.callbacks.attention_stats import AttentionStatsCallback

from vit_locality.attention import stats_log
from vit_locality.config.schema import StatsConfig
from vit_locality.extras.references import reference_model
from vit_locality.report.load.run_settings import old_units_note
from vit_locality.store.record import ATTENTION_CSV, read_record, write_record

SQRT2 = math.sqrt(2.0)
STEPS_3X3 = (36 * (4 + 4 * SQRT2) / 9 + 24 * (3 + 2 * SQRT2) / 6 + 4 * (2 + SQRT2) / 4) / 64  # 1.0212 patch steps
UNIT_3X3 = STEPS_3X3 / 8  # 0.1277 of the image side
PATCH = 2  # 16 px images on the 8 x 8 grid
SHOWN_3X3 = {"unit": UNIT_3X3, "grid": STEPS_3X3, "pixels": STEPS_3X3 * PATCH, "diagonal": UNIT_3X3 / SQRT2}
LABEL = {
    "unit": "fraction of the image side",
    "grid": "patch steps",
    "pixels": "pixels",
    "diagonal": "fraction of the image diagonal",
}


def flat(table: list[list[float]]) -> list[float]:
    return [value for row in table for value in row]


class MetricsLogger:
    """A Lightning logger's two calls the callback makes; keeps what it was given."""

    def __init__(self) -> None:
        self.logged: list[dict[str, float]] = []

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.logged.append(metrics)

    def save(self) -> None:
        pass


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def measure(run_dir: Path, units: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One fit of the callback on the 3 x 3 reference model with `stats.units=units`: what it logged, printed,
    drew and wrote (the record's attention section and attention_stats.csv)."""
    model = reference_model(dict(depth=2, dim=8, heads=2, mlp_ratio=1.0), image_size=8 * PATCH, radius=1)
    logger, lines, drawn = MetricsLogger(), Lines(), {}
    trainer = SimpleNamespace(
        datamodule=SimpleNamespace(probe_images=lambda n: torch.randn(n, 3, 8 * PATCH, 8 * PATCH)),
        is_global_zero=True,
        loggers=[logger],
        global_step=0,
        current_epoch=0,
    )
    module = SimpleNamespace(model=model, device=torch.device("cpu"), preprocess=lambda images: images)

    def plane(mad: torch.Tensor, entropy: torch.Tensor, title: str, **kwargs: Any) -> Any:
        drawn.update(mad=mad, units=kwargs["units"])
        return stats_log.plots.plt.figure()

    monkeypatch.setattr(stats_log.plots, "mad_entropy_plane", plane)
    settings = StatsConfig(probe_size=4, batch_size=4, early_layers=1, units=units)
    callback = AttentionStatsCallback(run_dir, settings)
    log = logging.getLogger("vit_locality")
    log.addHandler(lines)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        callback.on_fit_start(trainer, module)  # type: ignore[arg-type]
        callback.on_fit_end(trainer, module)  # type: ignore[arg-type]
    finally:
        log.removeHandler(lines)
        log.setLevel(level)
    with (run_dir / ATTENTION_CSV).open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return {
        "section": callback.record_section()["attention"],
        "csv": rows,
        "logged": logger.logged[-1],
        "lines": lines.lines,
        "drawn": drawn,
    }


def write_complete(run_dir: Path, section: dict[str, Any], units: str) -> Path:
    """The record a complete run leaves: the callback's section beside the resolved config's `stats.units`."""
    payload = {
        "seed": 0,
        "protocol": {"autoaug": False, "cutmix": False, "ls": 0.0, "policy": None},
        "data": {"name": "synthetic", "image_size": 8 * PATCH},
        "model": {"name": "vit_tiny", "patch_size": PATCH},
        "metrics": {"test/acc1": 0.5},
        "config": {"stats": {"units": units, "renormalize": True, "early_layers": 1}},
        "attention": section,
    }
    return write_record(run_dir, payload, "complete")


@pytest.mark.parametrize("units", ["grid", "pixels", "diagonal"])
def test_stats_units_changes_what_is_shown_not_what_is_stored(
    tmp_path: Path, units: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    unit = measure(tmp_path / "unit", "unit", monkeypatch)
    other = measure(tmp_path / units, units, monkeypatch)
    final = other["section"]["final"]
    # stored: the unit square, said so, in the record, the CSV and every logger
    assert final["min_mad_early"] == pytest.approx(UNIT_3X3, abs=1e-5)
    assert flat(final["per_head"]["mad"]) == pytest.approx([UNIT_3X3] * 4, abs=1e-5)
    assert final["settings"]["units"] == "unit" and final["settings"]["display_units"] == units
    assert [float(row["mad"]) for row in other["csv"]] == pytest.approx([UNIT_3X3] * 4, abs=1e-5)
    assert other["logged"]["attn/min_mad_early"] == pytest.approx(UNIT_3X3, abs=1e-5)
    # the same numbers as the run with stats.units=unit, field by field
    same = {key: value for key, value in final.items() if key != "settings"}
    assert same == {key: value for key, value in unit["section"]["final"].items() if key != "settings"}
    assert [{k: v for k, v in row.items()} for row in other["csv"]] == unit["csv"]
    assert other["logged"] == unit["logged"]
    # shown: the log line and the picture in the chosen units, named
    (line,) = [line for line in other["lines"] if "MAD" in line]
    assert f"min early-layer MAD {SHOWN_3X3[units]:.4f} {LABEL[units]}" in line, line
    assert f"({UNIT_3X3:.4f} of the image side)" in line
    assert f"{UNIT_3X3:.4f} fraction of the image side" in unit["lines"][0]
    assert other["drawn"]["units"] == units
    torch.testing.assert_close(other["drawn"]["mad"], torch.full((2, 2), SHOWN_3X3[units]), atol=1e-5, rtol=0)


def test_a_record_written_today_is_read_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolved config says stats.units=grid, the distances say unit: the reader believes the record's own
    statement and converts nothing (dividing by 8 again would read 0.016)."""
    measured = measure(tmp_path, "grid", monkeypatch)
    write_complete(tmp_path, measured["section"], "grid")
    run = read_record(tmp_path)
    assert run is not None and run.stats_units == "unit" and old_units_note(run) is None
    assert run.headline().min_mad == pytest.approx(UNIT_3X3, abs=1e-5)


def test_an_old_record_in_grid_units_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record from before the one stored unit (older than the previous release): distances in patch steps,
    `settings.units=grid`. The reports leave it out, saying why."""
    section = measure(tmp_path, "grid", monkeypatch)["section"]
    final = section["final"]
    final["min_mad_early"] *= 8
    final["per_head"]["mad"] = [[v * 8 for v in layer] for layer in final["per_head"]["mad"]]
    for row in final["per_layer"]:
        for key in ("mad_min", "mad_mean", "mad_max", "mad_range"):
            row[key] *= 8
    section["initial"]["min_mad_early"] *= 8
    final["settings"] = {"renormalize": True, "units": "grid", "probe_size": 4}
    write_complete(tmp_path, section, "grid")
    run = read_record(tmp_path)
    assert run is not None and run.headline().min_mad == pytest.approx(STEPS_3X3, abs=1e-4)
    assert old_units_note(run) == "distances stored in stats.units=grid, from before the one stored unit: not read"
