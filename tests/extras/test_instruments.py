"""The instruments (vit_locality/instruments) on inputs whose answers are known by hand: embeddings built from grid
coordinates, attention maps of known shape around a known box, trajectories and dose sweeps written out here."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import torch

from vit_locality.attention.metrics import cross_border_mass
from vit_locality.extras.instruments.dose_response import dose_curves
from vit_locality.extras.instruments.loading import model_from_checkpoint, normalise, position_embedding
from vit_locality.extras.instruments.pasted_box import Box, box_locality
from vit_locality.extras.instruments.position_embedding import position_locality, position_similarity, similarity_mosaic
from vit_locality.extras.instruments.trajectory import Trajectory, matched_levels, val_accuracy_by_epoch
from vit_locality.model.vit import VisionTransformer
from vit_locality.store.record import RunRecord

G = 8


def _with_cls(rows: torch.Tensor) -> torch.Tensor:
    """(N, dim) patch rows -> (1, 1 + N, dim) with a CLS row that must be ignored."""
    return torch.cat([torch.full((1, rows.shape[1]), 5.0), rows])[None]


def _row_col_onehot() -> torch.Tensor:
    """Patch (r, c) -> one-hot(r) next to one-hot(c): cosine 1/2 for the same row or column, 0 otherwise."""
    rows = torch.zeros(G * G, 2 * G)
    for k in range(G * G):
        r, c = divmod(k, G)
        rows[k, r] = rows[k, G + c] = 1.0
    return rows


def _loop_locality(sim: torch.Tensor) -> float:
    """Minus Pearson's r between similarity and grid distance over distinct pairs, with the standard library."""
    pairs = [(k, m) for k in range(G * G) for m in range(G * G) if k != m]
    dist = [math.hypot(k // G - m // G, k % G - m % G) for k, m in pairs]
    return -statistics.correlation([float(sim[k, m]) for k, m in pairs], dist)


# ---- position embeddings ----------------------------------------------------------------------------------------


def test_similarity_of_row_and_column_embeddings() -> None:
    sim = position_similarity(_with_cls(_row_col_onehot()))
    assert sim.shape == (64, 64)
    assert sim[0, 0].item() == pytest.approx(1.0)
    assert sim[0, 5].item() == pytest.approx(0.5)  # same row
    assert sim[0, 40].item() == pytest.approx(0.5)  # same column
    assert sim[0, 9].item() == pytest.approx(0.0)  # diagonal neighbour: neither
    assert position_locality(sim) == pytest.approx(_loop_locality(sim), abs=1e-12)


def test_locality_of_grid_embeddings_and_of_shuffled_ones() -> None:
    """Gaussian bumps around every grid point (embedding k = exp(-|p_k - p_j|^2 / 2) over j): similarity falls
    with distance, so the number is high; the same rows assigned to random places keep their values but lose the
    grid, so it drops to about 0."""
    points = torch.tensor([[k // G, k % G] for k in range(G * G)], dtype=torch.float64)
    bumps = torch.exp(-(torch.cdist(points, points) ** 2) / 2)
    local = position_locality(position_similarity(_with_cls(bumps)))
    assert local == pytest.approx(_loop_locality(position_similarity(_with_cls(bumps))), abs=1e-12)
    assert local > 0.7
    shuffled = bumps[torch.randperm(64, generator=torch.Generator().manual_seed(0))]
    assert abs(position_locality(position_similarity(_with_cls(shuffled)))) < 0.1
    assert math.isnan(position_locality(position_similarity(_with_cls(torch.ones(64, 4)))))


def test_similarity_mosaic_places_each_map_at_its_patch() -> None:
    sim = position_similarity(_with_cls(_row_col_onehot()))
    mosaic = similarity_mosaic(sim)
    assert mosaic.shape == (71, 71)
    k = 3 * G + 5  # row 3, column 5
    assert torch.equal(mosaic[27:35, 45:53], sim[k].view(G, G))
    assert torch.isnan(mosaic[8]).all() and torch.isnan(mosaic[:, 8]).all()


# ---- the pasted box ---------------------------------------------------------------------------------------------


def _attn(patch_rows: torch.Tensor) -> torch.Tensor:
    a = torch.zeros(1, 1, 65, 65, dtype=torch.float64)
    a[0, 0, 1:, 1:] = patch_rows
    a[0, 0, 0, 1:] = 1 / 64
    return a


def _neighbourhood_rows() -> torch.Tensor:
    rows = torch.zeros(64, 64, dtype=torch.float64)
    for k in range(64):
        r, c = divmod(k, G)
        keys = [rr * G + cc for rr in (r - 1, r, r + 1) for cc in (c - 1, c, c + 1) if 0 <= rr < G and 0 <= cc < G]
        rows[k, keys] = 1 / len(keys)
    return rows


def test_central_box_and_its_mask() -> None:
    box = Box.central(G)
    assert box == Box(2, 2, 4, 4)
    mask = box.mask(G)
    assert mask.sum().item() == 16 and mask[2 * G + 2] and mask[5 * G + 5] and not mask[1 * G + 2]


def test_cross_border_mass_by_hand() -> None:
    """Central 4 x 4 box: self-attention sends nothing across; uniform sends the 48/64 outside; the 3 x 3
    neighbourhood sends 5/9 from the box's 4 corners, 3/9 from its 8 edge patches, 0 from its 4 inner ones:
    (4 x 5 + 8 x 3) / (16 x 9) = 44/144."""
    inside = Box.central(G).mask(G)
    assert cross_border_mass(_attn(torch.eye(64, dtype=torch.float64)), inside).item() == 0.0
    uniform = torch.full((64, 64), 1 / 64, dtype=torch.float64)
    assert cross_border_mass(_attn(uniform), inside).item() == pytest.approx(48 / 64, abs=1e-12)
    assert cross_border_mass(_attn(_neighbourhood_rows()), inside).item() == pytest.approx(44 / 144, abs=1e-12)
    raw = _attn(uniform * 0.5)  # half of each row elsewhere (as if on CLS): renormalised 0.75, raw 0.375
    assert cross_border_mass(raw, inside).item() == pytest.approx(0.75)
    assert cross_border_mass(raw, inside, renormalize=False).item() == pytest.approx(0.375)
    with pytest.raises(ValueError, match="box mask"):
        cross_border_mass(_attn(uniform), torch.ones(16, dtype=torch.bool))


def test_paste_takes_exactly_the_box_pixels() -> None:
    into, source = torch.zeros(2, 3, 32, 32), torch.ones(2, 3, 32, 32)
    mixed = Box(1, 2, 3, 4).paste(into, source, patch_size=4)
    assert mixed[:, :, 4:16, 8:24].eq(1).all() and mixed.sum().item() == 2 * 3 * 12 * 16
    assert into.sum().item() == 0  # the input is not changed


def test_box_probe_on_identical_images_sees_no_border() -> None:
    """Pasting a box of an identical image changes nothing, so mixed and unmixed must agree exactly; with
    different images the two differ. The model's training mode comes back."""
    torch.manual_seed(0)
    model = VisionTransformer(num_classes=10, image_size=32, depth=2, dim=32, heads=2).train()
    same = torch.randn(1, 3, 32, 32).repeat(4, 1, 1, 1)
    result = box_locality(model, same, batch=3)
    assert result.mixed.shape == (2, 2) and model.training
    torch.testing.assert_close(result.mixed, result.unmixed)
    assert result.uniform(G) == pytest.approx(0.75)
    different = box_locality(model, torch.randn(4, 3, 32, 32))
    assert not torch.allclose(different.mixed, different.unmixed)
    with pytest.raises(ValueError, match="at least 2"):
        box_locality(model, same[:1])
    images = torch.randn(4, 3, 32, 32)
    whole, chunked = box_locality(model, images), box_locality(model, images, batch=3)  # chunks of 3 and 1
    torch.testing.assert_close(chunked.mixed, whole.mixed)
    torch.testing.assert_close(chunked.unmixed, whole.unmixed)


# ---- checkpoints ------------------------------------------------------------------------------------------------


def test_model_and_positions_from_a_checkpoint() -> None:
    torch.manual_seed(3)
    model = VisionTransformer(num_classes=10, image_size=32, depth=2, dim=32, heads=2)
    checkpoint = {
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "hyper_parameters": {
            "num_classes": 10,
            "image_size": 32,
            "model": {"depth": 2, "dim": 32, "heads": 2, "mlp_ratio": 2.0},
            "mean": [0.5, 0.5, 0.5],
            "std": [0.25, 0.25, 0.25],
        },
    }
    loaded = model_from_checkpoint(checkpoint)
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(loaded(images), model.eval()(images))
    assert torch.equal(position_embedding(checkpoint), model.pos_embed)
    pixels = torch.full((1, 3, 2, 2), 255, dtype=torch.uint8)
    assert normalise(pixels, checkpoint).eq(2.0).all()  # (255 - 127.5) / 63.75


# ---- trajectories -----------------------------------------------------------------------------------------------


def test_validation_rows_pair_with_the_next_statistics_epoch(tmp_path: Path) -> None:
    """The log's validation row of epoch 0 is the model after one epoch: statistics epoch 1. A resumed run's later
    row of the same epoch wins; rows without val/acc1 are skipped."""
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text(
        "epoch,step,train/loss,val/acc1\n0,5,2.0,\n0,7,,0.25\n1,15,,0.40\n1,15,,0.45\n2,23,,0.60\n"
    )
    accuracy = val_accuracy_by_epoch(tmp_path)
    assert accuracy == {1: 0.25, 2: 0.45, 3: 0.60}
    trajectory = Trajectory.pair(accuracy, {0: 0.517, 1: 0.5, 2: 0.4, 3: 0.2})
    assert trajectory.epochs == [1, 2, 3] and trajectory.min_mad == [0.5, 0.4, 0.2]
    assert trajectory.final == (3, 0.60, 0.2)
    assert val_accuracy_by_epoch(tmp_path / "nowhere") == {}
    # A log that counts epochs from 1 itself (written as floats) is taken as it stands.
    (tmp_path / "csv" / "metrics.csv").write_text("epoch,step,val/acc1\n1.0,7,0.25\n2.0,15,0.45\n")
    assert val_accuracy_by_epoch(tmp_path) == {1: 0.25, 2: 0.45}


def test_mad_at_matched_accuracy_by_hand() -> None:
    t = Trajectory([1, 2, 3, 4], [0.1, 0.3, 0.5, 0.45], [0.5, 0.4, 0.2, 0.1])
    assert t.mad_at_accuracy(0.4) == pytest.approx(0.3)  # halfway from 0.3 to 0.5: halfway from 0.4 to 0.2
    assert t.mad_at_accuracy(0.3) == pytest.approx(0.4)  # reached exactly at epoch 2
    assert math.isnan(t.mad_at_accuracy(0.05))  # already above at the first epoch: the crossing was not seen
    assert math.isnan(t.mad_at_accuracy(0.6))  # never reached
    other = Trajectory([1, 2, 3], [0.2, 0.3, 0.4], [0.5, 0.5, 0.5])
    assert matched_levels([t, other]) == pytest.approx([0.25, 0.3, 0.35])  # the span both cover: 0.2 to 0.4
    assert matched_levels([t, Trajectory([1, 2], [0.6, 0.7], [0.5, 0.4])]) == []


# ---- dose-response ----------------------------------------------------------------------------------------------


def _run(cutmix: bool, alpha: float, prob: float, ls: float, mad: float, acc: float, seed: int = 0) -> RunRecord:
    data = {
        "status": "complete",
        "seed": seed,
        "protocol": {"autoaug": False, "cutmix": cutmix, "ls": ls},
        "data": {"name": "synthetic"},
        "model": {"name": "vit_tiny"},
        "metrics": {"test/acc1": acc},
        "config": {"aug": {"cutmix_alpha": alpha, "cutmix_prob": prob}},
        "attention": {"final": {"min_mad_early": mad, "mean_entropy_early": 0.9}},
    }
    return RunRecord(Path(f"run{cutmix}{alpha}{prob}{ls}{seed}"), data)


def test_dose_curves_per_axis() -> None:
    runs = [
        _run(False, 1.0, 1.0, 0.0, 0.50, 0.80),  # no CutMix: prob 0 on every alpha's curve, no place on alpha's
        _run(True, 1.0, 1.0, 0.0, 0.30, 0.70),
        _run(True, 1.0, 1.0, 0.0, 0.20, 0.60, seed=1),
        _run(True, 1.0, 0.5, 0.0, 0.40, 0.75),
        _run(True, 0.5, 1.0, 0.0, 0.35, 0.72),
        _run(False, 1.0, 1.0, 0.1, 0.45, 0.82),
    ]
    (alpha,) = dose_curves(runs, "cutmix_alpha")
    assert [(x, n) for x, _, _, n in alpha.means()] == [(0.5, 1), (1.0, 2)]
    assert alpha.means()[1][1:3] == pytest.approx((0.25, 0.65))  # mean over the two seeds
    by_alpha = {curve.fixed["cutmix_alpha"]: curve for curve in dose_curves(runs, "cutmix_prob")}
    assert sorted(by_alpha) == [1.0]  # alpha 0.5 has only the paper's on/off pair (0 and 1): no dose curve
    prob = by_alpha[1.0]
    assert [x for x, *_ in prob.means()] == [0.0, 0.5, 1.0]
    assert prob.means()[0][1] == pytest.approx(0.50)
    assert dose_curves(runs, "ls") == []  # 0 and 0.1 alone are the paper's pair, an ablation, not a dose
    (ls,) = dose_curves([*runs, _run(False, 1.0, 1.0, 0.3, 0.40, 0.70)], "ls")
    assert [x for x, *_ in ls.means()] == [0.0, 0.1, 0.3] and ls.fixed["cutmix_prob"] == 0.0


def test_per_head_tables_of_one_shape_only() -> None:
    """A per-head table whose shape differs from the others' is malformed: the run is left out, never cut to fit."""
    from types import SimpleNamespace

    from vit_locality.report.render.figures import per_head_tables

    def run(**per_head: list) -> SimpleNamespace:
        return SimpleNamespace(final_attention={"per_head": per_head})

    found = per_head_tables(run(mad=[[0.1, 0.2]], entropy=[[0.5, 0.6]]), ("mad", "entropy"))
    assert found is not None and found["mad"].shape == (1, 2) and found["mad"][0, 1].item() == pytest.approx(0.2)
    assert per_head_tables(run(mad=[[0.1, 0.2]], entropy=[[0.5, 0.6], [0.7, 0.8]]), ("mad", "entropy")) is None
    assert per_head_tables(run(mad=[0.1, 0.2], entropy=[0.5, 0.6]), ("mad", "entropy")) is None  # not 2-D
    assert per_head_tables(run(mad=[[0.1]]), ("mad", "mad_control")) is None  # a table missing


def test_matched_table_shows_top1_in_percent() -> None:
    from vit_locality.extras.instrument_tables import Instruments, matched_table

    path = Trajectory([1, 2, 3], [0.2, 0.4, 0.6], [0.5, 0.3, 0.1])
    found = Instruments("d", "m", {}, _trajectories={"Baseline": [(None, path)]})
    (row,) = matched_table(found).rows
    assert row[:5] == ["Baseline", "1", "3", "60.00", "0.100"]
