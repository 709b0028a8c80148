"""Figures that do not make noise look like an effect: axes keep a sensible minimum span, titles
say what the data are (one seed is one run, flat lines at uniform are no emergence), and a legend stays off the
references' labels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch
from record_fakes import write_run

from vit_locality.attention import plots
from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.figures import emergence_figure, layers_figure
from vit_locality.report.stats.claim_units import uniform_mad

UNIFORM = uniform_mad(8)


def untrained_sweep(root: Path) -> dict:
    """Baseline and Modern, one seed each, every head at uniform attention (MAD 0.517, entropy 0.9990-0.9999) at
    every epoch: a one-epoch sweep on which nothing has been learned."""
    for cell, entropy in (("Baseline", 0.9990), ("Modern", 0.9999)):
        run_dir = write_run(root, "synthetic", cell, 0, 10.0, UNIFORM - 0.002, entropy, model="vit_tiny")
        path = run_dir / "results.json"
        record = json.loads(path.read_text())
        for row in record["attention"]["final"]["per_layer"]:
            row.update({key: UNIFORM - 0.002 for key in ("mad_min", "mad_mean", "mad_max")})
        path.write_text(json.dumps(record))
        with (run_dir / "attention_stats.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["epoch", "step", "layer", "head", "mad", "entropy"])
            for epoch in (0, 1):
                for layer in range(3):
                    writer.writerows([epoch, epoch * 10, layer, head, UNIFORM - 0.002, entropy] for head in range(2))
    return aggregate([root]).cells("synthetic", "vit_tiny")


def test_the_layers_figure_keeps_a_minimum_entropy_span_and_says_one_seed(tmp_path: Path) -> None:
    fig = layers_figure(untrained_sweep(tmp_path), "synthetic, vit_tiny", [])
    for ax in fig.axes[2:4]:  # the entropy panels
        low, high = ax.get_ylim()
        assert high - low >= 0.1 - 1e-9 and low <= 0.999 and high >= 0.9999
    title = fig._suptitle.get_text()
    assert "one seed per cell" in title and "mean over seeds" not in title
    plots.plt.close(fig)


def test_the_emergence_figure_does_not_call_flat_uniform_lines_emergence(tmp_path: Path) -> None:
    fig = emergence_figure(untrained_sweep(tmp_path), "synthetic, vit_tiny", [])
    title = fig.axes[0].get_title()
    assert "emergence of locality" not in title
    assert "minimum early-layer MAD per epoch" in title and "attention still uniform" in title
    plots.plt.close(fig)


def test_the_per_run_plane_s_legend_stays_off_the_uniform_label() -> None:
    mad = torch.tensor([[0.30, 0.45], [0.40, 0.50]])
    entropy = torch.tensor([[0.2, 0.3], [0.4, 0.1]])
    fig = plots.mad_entropy_plane(mad, entropy, "run", control=mad + 0.02, band=0.001)
    fig.canvas.draw()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    uniform = next(text for text in ax.texts if text.get_text().strip() == "uniform").get_window_extent(renderer)
    assert not legend.overlaps(uniform)
    plots.plt.close(fig)
