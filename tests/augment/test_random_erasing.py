"""Random Erasing (`aug.erasing`), the occlusion control for CutMix: off, every cell is the one it was; on, a box per
image set to 0 with torchvision's distribution on both data paths, labels untouched, and a cell named apart."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import CONF, QUICK, typed
from scipy import stats
from torchvision.transforms import v2

from vit_locality.config.identity import identity_hash
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.data.on_device import BatchAugment, DeviceTrainLoader, draw_crop_flip, draw_erasing, erase
from vit_locality.precheck.preflight import check_command, plan_command
from vit_locality.run.builders import build_datamodule

SIZE, DRAWS = 32, 6000
SCALE = (0.02, 0.33)


def _torchvision_boxes(prob: float, scale: tuple[float, float], draws: int) -> torch.Tensor:
    """(draws, 4) top, left, height, width from torchvision's own RandomErasing (height 0: not erased)."""
    torch.manual_seed(0)
    transform = v2.RandomErasing(p=prob, scale=scale, value=0)
    image = torch.full((3, SIZE, SIZE), 255, dtype=torch.uint8)
    boxes = []
    for _ in range(draws):
        erased = (transform(image) == 0).all(dim=0)
        rows, cols = erased.any(dim=1).nonzero(), erased.any(dim=0).nonzero()
        if len(rows) == 0:
            boxes.append([0, 0, 0, 0])
        else:
            boxes.append([int(rows[0]), int(cols[0]), len(rows), len(cols)])
    return torch.tensor(boxes)


