"""A cell's config becomes one typed, frozen object through the gate; its parts (the protocol derived once among
them) are what the builders, the record and W&B read."""

from __future__ import annotations

import pydantic
import pytest
from helpers import compose_config

from vit_locality.config.identity import identity_hash
from vit_locality.config.protocol import TrainingProtocol
from vit_locality.config.settings import RunSettings
from vit_locality.errors import ConfigError
from vit_locality.precheck.gate import settings_from
from vit_locality.run.builders import build_datamodule, build_module
from vit_locality.tracking.wandb_run import run_tags

TINY = ["data=synthetic", "model=vit_tiny", "trainer=cpu", "data.num_workers=0", "data.train_size=256"]


def test_the_settings_are_typed_and_frozen() -> None:
    settings = settings_from(compose_config(TINY), machine=False)
    assert isinstance(settings, RunSettings) and settings.model.depth == 4 and settings.data.name == "synthetic"
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        settings.model.depth = 8  # type: ignore[misc]
    assert settings_from(compose_config(TINY), machine=False) == settings  # composed again: equal settings
    assert settings_from(compose_config([*TINY, "seed=1"]), machine=False) != settings


def test_a_float_setting_typed_as_an_integer_is_the_same_cell() -> None:
    two = settings_from(compose_config([*TINY, "aug.cutmix_alpha=2"]), machine=False)
    assert two.aug.cutmix_alpha == 2.0 and isinstance(two.aug.cutmix_alpha, float)
    again = settings_from(compose_config([*TINY, "aug.cutmix_alpha=2.0"]), machine=False)
    assert identity_hash(two) == identity_hash(again)


def test_the_protocol_is_derived_once_for_every_part_of_a_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    original = TrainingProtocol.of.__func__

    def counted(cls, *args, **kwargs):
        built.append(args)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(TrainingProtocol, "of", classmethod(counted))
    settings = settings_from(compose_config([*TINY, "seed=7", "aug.cutmix_prob=0.5"]), machine=False)
    datamodule = build_datamodule(settings)
    module = build_module(settings, datamodule)
    record = settings.protocol.record()
    tags = run_tags(settings)
    assert len(built) == 1 and module.protocol is settings.protocol
    assert record["cutmix_prob"] == 0.5 and tags[:2] == ["Modern", "aa1"]


def test_a_record_config_comes_back_as_the_same_settings() -> None:
    """A record's config (RunSettings.as_record) is the settings again, and one written before a setting existed
    takes its neutral value: the identity of the run it records is unchanged."""
    settings = settings_from(compose_config(TINY), machine=False)
    assert RunSettings.from_record(settings.as_record()) == settings
    older = settings.as_record()
    del older["model"]["drop_path"]  # a record from before model.drop_path
    assert identity_hash(RunSettings.from_record(older)) == identity_hash(settings) == identity_hash(older)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.heads=3"], "model.dim=64 is not allowed: a multiple of model.heads=3"),
        (["data.batch_size=1", "aug.cutmix=true"], "data.batch_size=1 is not allowed: >= 2 when aug.cutmix=true"),
        (["stats.early_layers=5"], "stats.early_layers=5 is not allowed: an integer in [1, 4]"),
        (["data.min_height=0.9", "data.max_height=0.5"], None),  # the synthetic set has no glyph heights
        (["optim.betas=[0.9,1.0]"], "optim.betas=[0.9, 1.0] is not allowed: two numbers in [0, 1)"),
        (["trainer.limit_val_batches=1.5"], "trainer.limit_val_batches=1.5 is not allowed: null, a count of batches"),
        (["+trainer.max_steps=-2"], "trainer.max_steps=-2 is not allowed: an integer >= -1"),
    ],
)
def test_a_value_out_of_its_range_is_one_line_naming_the_setting(overrides: list[str], message: str | None) -> None:
    try:
        cfg = compose_config([*TINY, *overrides])
    except Exception:
        assert message is None  # refused while composing: the key is not the section's
        return
    with pytest.raises(ConfigError) as caught:
        settings_from(cfg, machine=False)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_settings_outside_the_identity_are_the_fields_marked_so() -> None:
    """The identity leaves out exactly the marked fields (and Hydra's section, and undeclared Trainer arguments that
    change no number): removing a mark, or marking a setting that changes a result, changes this set."""
    from vit_locality.config.identity import NOT_IDENTITY, run_identity

    assert set(NOT_IDENTITY) == {
        *("hydra", "run_name", "sweep_name", "sweep", "tags", "logger", "callbacks", "startup", "threads"),
        *("optimized_metric", "ckpt_path", "ckpt_mode", "model.compile", "stats.pictures", "stats.batch_size"),
        *("data.root", "data.num_workers", "data.download", "data.verify", "data.eval_batch_size", "data.module"),
        *("trainer.accelerator", "trainer.devices", "trainer.num_nodes", "trainer.strategy"),
        *("trainer.log_every_n_steps", "trainer.profiler", "trainer.enable_model_summary", "trainer.detect_anomaly"),
    }
    identity = run_identity(settings_from(compose_config(TINY), machine=False))
    assert "data.batch_size" in identity and "seed" in identity
    assert not any(key.startswith("stats.") for key in identity)  # how a cell is measured: never what it trains
    assert not any(key.startswith(("logger", "data.num_workers", "trainer.devices")) for key in identity)
