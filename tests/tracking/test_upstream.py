"""The private upstream APIs still have the shape this project relies on, and a vanished one fails clearly."""

from __future__ import annotations

import subprocess
import sys

import hydra._internal.utils
import pytest
import torch
from helpers import Spawner
from hydra._internal.core_plugins import basic_sweeper
from torchvision.transforms import v2

from vit_locality import upstream
from vit_locality.catalog import AUTOAUGMENT_POLICIES
from vit_locality.upstream import (
    UpstreamChanged,
    apply_autoaugment_op,
    autoaugment_space,
    autoaugment_sub_policies,
    cache_logger_experiment,
    checkpoint_epochs_processed,
    csv_experiment_writer_class,
    epochs_processed,
    hydra_args_parser,
    logger_experiment,
    python_unpickler_class,
    wandb_init_arguments,
)

OPS = {
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
    "Invert",
}


def _augment(policy: str = "cifar10") -> v2.AutoAugment:
    return v2.AutoAugment(v2.AutoAugmentPolicy(policy))


def test_autoaugment_sub_policies() -> None:
    sub_policies = autoaugment_sub_policies(_augment("cifar10"))
    assert len(sub_policies) == 25
    for sub in sub_policies:
        assert len(sub) == 2
        for name, p, bin_ in sub:
            assert name in OPS and 0.0 <= p <= 1.0 and (bin_ is None or 0 <= bin_ < 10)


def test_autoaugment_space() -> None:
    space = autoaugment_space()
    used = {
        name
        for policy in AUTOAUGMENT_POLICIES
        for sub in autoaugment_sub_policies(_augment(policy))
        for name, *_ in sub
    }
    assert used == OPS and set(space) >= OPS
    for name in OPS:
        magnitudes_fn, signed = space[name]
        magnitudes = magnitudes_fn(10, 32, 32)
        assert isinstance(signed, bool)
        assert magnitudes is None or (isinstance(magnitudes, torch.Tensor) and magnitudes.shape == (10,))


def test_apply_autoaugment_op() -> None:
    images = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = apply_autoaugment_op(_augment(), images, "Rotate", 30.0)
    expected = v2.functional.rotate(images, angle=30.0, interpolation=v2.InterpolationMode.NEAREST)
    assert out.dtype == torch.uint8 and torch.equal(out, expected) and not torch.equal(out, images)


def test_hydra_args_parser() -> None:
    args = hydra_args_parser().parse_args(["-m", "a=1"])
    assert args.multirun is True and args.overrides == ["a=1"]
    assert args.config_name is None and args.config_path is None and args.config_dir is None


def test_importing_upstream_does_not_import_hydra(spawns: Spawner) -> None:
    code = "import sys, vit_locality.upstream; assert 'hydra' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("owner", "attribute", "call"),
    [
        (v2.AutoAugment, "_AUGMENTATION_SPACE", autoaugment_space),
        (hydra._internal.utils, "get_args_parser", hydra_args_parser),
        (hydra._internal.utils, "run_and_report", upstream.hydra_run_and_report),
        (basic_sweeper, "BasicSweeper", upstream.hydra_basic_sweeper_class),
    ],
)
def test_a_vanished_private_api_names_itself_and_upstream_py(owner, attribute, call, monkeypatch) -> None:
    monkeypatch.delattr(owner, attribute)
    with pytest.raises(UpstreamChanged, match=rf"{attribute}.*vit_locality/upstream\.py needs updating"):
        call()


@pytest.mark.parametrize(
    ("attribute", "call"),
    [
        ("_policies", autoaugment_sub_policies),
        ("_fill", lambda augment: apply_autoaugment_op(augment, torch.zeros(1, 3, 8, 8), "Rotate", 0.0)),
    ],
)
def test_a_vanished_instance_attribute_names_itself(attribute, call) -> None:
    augment = _augment()
    delattr(augment, attribute)
    with pytest.raises(UpstreamChanged, match=rf"torchvision \S+ has no v2\.AutoAugment\.{attribute}, .*upstream\.py"):
        call(augment)


def test_lightning_and_pickle_privates_have_the_shape_relied_on(tmp_path) -> None:
    import pickle

    import lightning as L
    from lightning.pytorch.loggers import CSVLogger

    from vit_locality.tracking.csv_log import ResumableCSVLogger, ResumableExperimentWriter

    assert issubclass(ResumableExperimentWriter, csv_experiment_writer_class())
    logger = ResumableCSVLogger(save_dir=str(tmp_path), name="", version="csv")
    assert logger_experiment(logger) is None
    writer = logger.experiment
    assert logger_experiment(logger) is writer and isinstance(logger_experiment(CSVLogger(str(tmp_path))), type(None))
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert epochs_processed(trainer) == 0
    assert checkpoint_epochs_processed({"loops": {"fit_loop": {"epoch_progress": {"current": {"processed": 3}}}}}) == 3
    assert python_unpickler_class() is pickle._Unpickler


def _fake_logger() -> object:
    class Logger:
        _experiment = None
        _wandb_init: dict = {}  # noqa: RUF012

    return Logger()


@pytest.mark.parametrize(
    ("owner", "attribute", "call"),
    [
        ("lightning.fabric.loggers.csv_logs._ExperimentWriter", "_check_log_dir_exists", csv_experiment_writer_class),
        ("pickle", "_Unpickler", python_unpickler_class),
        (
            "lightning.pytorch.trainer.connectors.accelerator_connector",
            "_AcceleratorConnector",
            upstream.accelerator_connector_class,
        ),
    ],
)
def test_a_vanished_class_level_private_names_itself(owner: str, attribute: str, call, monkeypatch) -> None:
    monkeypatch.delattr(f"{owner}.{attribute}")
    with pytest.raises(UpstreamChanged, match=rf"has no \S*{attribute}, .*vit_locality/upstream\.py needs updating"):
        call()


@pytest.mark.parametrize(
    ("attribute", "call"),
    [
        ("_experiment", logger_experiment),
        ("_experiment", lambda logger: cache_logger_experiment(logger, object())),
        ("_wandb_init", wandb_init_arguments),
    ],
)
def test_a_vanished_logger_slot_names_itself(attribute: str, call) -> None:
    call(_fake_logger())  # present: fine
    logger = _fake_logger()
    delattr(type(logger), attribute)
    with pytest.raises(UpstreamChanged, match=rf"lightning \S+ has no \w*Logger\.{attribute}, .*upstream\.py"):
        call(logger)


def test_a_vanished_epoch_counter_names_itself() -> None:
    class FitLoop:
        pass

    class Trainer:
        fit_loop = FitLoop()

    with pytest.raises(UpstreamChanged, match=r"has no fit_loop\.epoch_progress"):
        epochs_processed(Trainer())
    with pytest.raises(UpstreamChanged, match=r"epoch_progress.*upstream\.py"):
        checkpoint_epochs_processed({"loops": {"fit_loop": {}}})


def test_pickle_has_no_version_and_is_named_by_pythons() -> None:
    import pickle

    error = upstream._changed(pickle, "pickle._Unpickler")
    assert str(error).startswith("pickle (Python 3.") and "has no pickle._Unpickler" in str(error)


def test_the_accelerator_connector_takes_the_trainer_arguments_the_pre_check_passes() -> None:
    """config.trainer_options builds it with these keywords only, as the Trainer does first."""
    import inspect

    parameters = inspect.signature(upstream.accelerator_connector_class().__init__).parameters
    assert {"accelerator", "strategy", "devices", "num_nodes", "precision"} <= set(parameters)
    upstream.accelerator_connector_class()(accelerator="cpu", strategy="auto", devices=1, num_nodes=1)