def _device_boxes(prob: float, scale: tuple[float, float], draws: int) -> torch.Tensor:
    return draw_erasing(draws, SIZE, SIZE, prob, scale, torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def torchvision_boxes() -> torch.Tensor:
    return _torchvision_boxes(0.5, SCALE, DRAWS)


@pytest.mark.parametrize("scale", [SCALE, (0.3, 0.9), (0.8, 1.0)], ids=["default", "most-too-large", "hardly-fits"])
def test_the_erased_share_follows_torchvisions_distribution(scale: tuple[float, float]) -> None:
    """The share of each image erased, its height and width, and where the box sits: the device path's batched
    draws against torchvision's per-image ones, 6000 each (two-sample Kolmogorov-Smirnov, and the erased fraction
    within four standard errors of torchvision's). At the larger scale most tries do not fit, so which try is
    taken, and whether any is, shows."""
    torchvision_boxes = _torchvision_boxes(0.5, scale, DRAWS)
    ours = _device_boxes(0.5, scale, DRAWS)
    for name, column in (("top", 0), ("left", 1), ("height", 2), ("width", 3)):
        assert stats.ks_2samp(ours[:, column], torchvision_boxes[:, column]).pvalue > 1e-3, name
    share = (ours[:, 2] * ours[:, 3]).double() / SIZE**2
    expected = (torchvision_boxes[:, 2] * torchvision_boxes[:, 3]).double() / SIZE**2
    assert stats.ks_2samp(share, expected).pvalue > 1e-3
    erased, reference = (ours[:, 2] > 0).double().mean(), (torchvision_boxes[:, 2] > 0).double().mean()
    assert abs(erased - reference) < 4 * math.sqrt(0.25 / DRAWS) * math.sqrt(2)
    assert share[ours[:, 2] > 0].min() > 0.7 * scale[0] and share.max() < 1  # within the scale, less rounding


def test_a_distribution_off_by_one_setting_is_told_apart(torchvision_boxes: torch.Tensor) -> None:
    """The comparison can fail: boxes of a larger scale range are not torchvision's at the default one."""
    wider = _device_boxes(0.5, (0.02, 0.5), DRAWS)
    area = (wider[:, 2] * wider[:, 3]).double()
    assert stats.ks_2samp(area, (torchvision_boxes[:, 2] * torchvision_boxes[:, 3]).double()).pvalue < 1e-6


def test_the_worker_path_is_torchvisions_random_erasing_last() -> None:
    protocol = TrainingProtocol(erasing=True, erasing_prob=0.25, erasing_scale=(0.1, 0.2))
    transform = build_datamodule(typed([*QUICK, "protocol=baseline", "aug.erasing=true"])).train_transform
    last = transform.transforms[-1]
    assert isinstance(last, v2.RandomErasing) and last.p == 0.5 and tuple(last.scale) == SCALE
    from vit_locality.augment.mixing import build_train_transform

    built = build_train_transform(SIZE, protocol).transforms[-1]
    assert isinstance(built, v2.RandomErasing) and built.p == 0.25 and tuple(built.scale) == (0.1, 0.2)
    assert built.value == [0.0]


def test_both_paths_erase_each_pixel_as_often() -> None:
    """Per pixel, how often it is erased over 3000 images: the device path against the worker path (torchvision
    in the per-sample transform), the whole maps within 0.035 of each other (about 4 standard errors)."""
    draws = 3000
    images = torch.full((draws, 3, SIZE, SIZE), 255, dtype=torch.uint8)
    device = erase(images, _device_boxes(0.5, SCALE, draws))[:, 0] == 0
    torch.manual_seed(3)
    worker = torch.stack([v2.RandomErasing(p=0.5, scale=SCALE, value=0)(image)[0] == 0 for image in images])
    gap = (device.double().mean(0) - worker.double().mean(0)).abs().max()
    assert gap < 0.035, gap
    assert 0.05 < float(device.double().mean()) < 0.1  # about p x the mean share: 0.5 x 0.16


def test_erasing_sets_a_box_to_zero_and_leaves_the_rest_and_the_labels() -> None:
    images = torch.randint(1, 256, (64, 3, SIZE, SIZE), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    labels = torch.arange(64)
    plain = BatchAugment(SIZE, TrainingProtocol())
    erasing = BatchAugment(SIZE, TrainingProtocol(erasing=True, erasing_prob=1.0))
    a = list(DeviceTrainLoader(images, labels, 16, seed=5, augment=plain))
    b = list(DeviceTrainLoader(images, labels, 16, seed=5, augment=erasing))
    for (x, y), (x_erased, y_erased) in zip(a, b, strict=True):
        assert torch.equal(y, y_erased)  # labels untouched
        changed = (x != x_erased).any(dim=1)
        assert changed.flatten(1).any(1).all()  # p = 1: every image gets its box (pixels are 1..255 before)
        assert (x_erased[:, 0][changed] == 0).all()  # what changed is now 0
        for image in changed:  # one box per image: its changed pixels span a rectangle
            rows, cols = image.any(1).nonzero().squeeze(1), image.any(0).nonzero().squeeze(1)
            if len(rows):
                box = image[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
                assert box.all() or (x[:, 0] == 0).any()


def test_off_draws_nothing_more_so_every_earlier_cell_is_the_same() -> None:
    """Off, the device path's generator ends where crop and flip alone leave it (no draw added), the worker path
    has no erasing step, and the identity and run name are the ones saved before the knob existed."""
    images = torch.randint(0, 256, (8, 3, SIZE, SIZE), dtype=torch.uint8)
    generator, reference = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    BatchAugment(SIZE, TrainingProtocol())(images, generator)
    draw_crop_flip(8, SIZE // 8, reference)
    assert torch.equal(generator.get_state(), reference.get_state())
    transform = build_datamodule(typed([*QUICK, "protocol=baseline"])).train_transform
    assert [type(t) for t in transform.transforms] == [v2.RandomCrop, v2.RandomHorizontalFlip]
    off = typed([*QUICK, "aug.erasing=false", "aug.erasing_prob=0.5", "aug.erasing_scale=[0.02,0.33]"])
    assert identity_hash(off) == identity_hash(typed(QUICK))
    assert identity_hash(typed([*QUICK, "aug.erasing=true"])) != identity_hash(typed(QUICK))
    assert TrainingProtocol.from_record({"autoaug": False, "cutmix": True, "ls": 0.0}).erasing is False


def test_ddp_ranks_together_hold_the_one_process_batches_erased_alike() -> None:
    images, labels = torch.randint(0, 256, (96, 3, SIZE, SIZE), dtype=torch.uint8), torch.arange(96)
    augment = BatchAugment(SIZE, TrainingProtocol(autoaug=True, policy="cifar10", erasing=True, erasing_prob=0.8))
    one = DeviceTrainLoader(images, labels, 24, seed=7, augment=augment)
    ranks = [DeviceTrainLoader(images, labels, 12, 7, augment, world=2, rank=r) for r in (0, 1)]
    for (x, y), (x0, y0), (x1, y1) in zip(one, *ranks, strict=True):
        assert torch.equal(y[0::2], y0) and torch.equal(y[1::2], y1)
        assert torch.equal(x[0::2], x0) and torch.equal(x[1::2], x1)


def test_the_cell_is_named_described_and_tagged_apart() -> None:
    baseline = TrainingProtocol(erasing=True)
    assert baseline.cell_name == "Baseline+RE" and TrainingProtocol(erasing=True, cutmix=True).cell_name == "+CM+RE"
    assert baseline.describe() == "crop+flip | erasing(p=0.5, scale=(0.02, 0.33))"
    assert baseline.tags()[-1] == "re1" and "re1" not in TrainingProtocol().tags()
    assert baseline.group_key() != TrainingProtocol().group_key()
    record = baseline.record()
    assert (record["erasing"], record["erasing_prob"], record["erasing_scale"]) == (True, 0.5, (0.02, 0.33))
    assert TrainingProtocol().record()["erasing_prob"] is None  # a setting that did not apply


def test_a_sweep_over_the_knob_runs_two_cells_in_two_directories(tmp_path) -> None:
    args = ["-m", *QUICK, "protocol=baseline", "aug.erasing=true,false", f"hydra.sweep.dir={tmp_path}"]
    checked = plan_command(args, CONF)
    assert checked.problems == []
    plans = [checked.plan]
    names = sorted(path.name for path in plans[0].run_dirs.values())
    assert len(names) == 2 and "_aug.erasing-false_" in names[0] and "_aug.erasing-true_" in names[1]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["aug.erasing_prob=1.5"], "aug.erasing_prob=1.5 is not allowed: a number in [0, 1]"),
        (["aug.erasing_scale=[0.3,0.1]"], "aug.erasing_scale=[0.3, 0.1] is not allowed: two shares of the image"),
        (
            ["aug.erasing=true", "aug.autoaug=true", "aug.device=gpu"],
            "aug.erasing=True is not allowed: false with aug.autoaug=true and aug.device=gpu",
        ),
    ],
)
def test_settings_out_of_range_are_refused_in_one_line(overrides: list[str], message: str) -> None:
    (problem,) = check_command([*QUICK, *overrides], CONF)
    assert problem.startswith(message)


def test_the_reports_name_an_erasing_cell_apart_from_its_twin(tmp_path) -> None:
    """An erasing cell and its twin in one sweep: two groups, the erasing one compared with Baseline under its own
    name in the ablation table, and set apart in the sweep's summary."""
    import json

    from record_fakes import write_run

    from vit_locality.report.load.aggregate import aggregate, scan_records
    from vit_locality.report.render.tables import ablation_table
    from vit_locality.report.summary import summary_rows

    for seed in range(2):
        write_run(tmp_path, "cifar100", "Baseline", seed, 80.0, 0.30 + seed / 100, 0.9)
        run_dir = write_run(tmp_path, "cifar100", "Baseline", seed, 81.0, 0.25 + seed / 100, 0.9, name="_re")
        record = json.loads((run_dir / "results.json").read_text())
        record["protocol"] |= {"erasing": True, "erasing_prob": 0.5, "erasing_scale": [0.02, 0.33]}
        record["identity_hash"] += "-re"
        (run_dir / "results.json").write_text(json.dumps(record))
    agg = aggregate([tmp_path])
    assert sorted(key.cell for key in agg.groups) == ["Baseline", "Baseline+RE"]
    part = next(p for p in ablation_table(agg, "cifar100", "vit_paper").parts if p.stem.endswith("_contrasts"))
    assert {row[0] for row in part.rows} == {"Baseline+RE"}
    assert {row["cell"] for row in summary_rows(scan_records([tmp_path]).complete)} == {"Baseline", "Baseline+RE"}


@pytest.mark.parametrize("on_device", [False, True], ids=["workers", "on-device"])
def test_an_erasing_cell_trains_end_to_end_on_either_path(on_device: bool, tmp_path, trains) -> None:
    cell = [*QUICK, "protocol=baseline", "aug.erasing=true", f"data.on_device={str(on_device).lower()}"]
    record = trains.run_cell_as_train(typed([*cell, "stats.pictures=false"]), tmp_path / "run")
    assert record["status"] == "complete" and record["protocol"]["erasing"] is True
    assert record["protocol"]["description"].endswith("erasing(p=0.5, scale=(0.02, 0.33))")
    assert TrainingProtocol.from_record(record["protocol"]).cell_name == "Baseline+RE"
