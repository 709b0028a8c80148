"""The instruments' report and the one-page HTML report, on a two-cell sweep written here: real tiny models (their
checkpoints, probe statistics and pictures) with per-epoch accuracies and minimum MADs chosen so that the matched-
accuracy figures can be worked out by hand. The page is then opened as a reader would, in headless Chromium with
the network blocked."""

from __future__ import annotations

import base64
import csv
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch
from helpers import Spawner
from omegaconf import OmegaConf

from tests.helpers import QUICK, compose_config
from vit_locality.attention.probe import probe_attention
from vit_locality.attention.stats_log import attention_section, probe_rows, save_pictures, write_csv
from vit_locality.config.schema import StatsConfig
from vit_locality.extras.html_page import END_COLOUR
from vit_locality.model.vit import VisionTransformer
from vit_locality.report.__main__ import main

# Completed epoch -> (validation top-1, minimum early-layer MAD) per cell, written into the runs' logs.
TRAJECTORIES = {
    "Baseline": {1: (0.2, 0.5), 2: (0.4, 0.4), 3: (0.6, 0.3)},
    "+CM": {1: (0.1, 0.45), 2: (0.3, 0.25), 3: (0.5, 0.1)},
}
# Both cells cover validation top-1 from 0.2 to 0.5: matched levels 0.275, 0.35, 0.425. At 0.35 Baseline is 3/4 of
# the way from epoch 1 (0.2) to 2 (0.4): MAD 0.5 - 0.75 x 0.1 = 0.425; +CM 1/4 of the way from epoch 2 (0.3) to 3
# (0.5): 0.25 - 0.25 x 0.15 = 0.2125.
AT_035 = {"Baseline": 0.425, "+CM": 0.2125}


