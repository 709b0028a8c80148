"""The report's figures say no more than the runs: a figure with nothing to draw is left out of the files and the
page with one line saying why (a dose-response knob no run sweeps has no panel); every axis' label matches what is
drawn on it (top-1 in percent); the emergence title says whether a band over seeds is drawn; legends never cover
the labels of the reference lines (the demo's plane put its layer legend over `uniform`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from record_fakes import ORDER, config, write_run

from vit_locality.attention import plots
from vit_locality.extras.instrument_figures import dose_figure, write_instrument_figures
from vit_locality.extras.instrument_tables import measure
from vit_locality.report.__main__ import main
from vit_locality.report.load.aggregate import aggregate
from vit_locality.report.render.figures import emergence_figure, layers_figure, plane_figure, write_figures

plt = plots.plt
REFERENCE_LABELS = ("3x3 neighbourhood", "self only", "uniform")


def _strip_statistics(run_dir: Path) -> None:
    """The run as `stats.enabled=false` leaves it: no attention section, no attention_stats.csv."""
    record = json.loads((run_dir / "results.json").read_text())
    record.pop("attention")
    (run_dir / "results.json").write_text(json.dumps(record))
    (run_dir / "attention_stats.csv").unlink()


def test_figures_with_nothing_to_draw_are_left_out_with_a_line(tmp_path: Path) -> None:
    for seed in (0, 1):
        _strip_statistics(write_run(tmp_path / "sweep", "cifar100", "Baseline", seed, 50.0, 0.3, 0.8))
    agg = aggregate([tmp_path / "sweep"])
    notes: list[str] = []
    assert write_figures(agg, tmp_path / "out", notes) == []
    assert notes == [
        "figure plane_cifar100_vit_paper left out: no run has per-head attention statistics",
        "figure layers_cifar100_vit_paper left out: no run has per-layer attention statistics",
        "figure emergence_cifar100_vit_paper left out: no run has per-epoch attention statistics (attention_stats.csv)",
    ]
    found = measure(agg, "cifar100", "vit_paper", 0)
    assert write_instrument_figures(found, tmp_path / "out") == []
    left_out = [note for note in found.notes if note.startswith("figure ")]
    assert [note.split(":")[0] for note in left_out] == [
        f"figure {kind}_cifar100_vit_paper left out" for kind in ("masses", "positions", "trajectory", "dose")
    ]
    assert not list((tmp_path / "out").glob("*.png"))


def test_the_page_leaves_empty_figures_out_and_says_why(tmp_path: Path) -> None:
    _strip_statistics(write_run(tmp_path / "sweep", "cifar100", "Baseline", 0, 50.0, 0.3, 0.8))
    assert main(["page", str(tmp_path / "sweep"), "--out", str(tmp_path / "out"), "--box-images", "0"]) == 0
    page = (tmp_path / "out" / "sweep.html").read_text()
    assert "<img " not in page
    for kind in ("plane", "layers", "emergence", "masses", "positions", "trajectory", "dose"):
        assert f"<li>figure {kind}_cifar100_vit_paper left out: " in page


def test_dose_panels_only_for_swept_knobs_and_top1_axes_in_percent(tmp_path: Path) -> None:
    """Label smoothing at 0, 0.05 and 0.1 on Baseline's other settings: one column (ls); CutMix's knobs are not
    swept, so they get no empty panel, and the title says so."""
    root = tmp_path / "sweep"
    for ls, acc in ((0.0, 50.0), (0.05, 55.0), (0.1, 60.0)):
        cell = "+LS" if ls else "Baseline"
        cfg = config(0, aug__cutmix=False, loss__ls=ls)
        run = write_run(root, "cifar100", cell, 0, acc, 0.3, 0.8, config=cfg, name=f"_ls{ls}")
        record = json.loads((run / "results.json").read_text())
        record["protocol"]["ls"] = ls
        (run / "results.json").write_text(json.dumps(record))
    found = measure(aggregate([root]), "cifar100", "vit_paper", 0)
    fig = dose_figure(found)
    assert len(fig.axes) == 2 and "not swept: aug.cutmix_alpha, aug.cutmix_prob" in fig._suptitle.get_text()
    for ax in fig.axes:
        drawn = [line for line in ax.lines if not line.get_label().startswith("_")]
        assert drawn, f"an empty panel: {ax.get_ylabel()}"
        if ax.get_ylabel() == "top-1 (%)":
            values = [float(v) for line in drawn for v in line.get_ydata()]
            assert len(values) >= 2 and all(min(abs(v - a) for a in (50.0, 55.0, 60.0)) < 1e-9 for v in values)
            assert ax.get_ylim()[0] < min(values) and ax.get_ylim()[1] > max(values)  # percent, on the percent scale
        else:
            assert ax.get_ylabel() == "minimum early-layer MAD (unit)"
    plt.close(fig)


def _cells(tmp_path: Path, seeds: int) -> dict:
    root = tmp_path / f"seeds{seeds}"
    for i, cell in enumerate(ORDER):
        for seed in range(seeds):
            write_run(root, "cifar100", cell, seed, 50.0 + i, 0.05 + 0.05 * i + 0.01 * seed, 0.8)
    return aggregate([root]).cells("cifar100", "vit_paper")


@pytest.mark.parametrize("seeds", [1, 2])
def test_the_emergence_title_says_whether_a_band_is_drawn(tmp_path: Path, seeds: int) -> None:
    fig = emergence_figure(_cells(tmp_path, seeds), "demo", [])
    title = fig.axes[0].get_title()
    bands = [c for c in fig.axes[0].collections if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")]
    if seeds == 1:
        assert "one seed per cell: its own line, no band" in title and "band over seeds" not in title and not bands
    else:
        assert "mean, min-max band over seeds" in title and len(bands) == len(ORDER)
    plt.close(fig)


def _overlaps(legend_box, texts: list, renderer) -> list[str]:
    return [text.get_text() for text in texts if legend_box.overlaps(text.get_window_extent(renderer))]


def _demo_like(tmp_path: Path) -> dict:
    """The demo's look: 8 cells, one seed, every head near uniform (MAD 0.43-0.52) at every epoch and layer, so the
    lines fill the top of each MAD panel and leave the bottom, where the references are labelled, empty."""
    root = tmp_path / "demo"
    for i, cell in enumerate(ORDER):
        run = write_run(root, "cifar100", cell, 0, 70.0 + i, 0.43 + 0.005 * i, 0.8)
        record = json.loads((run / "results.json").read_text())
        for row in record["attention"]["final"]["per_layer"]:
            row["mad_min"] = row["mad_mean"] = 0.43 + 0.005 * i + 0.01 * row["layer"]
        (run / "results.json").write_text(json.dumps(record))
        rows = ["epoch,step,layer,head,mad"]
        rows += [f"{e},{10 * e},{layer},0,{0.517 - e * 0.02 - 0.002 * i}" for e in range(4) for layer in range(3)]
        (run / "attention_stats.csv").write_text("\n".join(rows) + "\n")
    return aggregate([root]).cells("cifar100", "vit_paper")


def test_legends_never_cover_the_reference_labels(tmp_path: Path) -> None:
    cells = _demo_like(tmp_path)
    for make in (plane_figure, emergence_figure, layers_figure):
        fig = make(cells, "demo", [])
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = [legend for ax in fig.axes if (legend := ax.get_legend())] + list(fig.legends)
        assert len(legends) == 1, make.__name__
        box = legends[0].get_window_extent(renderer)
        references = [t for ax in fig.axes for t in ax.texts if t.get_text().strip().startswith(REFERENCE_LABELS)]
        assert references and _overlaps(box, references, renderer) == [], make.__name__
        figure_box = fig.bbox
        assert box.x0 >= figure_box.x0 and box.x1 <= figure_box.x1 and box.y0 >= figure_box.y0, make.__name__
        plt.close(fig)
