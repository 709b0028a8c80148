"""The paper's claims judged per run and per cell mean, main effects under unbalanced seeds, and honest pooling.

Run directories are written by `write_run` (tests/record_fakes.py); every expected value is plain arithmetic on the
numbers written here, never a call into the library under test.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest
from record_fakes import ACC100, ENT100, FLAGS, MAD100, ORDER, config, mean, write_run
from scipy import stats

from vit_locality.report.__main__ import main
from vit_locality.report.load.aggregate import Aggregate, aggregate
from vit_locality.report.render.table_format import Table
from vit_locality.report.render.tables import ablation_table, protocols_table
from vit_locality.report.stats.effects import main_effects

CUTMIX = [cell for cell in ORDER if FLAGS[cell][1]]
OTHER = [cell for cell in ORDER if not FLAGS[cell][1]]
CLAIM_KEYS = [
    "a_cutmix_local",
    "a_other_not_local",
    "a_separation",
    "c_cutmix_gain",
    "c_autoaug_gain",
    "d_autoaug_keeps",
    "d_ls_keeps",
]


def claims_of(agg: Aggregate, data: str, model: str = "vit_paper") -> dict[str, dict[str, Any]]:
    """The claims part of an ablation table: claim key -> its CSV record, with the shown row under "row"."""
    table = ablation_table(agg, data, model)
    part = next(p for p in table.parts if p.stem.endswith("_claims"))
    return {rec["claim"]: {**rec, "row": row} for rec, row in zip(part.records, part.rows, strict=True)}


def write_cells(root: Path, data: str, mad: dict[str, list[float]], acc: float = 50.0) -> None:
    """One run per listed value, seeds 0, 1, ...; accuracy and entropy fixed."""
    for cell, values in mad.items():
        for seed, value in enumerate(values):
            write_run(root, data, cell, seed, acc, value, 0.5)


@pytest.fixture(scope="module")
def c100(tmp_path_factory: pytest.TempPathFactory) -> Aggregate:
    """The CIFAR-100 numbers of tests/record_fakes.py: 3 seeds in every cell."""
    root = tmp_path_factory.mktemp("claims100")
    for cell in ORDER:
        for seed in range(3):
            write_run(root, "cifar100", cell, seed, ACC100[cell][seed], MAD100[cell][seed], ENT100[cell][seed])
    return aggregate([root])


def test_claims_per_run_and_per_cell_mean(c100: Aggregate) -> None:
    claims = claims_of(c100, "cifar100")
    assert list(claims) == CLAIM_KEYS
    mad, acc = MAD100, {cell: [v / 100 for v in values] for cell, values in ACC100.items()}
    means = {cell: mean(values) for cell, values in mad.items()}

    # (a) The highest CutMix run is +CM's 0.024 (at the bound: holds), the lowest other run -CM's 0.210.
    assert max(v for c in CUTMIX for v in mad[c]) == 0.024 and min(v for c in OTHER for v in mad[c]) == 0.210
    local, other, separated = claims["a_cutmix_local"], claims["a_other_not_local"], claims["a_separation"]
    assert (local["run_value"], local["run_bound"], local["run_verdict"]) == (0.024, 0.024, "holds")
    assert local["mean_value"] == pytest.approx((0.020 + 0.024 + 0.016) / 3) and local["mean_verdict"] == "holds"
    assert (other["run_value"], other["run_verdict"]) == (0.210, "holds")
    assert other["mean_value"] == pytest.approx((0.210 + 0.250 + 0.230) / 3) and other["mean_verdict"] == "holds"
    assert (separated["run_value"], separated["run_bound"], separated["run_verdict"]) == (0.024, 0.210, "holds")
    assert local["row"] == [
        "(a) every CutMix cell at or below 0.024 min MAD",
        "<= 0.024",
        "0.024 (+CM)",
        "holds, 3 seeds",
        "0.020 (+CM)",
        "holds, 3 seeds",
        "holds, 3 seeds: 0.017 (+CM)",  # 0.024 / sqrt 2 on the diagonal scale
        "holds, 3 seeds: 0.014 (+CM)",
        "agree",
    ]
    # On the diagonal scale -CM's 0.210 is 0.148 < 0.210: "others not local" fails there, and is flagged.
    assert other["run_diagonal_value"] == pytest.approx(0.210 / math.sqrt(2))
    assert other["run_diagonal_verdict"] == "fails"
    assert other["row"][6:] == [
        "fails, 3 seeds: 0.148 (-CM)",
        "fails, 3 seeds: 0.163 (-CM)",
        "differ (per run, per cell mean)",
    ]
    assert other["conventions"] == "differ: run, mean"

    # (c) Per run: the lowest +CM run 56.0 minus the highest Baseline run 51.5 = 4.5 points < 5: fails;
    # per cell mean: 57.1667 - 50.1667 = 7.0 points: holds. +AA: 55.5 - 51.5 = 4.0 (fails), 6.0 (holds).
    for key, cell, run_gain, mean_gain in (
        ("c_cutmix_gain", "+CM", 0.045, 0.07),
        ("c_autoaug_gain", "+AA", 0.04, 0.06),
    ):
        claim = claims[key]
        assert claim["run_value"] == pytest.approx(min(acc[cell]) - max(acc["Baseline"]))
        assert claim["run_value"] == pytest.approx(run_gain) and claim["run_verdict"] == "fails"
        assert claim["mean_value"] == pytest.approx(mean(acc[cell]) - mean(acc["Baseline"]))
        assert claim["mean_value"] == pytest.approx(mean_gain) and claim["mean_verdict"] == "holds"
        assert claim["run_bound"] == claim["mean_bound"] == 0.05
    shown = ["+4.50", "fails, 3 seeds", "+7.00", "holds, 3 seeds", *DIAGONAL_SAME_C, "agree"]
    assert claims["c_cutmix_gain"]["row"][2:] == shown

    # (d) TOST. Baseline 0.316, 0.300, 0.290: mean 0.302, sample variance (0.014^2 + 0.002^2 + 0.012^2) / 2 =
    # 0.000172, so the margin is max(0.02, 2 x 0.013115) = 0.02623. +AA: mean 0.303667, variance 0.00005033;
    # +LS: mean 0.309333, variance 0.00012133. Welch: se^2 = v_c / 3 + v_b / 3.
    margin = 2 * math.sqrt(0.000172)
    for key, cell, var, shown in (
        ("d_autoaug_keeps", "+AA", 100.6667e-6 / 2, "+0.002, 90% [-0.018, +0.022] (margin 0.026)"),
        ("d_ls_keeps", "+LS", 242.6667e-6 / 2, "+0.007, 90% [-0.014, +0.029] (margin 0.026)"),
    ):
        claim = claims[key]
        diff = means[cell] - means["Baseline"]
        a, b = var / 3, 0.000172 / 3
        df = (a + b) ** 2 / (a**2 / 2 + b**2 / 2)
        half = stats.t.ppf(0.95, df) * math.sqrt(a + b)
        assert claim["run_value"] == claim["mean_value"] == pytest.approx(diff)
        assert claim["run_bound"] == pytest.approx(margin) and claim["row"][2] == shown
        equivalent = -margin < diff - half and diff + half < margin
        assert claim["run_verdict"] == claim["mean_verdict"] == ("holds" if equivalent else "fails")
    # +AA's 90% interval [-0.0185, +0.0218] lies inside +-0.0262: holds; +LS reaches +0.0285: fails.
    assert (claims["d_autoaug_keeps"]["run_verdict"], claims["d_ls_keeps"]["run_verdict"]) == ("holds", "fails")


# Claim (c) is about accuracy, so both conventions show the same verdicts.
DIAGONAL_SAME_C = ["fails, 3 seeds: +4.50", "holds, 3 seeds: +7.00"]


def test_a_cell_mean_can_hide_a_cutmix_run_above_the_others(tmp_path: Path) -> None:
    # +CM runs at 0.02, 0.02, 0.50 (mean 0.18); every run without CutMix at 0.21; the other CutMix cells at 0.02.
    mad = {
        cell: [0.02, 0.02, 0.50] if cell == "+CM" else [0.02] * 3 if cell in CUTMIX else [0.21] * 3 for cell in ORDER
    }
    write_cells(tmp_path, "cifar100", mad)
    claims = claims_of(aggregate([tmp_path]), "cifar100")
    assert claims["a_separation"]["row"][2:6] == [
        "0.500 (+CM) vs 0.210 (Baseline)",
        "fails, 3 seeds",
        "0.180 (+CM) vs 0.210 (Baseline)",
        "holds, 3 seeds",
    ]
    # The bound 0.024 fails either way (0.50 and 0.18); 0.21 stays at or above 0.210 even as a mean of three.
    assert (claims["a_cutmix_local"]["run_verdict"], claims["a_cutmix_local"]["mean_verdict"]) == ("fails", "fails")
    assert (claims["a_other_not_local"]["run_verdict"], claims["a_other_not_local"]["mean_verdict"]) == (
        "holds",
        "holds",
    )


def test_a_missing_cell_is_not_enough_runs(tmp_path: Path) -> None:
    mad = {cell: [0.3, 0.31] if cell in OTHER else [0.01, 0.02] for cell in ORDER if cell != "+LS"}
    write_cells(tmp_path, "cifar10", mad)
    claims = claims_of(aggregate([tmp_path]), "cifar10")
    for key in ("a_cutmix_local", "a_other_not_local", "a_separation", "d_ls_keeps"):
        assert claims[key]["run_verdict"] == claims[key]["mean_verdict"] == "not enough runs"
        assert math.isnan(claims[key]["run_value"]) and claims[key]["row"][2] == "missing +LS"
    # +AA needs Baseline, +AA and +CM only. +AA equals Baseline (0.3, 0.31): difference 0, se^2 = 2 x 0.00005 / 2,
    # df 2, so the 90% interval is +-2.920 x 0.00707 = +-0.0206, wider than the margin max(0.02, 2 x 0.00707) = 0.02:
    # two seeds cannot show equivalence. CutMix's shift -0.29 is significant and beyond the margin: a verdict.
    keeps = claims["d_autoaug_keeps"]
    assert keeps["run_verdict"] == "fails" and keeps["run_value"] == pytest.approx(0.0, abs=1e-12)
    assert keeps["run_bound"] == pytest.approx(0.02)
    assert keeps["row"][2] == "+0.000, 90% [-0.021, +0.021] (margin 0.020)"
    # All runs at 50%: no gain over Baseline.
    assert claims["c_cutmix_gain"]["run_verdict"] == claims["c_cutmix_gain"]["mean_verdict"] == "fails"
    table = ablation_table(aggregate([tmp_path]), "cifar10", "vit_paper")
    assert "Paper's claims checked: cifar10, vit_paper (the paper's figures are CIFAR-100's)" in table.markdown()


def test_modern_more_local_per_run_and_per_cell_mean(tmp_path: Path) -> None:
    # cifar10: Modern 0.01 and 0.035 (mean 0.0225) against Baseline 0.30 and 0.31: the mean is at or below the
    # CutMix bound 0.024, one run is not.
    write_cells(tmp_path, "cifar10", {"Baseline": [0.30, 0.31], "Modern": [0.01, 0.035]})
    write_cells(tmp_path, "cifar100", {"Baseline": [0.30, 0.31], "Modern": [0.01, 0.02]})
    write_cells(tmp_path, "tiny_imagenet", {"Baseline": [0.30]})
    table = protocols_table(aggregate([tmp_path]))
    assert table.headers[8:] == [
        "Modern more local (per run)",
        "Modern more local (per cell mean)",
        "paper min MAD (Baseline -> Modern)",
    ]
    rows = {row[0]: row[8:] for row in table.rows}
    assert rows == {
        "cifar10": ["fails, 2 seeds (Modern 0.035 above 0.024)", "holds, 2 seeds", "-"],
        "cifar100": ["holds, 2 seeds", "holds, 2 seeds", "0.316 -> 0.008"],
        "tiny_imagenet": ["not enough runs", "not enough runs", "-"],
    }


def test_claims_csv_keeps_fractions(c100: Aggregate, tmp_path: Path) -> None:
    ablation_table(c100, "cifar100", "vit_paper").write(tmp_path)
    with (tmp_path / "ablation_cifar100_vit_paper_claims.csv").open() as handle:
        rows = {row["claim"]: row for row in csv.DictReader(handle)}
    assert list(rows) == CLAIM_KEYS
    gain = rows["c_cutmix_gain"]
    assert float(gain["mean_value"]) == pytest.approx(mean(ACC100["+CM"]) / 100 - mean(ACC100["Baseline"]) / 100)
    assert (float(gain["mean_bound"]), gain["mean_verdict"], gain["run_verdict"]) == (0.05, "holds", "fails")
    assert "Paper's claims checked" in (tmp_path / "ablation_cifar100_vit_paper.md").read_text()


# Unbalanced seeds: Modern ran 5 seeds, every other cell 2. Every cell without CutMix sits at 0.3, every cell with
# CutMix at 0.02 (runs spread symmetrically around it), so AA and LS have no effect at all.
SPREAD = {2: [-0.01, 0.01], 5: [-0.02, -0.01, 0.0, 0.01, 0.02]}
UNBALANCED = {
    cell: [(0.02 if FLAGS[cell][1] else 0.3) + d for d in SPREAD[5 if cell == "Modern" else 2]] for cell in ORDER
}


def test_effects_are_contrasts_of_cell_means(tmp_path: Path) -> None:
    write_cells(tmp_path, "cifar10", UNBALANCED)
    effects = {e.factor: e for e in main_effects(aggregate([tmp_path]).cells("cifar10", "vit_paper"), "min_mad")}
    # Pooling the runs of a side would weigh Modern's 5 runs at 0.02 against 2 runs of each other cell:
    # AA on = (2 * 0.3 + 5 * 0.02 + 2 * 0.3 + 2 * 0.02) / 11, AA off = (2 * 0.3 + 2 * 0.02 + 2 * 0.3 + 2 * 0.02) / 8.
    pooled = (2 * 0.3 + 5 * 0.02 + 2 * 0.3 + 2 * 0.02) / 11 - (2 * 0.3 + 2 * 0.02 + 2 * 0.3 + 2 * 0.02) / 8
    assert pooled == pytest.approx(-0.0381818, abs=1e-6)
    # Cell means: AA on (+AA, Modern, -CM, -LS) = (0.3 + 0.02 + 0.3 + 0.02) / 4 = AA off: no effect.
    for factor in ("AA", "LS"):
        assert effects[factor].estimate == pytest.approx(0.0, abs=1e-12)
    assert effects["CM"].estimate == pytest.approx(0.02 - 0.3, abs=1e-12)
    # Welch: s^2 = 2 * 0.01^2 / 1 = 0.0002 in the 7 cells of 2 runs, (2 * 0.02^2 + 2 * 0.01^2) / 4 = 0.00025 in
    # Modern; variance = 7 * (1/16) * 0.0002 / 2 + (1/16) * 0.00025 / 5; df from Welch-Satterthwaite.
    a2, a5 = 0.0002 / 2 / 16, 0.00025 / 5 / 16
    variance = 7 * a2 + a5
    df = variance**2 / (7 * a2**2 / 1 + a5**2 / 4)
    assert variance == pytest.approx(4.6875e-05) and df == pytest.approx(7.96460, rel=1e-5)
    for effect in effects.values():
        assert effect.method == "Welch" and effect.n == 7 * 2 + 5
        assert effect.df == pytest.approx(df, rel=1e-9)
        half = (effect.high - effect.low) / 2
        assert half == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(variance), rel=1e-9)
        assert (effect.high + effect.low) / 2 == pytest.approx(effect.estimate, abs=1e-12)


def test_a_single_run_without_pairing_has_no_interval(tmp_path: Path) -> None:
    mad = {cell: values[:1] if cell == "+AA" else values for cell, values in UNBALANCED.items()}
    write_cells(tmp_path, "cifar10", mad)
    effect = main_effects(aggregate([tmp_path]).cells("cifar10", "vit_paper"), "min_mad")[0]
    # AA on: (0.29 + 0.02 + 0.3 + 0.02) / 4; off: (0.3 + 0.02 + 0.3 + 0.02) / 4.
    assert effect.estimate == pytest.approx((0.29 - 0.3) / 4, abs=1e-12)
    assert math.isnan(effect.low) and math.isnan(effect.high) and effect.method == "a cell has one run: no interval"


@pytest.fixture
def pooled(tmp_path: Path) -> Path:
    """+CM: seeds 0-2 differ in settings that change results and in settings that cannot; quick runs besides."""
    root = tmp_path / "sweep"
    ignored = {"data__num_workers": 8, "trainer__devices": 2, "stats__batch_size": 64, "model__compile": False}
    ignored |= {"logger__wandb": {"project": "x"}, "callbacks__progress_bar": "none", "stats__pictures": False}
    settings = {
        0: config(0),
        1: config(1, trainer__precision="bf16-mixed", optim__betas=[0.9, 0.99], **ignored),
        2: config(2, aug__cutmix_alpha=0.5, stats__early_layers=3, data__train_size=5000),
    }
    del settings[2]["stats"]["renormalize"]
    for seed, cfg in settings.items():
        write_run(root, "cifar100", "+CM", seed, 50.0, 0.02, 0.5, config=cfg)
    # Baseline: the same settings in both runs, one quick run of each kind, and runs that are not quick.
    write_run(root, "cifar100", "Baseline", 0, 50.0, 0.3, 0.8, config=config(0))
    write_run(root, "cifar100", "Baseline", 1, 52.0, 0.3, 0.8, config=config(1, trainer__limit_train_batches=1.0))
    write_run(root, "cifar100", "Baseline", 2, 52.0, 0.3, 0.8, config=config(2, trainer__max_steps=-1))
    quick = {
        "_limit": {"trainer__limit_train_batches": 1},
        "_val": {"trainer__limit_val_batches": 0.25},
        "_fast": {"trainer__fast_dev_run": True},
        "_steps": {"trainer__max_steps": 10},
    }
    for name, changes in quick.items():
        write_run(root, "cifar100", "Baseline", 0, 99.0, 0.001, 0.1, config=config(0, **changes), name=name)
    # +AA: one run records its config, the other (an older record) does not.
    write_run(root, "cifar100", "+AA", 0, 50.0, 0.3, 0.8, config=config(0))
    write_run(root, "cifar100", "+AA", 1, 50.0, 0.3, 0.8)
    return root


def test_runs_of_a_cell_with_other_settings_are_split(pooled: Path) -> None:
    """Runs that differ in a setting that can change a result are separate groups, never seeds of one cell."""
    agg = aggregate([pooled])
    cell = "cifar100/vit_paper/+CM is split by"
    notes = [note for note in agg.notes if note.startswith(cell)]
    assert notes == [
        f"{cell} aug.cutmix_alpha: 0.5 (seed 2); 1 (seeds 0, 1)",
        f"{cell} data.train_size: 5000 (seed 2); null (seeds 0, 1)",
        f"{cell} optim.betas: [0.9, 0.999] (seeds 0, 2); [0.9, 0.99] (seed 1)",  # values sorted as printed
        f"{cell} trainer.precision: auto (seeds 0, 2); bf16-mixed (seed 1)",
    ]  # not stats.early_layers nor stats.renormalize: how a run is measured never splits its cell
    variants = agg.variants("cifar100", "vit_paper")
    assert sorted(len(group.runs) for group in variants["+CM"]) == [1, 1, 1]
    assert "cifar100/vit_paper/+AA: 1 of 2 runs record no config; they are a row of their own" in agg.notes
    assert [group.key.variant for group in variants["+AA"]] == ["", "config=not recorded"]
    # Equivalent spellings of a full run (limit 1.0 or null, max_steps -1 or unset) are one group.
    assert not [note for note in agg.notes if "Baseline" in note]
    assert [len(group.runs) for group in variants["Baseline"]] == [3]


def test_quick_runs_are_left_out_and_listed(pooled: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    agg = aggregate([pooled])
    reasons = {Path(run_dir).name: why for run_dir, why in agg.skipped}
    base = "cifar100_vit_paper_aa0_cm0_ls0_s0"
    assert reasons == {
        f"{base}_limit": "a quick run (trainer.limit_train_batches=1), not counted",
        f"{base}_val": "a quick run (trainer.limit_val_batches=0.25), not counted",
        f"{base}_fast": "a quick run (trainer.fast_dev_run=true), not counted",
        f"{base}_steps": "a quick run (trainer.max_steps=10), not counted",
    }
    # limit_train_batches=1.0 (the whole set) and max_steps=-1 are full runs; the quick runs' 99% never counts.
    baseline = agg.cells("cifar100", "vit_paper")["Baseline"]
    assert sorted(run.seed for run in baseline.runs) == [0, 1, 2]
    assert baseline.stat("acc1").mean == pytest.approx((0.50 + 0.52 + 0.52) / 3)
    assert main(["ablation", str(pooled), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"skipped {pooled / (base + '_fast')}: a quick run (trainer.fast_dev_run=true), not counted" in printed
    assert "note: cifar100/vit_paper/+CM is split by trainer.precision" in printed


def test_table_from_a_plain_table_part(c100: Aggregate) -> None:
    """The claims part renders in every format the ablation table does: Markdown, LaTeX, CSV."""
    table = ablation_table(c100, "cifar100", "vit_paper")
    assert [part.stem for part in table.parts] == [
        "ablation_cifar100_vit_paper_claims",
        "ablation_cifar100_vit_paper_effects",
        "ablation_cifar100_vit_paper_contrasts",
    ]
    claims: Table = table.parts[0]
    assert "### Paper's claims checked: cifar100, vit_paper" in table.markdown()
    assert "\\caption{Paper's claims checked: cifar100, vit\\_paper" in table.latex()
    assert "$\\le$ 0.024" in claims.latex() and "max(0.02, 2 x Baseline's seed std)" in claims.latex()
