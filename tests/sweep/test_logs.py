"""Logs a person can read: every line once, no bar redrawn into a file, each parallel cell's
lines named, and how far the sweep is."""

from __future__ import annotations

import logging
from pathlib import Path

from helpers import CONF, QUICK, Spawner
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from vit_locality.callbacks import EpochLineProgress, EpochLogCallback, progress_display

from vit_locality.precheck.preflight import plan_command
from vit_locality.sweep.progress import cell_start_line
from vit_locality.train import name_the_cell_in_each_line


def test_a_bar_only_on_a_terminal() -> None:
    assert isinstance(progress_display("tqdm", terminal=True), TQDMProgressBar)
    lines = progress_display("tqdm", terminal=False)
    assert isinstance(lines, EpochLineProgress) and isinstance(lines, ProgressBar)  # no default bar added either
    assert isinstance(progress_display("rich", terminal=False), EpochLineProgress)
    none = progress_display("none", terminal=True)
    assert isinstance(none, EpochLogCallback) and not isinstance(none, ProgressBar)


def count_cells(argv: list[str]) -> int | None:
    checked = plan_command(argv, CONF)
    assert checked.problems == [] and checked.plan is not None
    return checked.plan.cell_count


def test_the_cells_of_a_sweep_are_counted() -> None:
    assert count_cells(["-m", "seed=0,1,2", "aug.cutmix=true,false", "data=synthetic"]) == 6
    assert count_cells(["-m", "experiment=demo"]) == 8  # a saved sweep's axes count too (the demo said "of 1")
    assert count_cells(["-m", "experiment=demo", "seed=0,1"]) == 16
    assert count_cells(["data=synthetic", "seed=0"]) is None  # one run
    assert count_cells(["-m", "hparams_search=optuna_lr", "data=synthetic"]) is None  # a search counts its own


def test_cell_start_line_estimates_from_finished_cells() -> None:
    assert cell_start_line(1, 4, []) == "cell 1 of 4"
    assert (
        cell_start_line(3, 4, [60.0, 120.0])
        == "cell 3 of 4, about 3 min 00 s left for the sweep (from 2 finished cells)"
    )
    assert cell_start_line(2, None, [10.0]) == "cell 2"


def test_parallel_cells_name_themselves_once() -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(name)s] - %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        name_the_cell_in_each_line("synthetic_vit_tiny_s0")
        name_the_cell_in_each_line("synthetic_vit_tiny_s0")
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "epoch 1/2", None, None)
        assert handler.format(record) == "[x] - [synthetic_vit_tiny_s0] epoch 1/2"
    finally:
        root.removeHandler(handler)


def test_a_redirected_sweep_logs_each_line_once_without_a_bar(tmp_path: Path, spawns: Spawner) -> None:
    """The user's command, its output to a file: `train.py -m ... seed=0,1 > log` with the default tqdm style."""
    quick = [arg for arg in QUICK if not arg.startswith("callbacks.progress_bar")]
    proc = spawns.run_train(["-m", *quick, "callbacks.progress_bar=tqdm", "seed=0,1", "sweep_name=logs"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert out.count("`Trainer.fit` stopped") == 2  # once per cell, not twice (Lightning's handler and Hydra's)
    assert "it/s]" not in out and "s/it]" not in out  # no bar redrawn into the log
    assert out.count("epoch 1/1 (") == 2
    assert "cell 1 of 2" in out and "cell 2 of 2, about" in out


LONG_NAME = (
    "synthetic_vit_tiny_aa1_cm1_ls0.1_s0_data.batch_size-64_data.test_size-64_data.train_size-256_trainer.max_epochs-1"
)


def test_a_run_name_title_fits_its_picture() -> None:
    """Per-run PNG titles were cut off at the figure's edges; every title line now lies inside the figure."""
    import torch

    from vit_locality.attention import plots

    figures = [
        plots.mad_entropy_plane(torch.rand(4, 3), torch.rand(4, 3), LONG_NAME),
        plots.central_query_maps(torch.rand(4, 3, 8, 8), [0, 1], f"{LONG_NAME}: mean attention of the central query"),
        plots.layer_head_heatmap(torch.rand(4, 3), LONG_NAME),
    ]
    for fig in figures:
        renderer = fig.canvas.get_renderer()
        fig.draw(renderer)
        titles = [text for ax in fig.axes for text in (ax.title,) if text.get_text()] + [fig._suptitle] * bool(
            fig._suptitle
        )
        assert titles
        for text in titles:
            box = text.get_window_extent(renderer)
            assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (text.get_text(), box, fig.bbox.width)
        plots.plt.close(fig)
    assert plots.wrap_title("a_b", 5, 10) == "a_b" and "\n" in plots.wrap_title(LONG_NAME, 5.5, 10)


def test_debug_overfit_is_quick_and_memorises(tmp_path: Path, spawns: Spawner) -> None:
    """`python train.py debug=overfit data=synthetic model=vit_tiny` took 5 minutes; the target is under 1 minute of
    training (import and start-up on top, on a shared 2-core machine)."""
    proc = spawns.run_train(
        ["debug=overfit", "data=synthetic", "model=vit_tiny", "startup.print_config=false"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    epochs = [line for line in (proc.stdout + proc.stderr).splitlines() if "train/loss_epoch" in line]
    seconds = [float(line.split("/50 (")[1].split(" s")[0]) for line in epochs]  # each epoch's own duration
    assert len(seconds) == 50 and sum(seconds) < 60, sum(seconds)
    losses = [float(line.split("train/loss_epoch ")[1].split(",")[0]) for line in epochs]
    assert losses[-1] < losses[0] / 2
