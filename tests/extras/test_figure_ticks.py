"""Plain tick labels on the project's figures: values that sit close together would otherwise print as matplotlib's
offset notation ("1e-6+5.17001e-1"). With matplotlib's default threshold (an offset once it saves 4 digits), values
from 0.517000 to 0.517002 get one; 0.51700 to 0.51702 do not, so the tests use the former."""

from __future__ import annotations

from pathlib import Path

from vit_locality.attention import plots
from vit_locality.extras.instrument_figures import trajectory_figure
from vit_locality.extras.instrument_tables import Instruments
from vit_locality.extras.instruments.trajectory import Trajectory
from vit_locality.report.load.aggregate import Group
from vit_locality.report.render.figures import layers_figure
from vit_locality.store.record import RunRecord

plt = plots.plt
CLOSE = [0.517000, 0.5170005, 0.517001, 0.5170015, 0.517002]


def offsets(fig: plt.Figure) -> list[str]:
    """Every axis' offset text after drawing (the offset is only decided at draw time)."""
    fig.canvas.draw()
    return [axis.get_offset_text().get_text() for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)]


def test_matplotlib_uses_an_offset_without_the_helper() -> None:
    """The failing case the helper exists for: the same figure, untouched, shows an offset."""
    fig, ax = plt.subplots()
    ax.plot(CLOSE, CLOSE)
    assert any(offsets(fig))
    plt.close(fig)


def test_helper_gives_plain_labels() -> None:
    fig, ax = plt.subplots()
    ax.plot(CLOSE, CLOSE)
    plots.plain_tick_labels(fig)
    assert offsets(fig) == ["", ""]
    labels = [label.get_text() for label in ax.get_yticklabels()]
    assert any(text.startswith("0.517") for text in labels) and not any("e" in text for text in labels)
    plt.close(fig)


def test_saving_makes_labels_plain(tmp_path: Path) -> None:
    fig, ax = plt.subplots()
    ax.plot(CLOSE, CLOSE)
    plots.save(fig, tmp_path / "close.png")
    assert offsets(fig) == ["", ""]


def test_report_layers_figure_is_plain() -> None:
    per_layer = [
        {"layer": i, "mad_min": v, "mad_mean": v, "mad_max": v, "entropy_min": v, "entropy_mean": v, "entropy_max": v}
        for i, v in enumerate(CLOSE)
    ]
    run = RunRecord(Path("no-such-run"), {"attention": {"final": {"early_layers": 1, "per_layer": per_layer}}})
    fig = layers_figure({"Baseline": Group(key=None, runs=[run])}, "close", [])  # type: ignore[arg-type]
    assert not any(offsets(fig))
    plt.close(fig)


def test_instrument_trajectory_figure_is_plain() -> None:
    run = RunRecord(Path("no-such-run"), {})
    trajectory = Trajectory([1, 2, 3, 4, 5], CLOSE, CLOSE)
    found = Instruments("demo", "vit_tiny", {}, _trajectories={"Baseline": [(run, trajectory)]})
    fig = trajectory_figure(found)
    assert not any(offsets(fig))
    plt.close(fig)