def _write_run(sweep: Path, cell: str, seed: int) -> Path:
    cutmix = cell == "+CM"
    cfg = compose_config([*QUICK, "protocol=baseline", f"aug.cutmix={str(cutmix).lower()}", f"seed={seed}"])
    config = OmegaConf.to_container(cfg, resolve=True)
    run_dir = sweep / f"{cell.replace('+', 'p')}_s{seed}"
    torch.manual_seed(seed + (7 if cutmix else 0))
    model = VisionTransformer(num_classes=10, image_size=32, depth=2, dim=32, heads=2)
    with torch.no_grad():  # sharper attention than at initialisation, so heads differ
        for block in model.blocks:
            block.attn.qkv.weight.mul_(6.0)
    result = probe_attention(model, torch.randn(8, 3, 32, 32), StatsConfig())
    rows = []
    for epoch in range(4):
        mad = 0.517 if epoch == 0 else TRAJECTORIES[cell][epoch][1]
        for row in probe_rows(result, epoch, 10 * epoch):
            row["mad"] = mad + 0.01 * (row["layer"] + row["head"])  # layer 0, head 0 is the minimum
            rows.append(row)
    write_csv(run_dir / "attention_stats.csv", rows)
    (run_dir / "csv").mkdir(parents=True)
    with (run_dir / "csv" / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", "step", "train/loss", "val/acc1"])
        for epoch, (acc, _) in TRAJECTORIES[cell].items():
            writer.writerow([epoch - 1, 10 * epoch, 2.0, ""])  # a training row: no accuracy
            writer.writerow([epoch - 1, 10 * epoch, "", acc])  # Lightning's 0-based index of the finished epoch
    section = attention_section(result, 3, {"min_mad_early": 0.517, "mean_entropy_early": 1.0})["attention"]
    section["final"]["min_mad_early"] = TRAJECTORIES[cell][3][1]
    record = {
        "run_name": run_dir.name,
        "identity_hash": f"hash-{run_dir.name}",
        "seed": seed,
        "data": {"name": "synthetic"},
        "protocol": {"autoaug": False, "cutmix": cutmix, "ls": 0.0},
        "model": {"name": "vit_tiny", "depth": 2, "dim": 32, "heads": 2},
        "metrics": {"test/acc1": TRAJECTORIES[cell][3][0]},
        "epochs": 3,
        "measured_on": {"eval_split": "val"},  # matched accuracy reads a held-out split only (data.val_size > 0)
        "config": config,
        "attention": section,
        "status": "complete",
    }
    (run_dir / "results.json").write_text(json.dumps(record))
    hparams = {
        "num_classes": 10,
        "image_size": 32,
        "model": {"depth": 2, "dim": 32, "heads": 2, "mlp_ratio": 2.0},
        "mean": [0.5, 0.5, 0.5],
        "std": [0.25, 0.25, 0.25],
    }
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    (run_dir / "checkpoints").mkdir()
    torch.save({"state_dict": state, "hyper_parameters": hparams}, run_dir / "checkpoints" / "last.ckpt")
    save_pictures(result, run_dir, run_dir.name)
    return run_dir


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweeps") / "study"
    for cell in TRAJECTORIES:
        _write_run(root, cell, 0)
    return root


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_instruments_cli_tables_and_figures(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "reports"
    assert main(["instruments", str(sweep), "--out", str(out), "--box-images", "16"]) == 0
    printed = capsys.readouterr().out
    assert "### Locality at matched accuracy: synthetic, vit_tiny" in printed
    matched = {row["cell"]: row for row in _csv(out / "matched_synthetic_vit_tiny.csv")}
    for cell, value in AT_035.items():
        assert float(matched[cell]["min_mad_at_0.3500"]) == pytest.approx(value)
        assert float(matched[cell]["final_min_mad"]) == pytest.approx(TRAJECTORIES[cell][3][1])
    masses = _csv(out / "masses_synthetic_vit_tiny.csv")
    assert [row["cell"] for row in masses] == ["Baseline", "+CM"]
    for row in masses:
        total = sum(float(row[key]) for key in ("self_mass", "neighbour_mass", "far_mass"))
        assert total == pytest.approx(1.0, abs=1e-5)
    positions = _csv(out / "positions_synthetic_vit_tiny.csv")
    assert len(positions) == 2 and all(-1 <= float(row["position_locality"]) <= 1 for row in positions)
    box = _csv(out / "box_synthetic_vit_tiny.csv")
    assert [(row["cell"], row["layer"]) for row in box] == [
        ("Baseline", "0"),
        ("Baseline", "1"),
        ("+CM", "0"),
        ("+CM", "1"),
    ]
    assert all(0 <= float(row["mixed"]) <= 1 and float(row["uniform"]) == 0.75 for row in box)
    for kind in ("masses", "positions", "trajectory"):
        assert (out / f"{kind}_synthetic_vit_tiny.png").stat().st_size > 1000
    # Baseline and +CM alone sweep no knob: the dose-response figure would be six empty panels, so it is left out
    assert not (out / "dose_synthetic_vit_tiny.png").exists()
    assert "note: figure dose_synthetic_vit_tiny left out: no runs along aug.cutmix_alpha," in printed


class _Links(HTMLParser):
    """Every tag and every src / href value of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs += [(tag, value or "") for name, value in attrs if name in ("src", "href", "srcset", "data")]


@pytest.fixture(scope="module")
def page(sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pages")
    assert main(["page", str(sweep), "--out", str(out), "--box-images", "16"]) == 0
    return out / "study.html"


def test_page_is_self_contained(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    parser = _Links()
    parser.feed(text)
    assert "script" not in parser.tags and "link" not in parser.tags and "iframe" not in parser.tags
    assert "url(" not in text and "@import" not in text
    images = [value for tag, value in parser.refs if tag == "img"]
    others = [value for tag, value in parser.refs if tag != "img"]
    assert all(value.startswith("#") for value in others)  # only the table of contents' own anchors
    # plane, layers, emergence; masses, positions, trajectory (no dose: no knob swept); one map picture per cell
    assert len(images) == 3 + 3 + 2
    assert "<li>figure dose_synthetic_vit_tiny left out: no runs along aug.cutmix_alpha," in text
    for value in images:
        prefix = "data:image/png;base64,"
        assert value.startswith(prefix)
        png = base64.b64decode(value[len(prefix) :])
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    for title in (
        "8-cell ablation: synthetic, vit_tiny",
        "Self, neighbourhood, far: synthetic, vit_tiny",
        "Learned position embeddings: synthetic, vit_tiny",
        "Attention across a pasted box",
        "Locality at matched accuracy: synthetic, vit_tiny",
        "Central-query attention maps, layers 0 and 1",
    ):
        assert title in text
    assert "Baseline: Baseline_s0 (seed 0)" in text and "+CM: pCM_s0 (seed 0)" in text


def _chromium() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser") if shutil.which(name)), None)


def test_page_renders_whole_in_headless_chromium_offline(page: Path, tmp_path: Path, spawns: Spawner) -> None:
    """A screenshot tall enough for the page: it must show the footer's colour bar (so everything above it was laid
    out within the shot) and real content (figures), with every network request routed to nowhere."""
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium binary on PATH (Debian: apt-get install chromium); .ci/run installs it")
    shot = tmp_path / "page.png"
    command = [
        browser,
        "--headless",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--hide-scrollbars",
        "--proxy-server=127.0.0.1:9",  # any http(s) request would go to a closed port
        "--host-resolver-rules=MAP * ~NOTFOUND",  # and no name resolves
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,12000",
        f"--screenshot={shot}",
        page.resolve().as_uri(),
    ]
    subprocess.run(command, capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    pixels = matplotlib.image.imread(shot)[::2, ::2, :3]  # every other pixel is plenty for colours and bars
    rgb = (pixels * 255).round().astype(int)
    end = tuple(int(END_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    footer_rows = np.nonzero((np.abs(rgb - np.array(end)).sum(axis=-1) <= 6).sum(axis=1) > 100)[0]
    assert footer_rows.size > 0, "the footer is not in the screenshot: the page did not render whole"
    above = rgb[: footer_rows.min()]
    assert (above.sum(axis=-1) < 3 * 240).mean() > 0.05  # tables and figures, not a blank page
    assert len(np.unique(above.reshape(-1, 3)[::13], axis=0)) > 200  # colour figures, not only text


def test_runs_an_instrument_cannot_use_are_noted_not_fatal(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A damaged checkpoint and a run whose data cannot be rebuilt: both runs stay in the tables that need neither
    (matched accuracy), drop out of the ones that do, and each gets a note naming it."""
    copy = tmp_path / "study"
    shutil.copytree(sweep, copy)
    (copy / "Baseline_s0" / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    record_path = copy / "pCM_s0" / "results.json"
    record = json.loads(record_path.read_text())
    record["config"]["data"]["no_such_setting"] = 1  # the data layer refuses it
    record_path.write_text(json.dumps(record))
    out = tmp_path / "reports"
    assert main(["instruments", str(copy), "--out", str(out), "--box-images", "16"]) == 0
    printed = capsys.readouterr().out
    assert f"note: {copy / 'Baseline_s0'}: checkpoints/last.ckpt is unusable" in printed
    assert f"note: {copy / 'pCM_s0'}: probe images not rebuilt" in printed
    assert [row["cell"] for row in _csv(out / "positions_synthetic_vit_tiny.csv")] == ["+CM"]
    assert not (out / "box_synthetic_vit_tiny.csv").exists()  # no run left for it: the table is left out
    assert [row["cell"] for row in _csv(out / "matched_synthetic_vit_tiny.csv")] == ["Baseline", "+CM"]


def test_two_sweeps_of_one_name_get_two_pages(sweep: Path, tmp_path: Path) -> None:
    for parent in ("a", "b"):
        shutil.copytree(sweep, tmp_path / parent / "study")
    out = tmp_path / "pages"
    assert (
        main(
            [
                "page",
                str(tmp_path / "a" / "study"),
                str(tmp_path / "b" / "study"),
                "--out",
                str(out),
                "--box-images",
                "0",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.glob("*.html")) == ["study.html", "study_2.html"]
    assert str(tmp_path / "b" / "study") in (out / "study_2.html").read_text(encoding="utf-8")


def test_a_page_without_notes_says_none() -> None:
    from vit_locality.extras.html_page import render_page

    page = render_page("t", "s.", [("Tables", "<p>x</p>")], [])
    assert '<ul class="notes"><li>none</li></ul>' in page and '<a href="#s0">Tables</a>' in page
