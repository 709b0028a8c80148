"""A cell's config becomes one typed, frozen object, validated once per process; its parts (the protocol built
once among them) are what the builders, the record and W&B read."""

from __future__ import annotations

import pydantic
import pytest
from helpers import compose_config

from vit_locality.config.identity import identity_hash
from vit_locality.config.settings import RunSettings, settings_of
from vit_locality.errors import ConfigError
from vit_locality.protocol import Protocol
from vit_locality.run.builders import build_datamodule, build_module, cell_protocol
from vit_locality.run.cell import protocol_record
from vit_locality.tracking.wandb_run import run_tags

TINY = ["data=synthetic", "model=vit_tiny", "trainer=cpu", "data.num_workers=0", "data.train_size=256"]


def test_the_settings_are_typed_frozen_and_built_once_per_config() -> None:
    settings = settings_of(compose_config(TINY))
    assert isinstance(settings, RunSettings) and settings.model.depth == 4 and settings.data.name == "synthetic"
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        settings.model.depth = 8  # type: ignore[misc]
    assert settings_of(compose_config(TINY)) is settings  # composed again: the same object, not validated again
    assert settings_of(compose_config([*TINY, "seed=1"])) is not settings


def test_a_float_setting_typed_as_an_integer_is_the_same_cell() -> None:
    two = settings_of(compose_config([*TINY, "aug.cutmix_alpha=2"]))
    assert two.aug.cutmix_alpha == 2.0 and isinstance(two.aug.cutmix_alpha, float)
    assert identity_hash(two) == identity_hash(settings_of(compose_config([*TINY, "aug.cutmix_alpha=2.0"])))


def test_the_protocol_is_built_once_for_every_part_of_a_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    original = Protocol.from_sections.__func__

    def counted(cls, *args, **kwargs):
        built.append(args)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(Protocol, "from_sections", classmethod(counted))
    settings = settings_of(compose_config([*TINY, "seed=7", "aug.cutmix_prob=0.5"]))
    datamodule = build_datamodule(settings)
    module = build_module(settings, datamodule)
    record = protocol_record(settings)
    tags = run_tags(settings)
    assert len(built) == 1 and module.protocol is cell_protocol(settings)
    assert record["cutmix_prob"] == 0.5 and tags[:2] == ["Modern", "aa1"]


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
        settings_of(cfg)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_settings_outside_the_identity_are_the_fields_marked_so() -> None:
    """The identity leaves out exactly the marked fields (and Hydra's section, and undeclared Trainer arguments that
    change no number): removing a mark, or marking a setting that changes a result, changes this set."""
    from vit_locality.config.identity import NOT_IDENTITY, run_identity

    assert set(NOT_IDENTITY) == {
        *("hydra", "run_name", "sweep_name", "sweep", "tags", "logger", "callbacks", "startup", "threads"),
        *("optimized_metric", "ckpt_path", "ckpt_mode", "model.compile", "stats.pictures", "stats.batch_size"),
        *("data.root", "data.num_workers", "data.download", "data.verify", "data.eval_batch_size"),
        *("trainer.accelerator", "trainer.devices", "trainer.num_nodes", "trainer.strategy"),
        *("trainer.log_every_n_steps", "trainer.profiler", "trainer.enable_model_summary", "trainer.detect_anomaly"),
    }
    identity = run_identity(compose_config(TINY))
    assert "data.batch_size" in identity and "stats.every_n_epochs" in identity and "seed" in identity
    assert not any(key.startswith(("logger", "data.num_workers", "trainer.devices")) for key in identity)
