"""The surround preference's noise band: measured on untrained models of the run's architecture
without touching the run's random stream, recorded with the run, and read by the tables and figures: "surround
preference" only above it, "none measured" at or below it, "band not recorded" for an older record.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from record_fakes import write_run

from vit_locality.attention import plots
from vit_locality.attention.metrics import attention_summary
from vit_locality.attention.probe import probe_attention
from vit_locality.attention.stats_log import attention_section
from vit_locality.config.schema import StatsConfig
from vit_locality.extras.noise_band import BAND_SEEDS, surround_band
from vit_locality.model.vit import VisionTransformer
from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.tables import BAND_HEADERS, ablation_table


def build() -> VisionTransformer:
    return VisionTransformer(num_classes=10, image_size=16, depth=2, dim=32, heads=2)


def test_the_band_is_the_largest_untrained_head_and_leaves_the_run_s_random_stream(tmp_path: Path) -> None:
    torch.manual_seed(5)
    images = torch.randn(16, 3, 16, 16)
    before = torch.get_rng_state()
    band = surround_band(build, images, StatsConfig(probe_size=16), seeds=(1, 2))
    assert torch.equal(torch.get_rng_state(), before)  # the run's next draw is the one it would have made
    # Recomputed by hand: each seed's model, every layer's maps, the largest |control - MAD| of any head.
    expected = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        model = build().eval()
        with torch.no_grad():
            _, maps = model.forward_with_attention(images)
        expected.append(max(float(attention_summary(m)["surround_pref"].abs().max()) for m in maps))
    assert band["per_seed"] == pytest.approx(expected, abs=1e-7)
    assert band["surround_pref"] == pytest.approx(max(expected), abs=1e-7) and band["surround_pref"] > 0
    assert (band["seeds"], band["heads"], band["probe_images"]) == ([1, 2], 4, 16)
    assert len(BAND_SEEDS) >= 3  # "several seeds"


def test_the_record_keeps_the_band() -> None:
    torch.manual_seed(0)
    result = probe_attention(build(), torch.randn(4, 3, 16, 16), StatsConfig(probe_size=4))
    band = {"surround_pref": 0.002, "seeds": [1]}
    assert attention_section(result, 3, None, band)["attention"]["noise_band"] == band
    assert "noise_band" not in attention_section(result, 3, None)["attention"]


def with_min_head(run_dir: Path, pref: float, band: float | None) -> None:
    """Give write_run's record (minimum head: layer 0, head 0) a surround preference and, optionally, a band."""
    path = run_dir / "results.json"
    record = json.loads(path.read_text())
    final = record["attention"]["final"]
    mad = final["per_head"]["mad"]
    final["per_head"]["surround_pref"] = [[pref] * len(row) for row in mad]
    final["per_head"]["mad_control"] = [[v + pref for v in row] for row in mad]
    if band is not None:
        record["attention"]["noise_band"] = {"surround_pref": band, "seeds": list(BAND_SEEDS)}
    path.write_text(json.dumps(record))


def test_tables_read_the_min_head_against_its_run_s_band(tmp_path: Path) -> None:
    # The case: 0.036 is what a head with 10% of its mass on its 8 neighbours measures; against a band of
    # 0.040 it is no preference, against 0.001 it is one. At the band itself: none measured.
    with_min_head(write_run(tmp_path, "cifar100", "Baseline", 0, 50.0, 0.30, 0.5), 0.036, 0.040)
    with_min_head(write_run(tmp_path, "cifar100", "+LS", 0, 50.0, 0.30, 0.5), 0.036, 0.001)
    with_min_head(write_run(tmp_path, "cifar100", "+LS", 1, 50.0, 0.30, 0.5), 0.001, 0.001)
    with_min_head(write_run(tmp_path, "cifar100", "+AA", 0, 50.0, 0.30, 0.5), -0.009, 0.001)
    with_min_head(write_run(tmp_path, "cifar100", "Modern", 0, 50.0, 0.10, 0.5), 0.050, None)  # an older record
    table = ablation_table(aggregate([tmp_path]), "cifar100", "vit_paper")
    band, reads = (table.headers.index(header) for header in BAND_HEADERS)
    rows = {row[0]: (row[band], row[reads]) for row in table.rows}
    assert rows["Baseline"] == ("0.0400", "none measured")
    assert rows["+LS"] == ("0.0010", "none measured (1 of 2 runs); surround preference (1 of 2 runs)")
    assert rows["+AA"] == ("0.0010", "none measured")
    assert rows["Modern"] == ("-", "band not recorded")
    assert rows["+CM"] == ("-", "-")  # no runs
    records = {record["cell"]: record for record in table.records}
    assert records["Baseline"]["surround_pref_band"] == 0.040
    assert any("noise band" in note for note in table.notes)


def test_the_plane_joins_a_head_to_its_control_only_above_the_band() -> None:
    mad = torch.tensor([[0.10, 0.30]])
    control = torch.tensor([[0.50, 0.3005]])  # preferences 0.40 and 0.0005
    entropy = torch.tensor([[0.4, 0.5]])
    fig = plots.mad_entropy_plane(mad, entropy, "run", control=control, band=0.001)
    ax = fig.axes[0]
    joined = [
        line for line in ax.lines if len(line.get_xdata()) == 2 and round(float(line.get_ydata()[0]), 4) in (0.4, 0.5)
    ]
    assert [round(float(line.get_xdata()[0]), 4) for line in joined] == [0.1]
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "line: surround preference (control - MAD > noise band 0.0010)" in labels
    plots.plt.close(fig)
    unknown = plots.mad_entropy_plane(mad, entropy, "run", control=control)
    assert "line: control - MAD (noise band not recorded)" in [
        t.get_text() for t in unknown.axes[0].get_legend().get_texts()
    ]
    plots.plt.close(unknown)


def test_a_process_measures_a_design_s_band_once() -> None:
    # The band is a fixed function of the design, the images, the settings and the seeds: a sweep's later cells of
    # the same design reuse it (the tests' many quick cells too); other images are measured anew.
    torch.manual_seed(3)
    images, other = torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16)
    settings, design = StatsConfig(probe_size=8), ("test design", 10, 16)
    first = surround_band(build, images, settings, seeds=(1, 2), design=design)
    again = surround_band(build, images, settings, seeds=(1, 2), design=design)
    assert (first["reused"], again["reused"]) == (False, True)
    assert {**again, "reused": False} == first
    assert surround_band(build, other, settings, seeds=(1, 2), design=design)["reused"] is False
    assert surround_band(build, images, settings, seeds=(1, 2))["reused"] is False  # no design: always measured
