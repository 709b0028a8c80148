"""A cell's identity is what can change its weights: the `stats` section (how it is measured) and settings that
cannot act under the others (`aug.cutmix_alpha` with `aug.cutmix=false`) leave it and the run directory's name, while
the previous release's cells, named and hashed with them, are still found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CONF, QUICK, typed

from vit_locality.config.identity import (
    APPLIES_WHEN,
    identities_of,
    identity_hash,
    inert_keys,
    record_training_identity,
    run_identity,
)
from vit_locality.precheck.names import cell_name, fitted_name
from vit_locality.precheck.preflight import check_command, plan_command

TINY = ["data=synthetic", "model=vit_tiny"]
MEASUREMENTS = [
    "stats.probe_size=32",
    "stats.every_n_epochs=2",
    "stats.renormalize=false",
    "stats.enabled=false",
    "stats.early_layers=1",
    "stats.units=grid",
]
# Each `applies_when` setting at a value other than its default, and a cell where its flag is on (Baseline + flag).
ACTING = {
    "aug.policy": ("cifar10", ["aug.autoaug=true"]),
    "aug.cutmix_alpha": (0.3, ["aug.cutmix=true"]),
    "aug.cutmix_prob": (0.5, ["aug.cutmix=true"]),
    "aug.mixup_alpha": (0.3, ["aug.mixup=true"]),
    "aug.erasing_prob": (0.7, ["aug.erasing=true"]),
    "aug.erasing_scale": ("[0.1,0.2]", ["aug.erasing=true"]),
}
BASELINE = [*TINY, "protocol=baseline"]


def name_and_hash(overrides: list[str], parent: Path | None = None) -> tuple[str, str]:
    settings = typed(overrides)
    return cell_name(str(settings.run_name), overrides, settings, parent), identity_hash(settings)


@pytest.mark.parametrize("setting", MEASUREMENTS)
def test_a_measurement_setting_is_neither_identity_nor_name(setting: str) -> None:
    assert name_and_hash([*TINY, setting]) == name_and_hash(TINY)
    assert not any(key.startswith("stats.") for key in run_identity(typed([*TINY, setting])))


def test_every_declared_pair_is_covered() -> None:
    assert set(ACTING) == set(APPLIES_WHEN)


@pytest.mark.parametrize("key", sorted(ACTING))
def test_a_setting_whose_flag_is_off_cannot_make_a_cell(key: str) -> None:
    value, flag_on = ACTING[key]
    assert key in inert_keys(typed(BASELINE))
    assert name_and_hash([*BASELINE, f"{key}={value}"]) == name_and_hash(BASELINE)
    on, on_other = name_and_hash([*BASELINE, *flag_on]), name_and_hash([*BASELINE, *flag_on, f"{key}={value}"])
    assert on[1] != on_other[1] and on[0] != on_other[0]  # with its flag on it acts: another cell, named apart


def test_the_previous_releases_hash_is_known_where_it_differs() -> None:
    default, probe = typed(TINY), typed([*TINY, "stats.probe_size=32"])
    assert identities_of(default) == (identity_hash(default),)  # a default cell's hash is what it was
    assert identities_of(probe)[0] == identity_hash(default) and len(identities_of(probe)) == 2
    assert identities_of(probe)[1] == identity_hash(probe, previous_release=True)


def test_a_directory_the_previous_release_named_with_a_stats_setting_is_found(tmp_path: Path) -> None:
    """The saved row `stats.early_layers=1`: its directory and hash as that release wrote them."""
    overrides = ["data=glyphs", "model=vit_tiny_sincos", "model.pos_init=learned", "data.clutter=2"]
    old = (
        "glyphs_vit_tiny_sincos_aa1_cm1_ls0.1_s0_data.clutter-2_model.pos_init-learned"
        + "_stats.early_layers-1_id-10ff7e5c"
    )
    settings = typed([*overrides, "stats.early_layers=1"])
    assert identities_of(settings)[1] == "10ff7e5c5c348b9e"
    (tmp_path / old).mkdir()
    assert cell_name(str(settings.run_name), overrides, settings, tmp_path) == old


def test_a_default_command_finds_the_cell_a_previous_release_measured_otherwise(tmp_path: Path) -> None:
    """`stats.probe_size=32` once made its own directory and hash; the default command is the same cell."""
    probe = typed([*TINY, "stats.probe_size=32"])
    base = str(probe.run_name)
    old_hash = identity_hash(probe, previous_release=True)
    old = tmp_path / fitted_name(base, {"stats.probe_size": "32"}, old_hash)
    old.mkdir()
    record = {"identity_hash": old_hash, "status": "complete", "config": probe.as_record()}
    (old / "results.json").write_text(json.dumps(record))
    assert record_training_identity(record) == identity_hash(typed(TINY))
    assert cell_name(base, TINY, typed(TINY), tmp_path) == old.name
    other = {**record, "identity_hash": "0" * 16}  # a hash its config does not give: not this cell's
    (old / "results.json").write_text(json.dumps(other))
    assert cell_name(base, TINY, typed(TINY), tmp_path) != old.name


def test_cells_of_one_computation_share_a_directory_and_are_said_so(tmp_path: Path) -> None:
    argv = ["-m", *QUICK, "aug.cutmix=true,false", "aug.cutmix_alpha=0.3,1.0", f"hydra.sweep.dir={tmp_path}"]
    checked = plan_command(argv, CONF)
    assert checked.problems == []
    plans = [checked.plan]
    directories = set(plans[0].run_dirs.values())
    assert len(directories) == 3
    [(name, cells)] = plans[0].one_computation.items()
    assert "cm0" in name and len(cells) == 2 and all("aug.cutmix=false" in cell.lower() for cell in cells)
    assert plans[0].shared_lines() == [
        f"'aug.cutmix_alpha=0.3' and 'aug.cutmix_alpha=1.0' are one computation (settings that cannot act or only "
        f"measure): trained once, into {name}"
    ]


def test_a_value_spelled_twice_is_still_refused(tmp_path: Path) -> None:
    argv = ["-m", *QUICK, "loss.ls=0,0.0", f"hydra.sweep.dir={tmp_path}"]
    assert any("are one cell" in problem for problem in check_command(argv, CONF))


LR_MONITOR = "+callbacks.lr._target_=lightning.pytorch.callbacks.LearningRateMonitor"
EARLY_STOP = ["+callbacks.es._target_=lightning.pytorch.callbacks.EarlyStopping", "+callbacks.es.monitor=val/acc1"]
TIMER = "+callbacks.t._target_=lightning.pytorch.callbacks.Timer"


def test_a_display_only_callback_leaves_the_cell_as_it_is() -> None:
    assert name_and_hash([*TINY, LR_MONITOR])[1] == name_and_hash(TINY)[1]
    assert name_and_hash([*TINY, TIMER])[1] == name_and_hash(TINY)[1]  # a Timer that only measures


def test_a_callback_that_can_change_results_makes_another_cell() -> None:
    base = name_and_hash(TINY)[1]
    assert name_and_hash([*TINY, *EARLY_STOP])[1] != base
    assert (
        name_and_hash([*TINY, *EARLY_STOP[:1], "+callbacks.es.monitor=val/loss"])[1]
        != name_and_hash([*TINY, *EARLY_STOP])[1]
    )  # by its config, not by its class alone
    assert name_and_hash([*TINY, TIMER, "+callbacks.t.duration=00:01:00:00"])[1] != base  # a Timer that stops the fit


@pytest.mark.parametrize("key", sorted(ACTING))
def test_a_cell_says_which_of_its_settings_cannot_act(key: str, caplog: pytest.LogCaptureFixture) -> None:
    """Each one, those left out of the hash at their neutral value (the eraser's) included; at its default, nothing."""
    from vit_locality.run.cell import say_inert_settings

    value = ACTING[key][0]
    with caplog.at_level("INFO", logger="vit_locality"):
        say_inert_settings(typed([*BASELINE, f"{key}={value}"]))
        say_inert_settings(typed(BASELINE))
    flag = APPLIES_WHEN[key]
    assert [r.getMessage() for r in caplog.records] == [
        f"{key}={r_value(key)} has no effect with {flag}=false: not part of this cell"
    ]


def r_value(key: str) -> object:
    """The value as the record holds it (a pair as a JSON list)."""
    value = ACTING[key][0]
    return [0.1, 0.2] if key == "aug.erasing_scale" else value
