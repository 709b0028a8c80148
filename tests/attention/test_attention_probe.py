"""The probe pass: the same numbers as the metric functions on the explicit maps, batch-size invariant,
fp32 under autocast, train mode restored, and near-uniform attention at initialisation."""

from __future__ import annotations

import math

import pytest
import torch

from vit_locality.attention.probe import probe_attention
from vit_locality.attention.stats_log import (
    CSV_FIELDS,
    probe_rows,
    probe_summary,
    read_csv,
    scalar_metrics,
    write_csv,
)
from vit_locality.attention.units import min_head_control
from vit_locality.config.schema import StatsConfig
from vit_locality.model.vit import VisionTransformer


@pytest.fixture(scope="module")
def tiny_model() -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(num_classes=10, image_size=32, depth=4, dim=64, heads=4)
    with torch.no_grad():  # sharpen attention so heads differ from the uniform map
        for block in model.blocks:
            block.attn.qkv.weight.mul_(8.0)
    return model


def _brute_force_stats(attn: torch.Tensor) -> dict[str, list[float]]:
    """docs/metrics.md's definitions for one layer's (B, heads, 65, 65) maps, written out as float64 loops over
    images, heads, patch queries and patch keys: renormalise each query's weights over the 64 patch keys, MAD with
    patch-centre distances in the unit square, entropy / log 64 (0 log 0 = 0), CLS mass of the raw row; per head
    the mean over queries and images, and the population sd of the per-image means."""
    maps = attn.double().tolist()
    keys = ("mad", "entropy", "cls_mass", "self_mass", "neighbour_mass", "far_mass", "mad_control")
    per_image: dict[str, list[list[float]]] = {key: [] for key in keys}
    for image in maps:
        for key in per_image:
            per_image[key].append([])
        for head in image:
            mad_sum = entropy_sum = cls_sum = self_sum = near_sum = far_sum = 0.0
            mean_row = [0.0] * 64  # the control: this image's renormalised rows averaged over the queries
            for k in range(64):
                row = head[1 + k]
                mass = sum(row[1:])
                a = [w / mass if mass > 0 else 0.0 for w in row[1:]]
                mean_row = [m + x / 64 for m, x in zip(mean_row, a, strict=True)]
                mad_sum += sum(a[j] * math.hypot(k % 8 - j % 8, k // 8 - j // 8) / 8 for j in range(64))
                entropy_sum -= sum(x * math.log(x) for x in a if x > 0) / math.log(64)
                cls_sum += row[0]
                for j in range(64):  # itself, one step in row and column (diagonals too), or further
                    steps = max(abs(k % 8 - j % 8), abs(k // 8 - j // 8))
                    if steps == 0:
                        self_sum += a[j]
                    elif steps == 1:
                        near_sum += a[j]
                    else:
                        far_sum += a[j]
            control_sum = sum(
                mean_row[j] * math.hypot(k % 8 - j % 8, k // 8 - j // 8) / 8 for k in range(64) for j in range(64)
            )
            sums = (mad_sum, entropy_sum, cls_sum, self_sum, near_sum, far_sum, control_sum)
            for key, total in zip(keys, sums, strict=True):
                per_image[key][-1].append(total / 64)
    heads = range(len(maps[0]))
    stats = {key: [sum(img[h] for img in values) / len(maps) for h in heads] for key, values in per_image.items()}
    stats["surround_pref"] = [control - mad for control, mad in zip(stats["mad_control"], stats["mad"], strict=True)]
    for key in ("mad", "entropy"):
        stats[f"{key}_std"] = [
            math.sqrt(sum((img[h] - stats[key][h]) ** 2 for img in per_image[key]) / len(maps)) for h in heads
        ]
    return stats


def test_probe_matches_the_definitions_by_brute_force(tiny_model: VisionTransformer) -> None:
    """The probe, in batches of 2 over 5 images, against a float64 loop over queries and keys written from
    docs/metrics.md alone: a skipped renormalisation, a wrong distance unit or divisor, a Bessel-corrected sd, or
    a chunk counted twice all show at this tolerance (the fp32 probe is good to ~1e-6)."""
    images = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    result = probe_attention(tiny_model, images, StatsConfig(batch_size=2))
    with torch.no_grad():
        _, maps = tiny_model.forward_with_attention(images)
    assert result.stats["mad"].shape == (4, 4) and result.num_images == 5
    for layer, attn in enumerate(maps):
        expected = _brute_force_stats(attn)
        for key in expected:  # the five original statistics, the three masses and the control
            want = torch.tensor(expected[key], dtype=torch.float64)
            torch.testing.assert_close(result.stats[key][layer].double(), want, atol=2e-6, rtol=1e-5)
    assert float(result.stats["cls_mass"].min()) > 0.005  # renormalising moves MAD by > 0.5%, far above rtol
    assert result.min_mad_early() == pytest.approx(float(result.stats["mad"][:2].min()))
    assert result.mean_entropy_early() == pytest.approx(float(result.stats["entropy"][:2].mean()))
    assert set(result.stats) == set(expected)
    # The central-query map is the mean raw attention of patch (4, 4) over the 64 patch keys.
    centre = 1 + 4 * 8 + 4
    expected_map = maps[1][:, 2, centre, 1:].mean(0).view(8, 8)
    torch.testing.assert_close(result.central_maps[1, 2], expected_map, atol=1e-6, rtol=1e-5)


def test_batch_size_does_not_change_the_answer(tiny_model: VisionTransformer) -> None:
    images = torch.randn(19, 3, 32, 32)
    a = probe_attention(tiny_model, images, StatsConfig(batch_size=4))
    b = probe_attention(tiny_model, images, StatsConfig(batch_size=512))
    for key in a.stats:
        torch.testing.assert_close(a.stats[key], b.stats[key], atol=1e-6, rtol=1e-5)


def test_probe_is_fp32_under_autocast_and_restores_train_mode(tiny_model: VisionTransformer) -> None:
    images = torch.randn(6, 3, 32, 32)
    tiny_model.train()
    reference = probe_attention(tiny_model, images, StatsConfig())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = probe_attention(tiny_model, images, StatsConfig())
    assert tiny_model.training
    assert under_autocast.stats["mad"].dtype == torch.float32
    torch.testing.assert_close(under_autocast.stats["mad"], reference.stats["mad"])


def test_options_units_and_raw() -> None:
    torch.manual_seed(1)
    model = VisionTransformer(num_classes=10, image_size=32, depth=2, dim=32, heads=2)
    images = torch.randn(5, 3, 32, 32)
    unit = probe_attention(model, images, StatsConfig())
    pixels = probe_attention(model, images, StatsConfig(units="pixels"))
    grid = probe_attention(model, images, StatsConfig(units="grid"))
    for key in ("mad", "mad_control", "surround_pref", "mad_std"):  # measured on the unit square whatever is shown
        torch.testing.assert_close(pixels.stats[key], unit.stats[key])
        torch.testing.assert_close(grid.stats[key], unit.stats[key])
    assert unit.stats["mad"].max() < 1.5  # the unit square's diagonal: not patch steps nor pixels
    # what is shown: patch 4 px on an 8 x 8 grid
    assert (unit.display_factor(), grid.display_factor(), pixels.display_factor()) == (1.0, 8.0, 32.0)
    raw = probe_attention(model, images, StatsConfig(renormalize=False))
    # Raw weights leave out the CLS share: MAD_raw = MAD_renorm * (1 - cls_mass) per query; on average close.
    assert torch.all(raw.stats["mad"] < unit.stats["mad"])


def test_initialisation_is_near_uniform() -> None:
    """A sanity check of the whole path: random init attends almost uniformly (MAD of uniform is 0.517)."""
    torch.manual_seed(0)
    model = VisionTransformer(num_classes=10, image_size=32, depth=4, dim=64, heads=4)
    result = probe_attention(model, torch.randn(32, 3, 32, 32), StatsConfig())
    early = result.stats["mad"][:2]
    assert torch.all((early > 0.4) & (early < 0.55))
    assert torch.all(result.stats["entropy"][:2] > 0.95)


def test_rows_metrics_and_csv_roundtrip(tiny_model: VisionTransformer, tmp_path) -> None:
    result = probe_attention(tiny_model, torch.randn(4, 3, 32, 32), StatsConfig())
    rows = probe_rows(result, epoch=3, step=120)
    assert len(rows) == 4 * 4 and set(rows[0]) == set(CSV_FIELDS)
    assert [(r["layer"], r["head"]) for r in rows[:5]] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]
    assert rows[6]["mad"] == pytest.approx(float(result.stats["mad"][1, 2]))
    metrics = scalar_metrics(result)
    assert metrics["attn/min_mad_early"] == pytest.approx(result.min_mad_early())
    assert metrics["attn/layer3/mad_max"] == pytest.approx(float(result.stats["mad"][3].max()))
    # The layer's spread of MAD over its heads (max - min) on every head's row of the layer, and per layer.
    spread = float(result.stats["mad"][1].max() - result.stats["mad"][1].min())
    assert spread > 0.01 and [r["mad_layer_range"] for r in rows[4:8]] == pytest.approx([spread] * 4)
    assert metrics["attn/layer1/mad_range"] == pytest.approx(spread)
    # The head the minimum comes from: its control and surround preference.
    layer, head = result.min_mad_head()
    assert float(result.stats["mad"][layer, head]) == pytest.approx(result.min_mad_early()) and layer < 2
    assert metrics["attn/min_head_surround_pref"] == pytest.approx(float(result.stats["surround_pref"][layer, head]))
    assert metrics["attn/min_head_mad_control"] == pytest.approx(float(result.stats["mad_control"][layer, head]))
    path = tmp_path / "attention_stats.csv"
    write_csv(path, rows)
    back = read_csv(path)
    assert len(back) == 16 and float(back[6]["mad"]) == pytest.approx(rows[6]["mad"])
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write leaves no temporary file


def test_csv_keeps_the_old_columns_first_and_old_rows_readable(tiny_model: VisionTransformer, tmp_path) -> None:
    """A run resumed from a file written before the locality masses and the control existed: its rows are rewritten
    with those fields empty, and the nine original columns keep their names and order for readers that know only
    them."""
    old_header = ["epoch", "step", "layer", "head", "mad", "entropy", "cls_mass", "mad_std", "entropy_std"]
    assert list(CSV_FIELDS[:9]) == old_header
    later = ["self_mass", "neighbour_mass", "far_mass", "mad_control", "surround_pref", "mad_layer_range"]
    assert list(CSV_FIELDS[9:]) == later
    path = tmp_path / "attention_stats.csv"
    path.write_text(",".join(old_header) + "\n0,0,0,0,0.5,0.99,0.01,0.0,0.0\n")
    result = probe_attention(tiny_model, torch.randn(2, 3, 32, 32), StatsConfig())
    write_csv(path, read_csv(path) + probe_rows(result, epoch=1, step=8))
    back = read_csv(path)
    assert back[0]["mad"] == "0.5" and all(back[0][key] == "" for key in later)
    new = back[1]
    total = float(new["self_mass"]) + float(new["neighbour_mass"]) + float(new["far_mass"])
    assert total == pytest.approx(1.0, abs=1e-5)  # renormalised: the patch mass splits into the three
    difference = float(new["mad_control"]) - float(new["mad"])
    assert float(new["surround_pref"]) == pytest.approx(difference, abs=1e-6)
    # A file with the mass columns but not the control's (written in between) reads too.
    path.write_text(",".join(old_header + later[:3]) + "\n0,0,0,0,0.5,0.99,0.01,0.0,0.0,0.1,0.2,0.7\n")
    write_csv(path, read_csv(path))
    assert read_csv(path)[0]["far_mass"] == "0.7" and read_csv(path)[0]["mad_control"] == ""


def test_min_head_control_reads_the_minimum_heads_control(tiny_model: VisionTransformer) -> None:
    """The report's figures for the head `min_mad_early` comes from: its control and surround preference, from the
    record's per-head tables and its own early layers; None for a record written before the control existed."""
    result = probe_attention(tiny_model, torch.randn(3, 3, 32, 32), StatsConfig())
    final = probe_summary(result)
    assert {"mad_control", "surround_pref"} <= set(final["per_head"])
    layer, head = result.min_mad_head()
    found = min_head_control(final)
    assert found == pytest.approx(
        {key: float(result.stats[key][layer, head]) for key in ("mad_control", "surround_pref")}
    )
    # By hand: the minimum over layers 0-1 is layer 1, head 0; layer 2's lower MAD is not early.
    per_head = {
        "mad": [[0.5, 0.4], [0.3, 0.6], [0.1, 0.2]],
        "mad_control": [[0.5, 0.5], [0.45, 0.6], [0.9, 0.9]],
        "surround_pref": [[0.0, 0.1], [0.15, 0.0], [0.8, 0.7]],
    }
    assert min_head_control({"early_layers": 2, "per_head": per_head}) == {"mad_control": 0.45, "surround_pref": 0.15}
    assert min_head_control({"early_layers": 3, "per_head": per_head}) == {"mad_control": 0.9, "surround_pref": 0.8}
    old = {"early_layers": 2, "per_head": {"mad": per_head["mad"], "entropy": per_head["mad"]}}
    assert min_head_control(old) is None and min_head_control({}) is None


def test_ablation_table_shows_the_min_heads_control(tmp_path) -> None:
    """The ablation table's columns for the minimum-MAD head: mean ± sd of its control and surround preference over
    seeds, in the unit square like min MAD, '-' for a cell whose records predate the control. write_run's minimum
    head is layer 0, head 0 (per_head below)."""
    import json

    from record_fakes import write_run

    from vit_locality.report.load.aggregate import aggregate
    from vit_locality.report.render.tables import MIN_HEAD_HEADERS, ablation_table

    def add_control(run_dir, control: float) -> None:
        path = run_dir / "results.json"
        record = json.loads(path.read_text())
        final = record["attention"]["final"]
        mad = final["per_head"]["mad"]
        final["per_head"]["mad_control"] = [[control] * len(row) for row in mad]
        final["per_head"]["surround_pref"] = [[control - v for v in row] for row in mad]
        path.write_text(json.dumps(record))

    add_control(write_run(tmp_path, "cifar100", "Baseline", 0, 50.0, 0.30, 0.5), 0.40)
    add_control(write_run(tmp_path, "cifar100", "Baseline", 1, 52.0, 0.32, 0.5), 0.46)
    write_run(tmp_path, "cifar100", "Modern", 0, 60.0, 0.10, 0.5)  # recorded before the control existed
    table = ablation_table(aggregate([tmp_path]), "cifar100", "vit_paper")
    columns = [table.headers.index(header) for header in MIN_HEAD_HEADERS]
    rows = {row[0]: row for row in table.rows}
    records = {record["cell"]: record for record in table.records}
    # Baseline: controls 0.40 and 0.46 (mean 0.43, sd 0.0424), preferences 0.10 and 0.14 (mean 0.12, sd 0.0283).
    assert [rows["Baseline"][i] for i in columns] == ["0.430 ± 0.042 (2)", "0.120 ± 0.028 (2)"]
    assert records["Baseline"]["min_head_mad_control_mean"] == pytest.approx(0.43)
    assert records["Baseline"]["min_head_surround_pref_mean"] == pytest.approx(0.12)
    assert records["Baseline"]["min_head_surround_pref_n"] == 2
    assert [rows["Modern"][i] for i in columns] == ["-", "-"] and records["Modern"]["min_head_mad_control_n"] == 0
    assert any("surround pref = control - MAD" in note for note in table.notes)


def test_plane_joins_each_head_to_its_control() -> None:
    """With the control, one line per head from (MAD, entropy) to (control, entropy) and a hollow marker there; the
    axis reaches the largest control. Without it, neither."""
    from vit_locality.attention import plots

    mad = torch.tensor([[0.10, 0.30], [0.20, 0.40]])
    control = torch.tensor([[0.50, 0.30], [0.62, 0.45]])
    entropy = torch.tensor([[0.4, 0.5], [0.6, 0.7]])
    fig = plots.mad_entropy_plane(mad, entropy, "run", control=control)
    ax = fig.axes[0]
    segments = {
        (round(float(line.get_xdata()[0]), 4), round(float(line.get_xdata()[1]), 4), float(line.get_ydata()[0]))
        for line in ax.lines
        if len(line.get_xdata()) == 2 and line.get_ydata()[0] == line.get_ydata()[1] and line.get_xdata()[0] < 0.5
    }
    want = {(0.1, 0.5, 0.4), (0.3, 0.3, 0.5), (0.2, 0.62, 0.6), (0.4, 0.45, 0.7)}
    assert want <= {(a, b, round(y, 4)) for a, b, y in segments}
    assert ax.get_xlim()[1] >= 0.62
    assert "control: query-averaged" in [text.get_text() for text in ax.get_legend().get_texts()]
    plots.plt.close(fig)
    plain = plots.mad_entropy_plane(mad, entropy, "run")
    assert not any(float(line.get_xdata()[0]) in (0.1, 0.2) for line in plain.axes[0].lines)
    plots.plt.close(plain)
