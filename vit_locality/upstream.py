"""The private upstream APIs this project depends on, each behind one function: when one disappears the caller
gets `UpstreamChanged` naming the library, its version and the attribute, and this file is the one place to update.
Nothing heavy is imported at module level: the preflight check must answer before torch or Hydra is loaded."""

from __future__ import annotations

import argparse
import importlib
import platform
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from vit_locality.errors import VitLocalityError

if TYPE_CHECKING:
    import pickle

    import torch
    from torchvision.transforms import v2

SubPolicy = tuple[tuple[str, float, int | None], ...]  # (op name, probability, magnitude bin or None) per op
Space = dict[str, tuple[Callable[[int, int, int], Any], bool]]  # op -> (magnitudes_fn -> tensor or None, signed)


class UpstreamChanged(VitLocalityError, RuntimeError):
    """A private upstream attribute this project relies on is gone from the installed version."""

    exit_code = 1


def _changed(library: ModuleType | str, attribute: str) -> UpstreamChanged:
    library = importlib.import_module(library) if isinstance(library, str) else library
    version = getattr(library, "__version__", None) or f"(Python {platform.python_version()})"
    return UpstreamChanged(
        f"{library.__name__} {version} has no {attribute}, a private API this project calls: "
        "vit_locality/upstream.py needs updating for this version"
    )


def _private(library: str, owner: Any, owner_name: str, attribute: str) -> Any:
    """`owner.attribute`, or UpstreamChanged if the installed `library` lacks it."""
    try:
        return getattr(owner, attribute)
    except AttributeError:
        raise _changed(library, f"{owner_name}.{attribute}") from None


def autoaugment_sub_policies(augment: v2.AutoAugment) -> list[SubPolicy]:
    """The sub-policies `augment` draws from: each a pair of (op name, probability, magnitude bin) triples."""
    return _private("torchvision", augment, "v2.AutoAugment", "_policies")


def autoaugment_space() -> Space:
    """AutoAugment's op name -> (magnitudes_fn(num_bins, height, width), signed)."""
    from torchvision.transforms import v2

    return _private("torchvision", v2.AutoAugment, "v2.AutoAugment", "_AUGMENTATION_SPACE")


def apply_autoaugment_op(augment: v2.AutoAugment, images: torch.Tensor, name: str, magnitude: float) -> torch.Tensor:
    """Op `name` at `magnitude` on `images` (one image or a batch), with `augment`'s interpolation and fill."""
    apply = _private("torchvision", augment, "v2.AutoAugment", "_apply_image_or_video_transform")
    fill = _private("torchvision", augment, "v2.AutoAugment", "_fill")
    return apply(images, name, magnitude, interpolation=augment.interpolation, fill=fill)


def hydra_args_parser() -> argparse.ArgumentParser:
    """The parser Hydra applies to the command line: overrides, -m/--multirun, --config-name/-path/-dir."""
    try:
        from hydra._internal.utils import get_args_parser
    except ImportError:
        raise _changed("hydra", "hydra._internal.utils.get_args_parser") from None
    return get_args_parser()


def hydra_run_and_report() -> Callable[[Callable[[], Any]], Any]:
    """Hydra's `run_and_report`: runs a function and reports its exception as Hydra does for its own app."""
    try:
        from hydra._internal.utils import run_and_report
    except ImportError:
        raise _changed("hydra", "hydra._internal.utils.run_and_report") from None
    return run_and_report


def hydra_basic_sweeper_class() -> type:
    """Hydra's BasicSweeper, which the project's checking sweeper extends (Hydra exports it from no public module)."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    except ImportError:
        raise _changed("hydra", "hydra._internal.core_plugins.basic_sweeper.BasicSweeper") from None
    return BasicSweeper


def hydra_basic_launcher_class() -> type:
    """Hydra's BasicLauncher, which the packed launcher extends (Hydra exports it from no public module)."""
    try:
        from hydra._internal.core_plugins.basic_launcher import BasicLauncher
    except ImportError:
        raise _changed("hydra", "hydra._internal.core_plugins.basic_launcher.BasicLauncher") from None
    return BasicLauncher


def accelerator_connector_class() -> type:
    """Lightning's `_AcceleratorConnector`: the pre-check builds one to have Lightning refuse settings it cannot run."""
    try:
        from lightning.pytorch.trainer.connectors import accelerator_connector
    except ImportError:
        raise _changed("lightning", "pytorch.trainer.connectors.accelerator_connector") from None
    return _private("lightning", accelerator_connector, "accelerator_connector", "_AcceleratorConnector")


def csv_experiment_writer_class() -> type:
    """Lightning's CSV `ExperimentWriter`, checked to still have the `_check_log_dir_exists` that csv_log overrides."""
    from lightning.pytorch.loggers.csv_logs import ExperimentWriter

    _private("lightning", ExperimentWriter, "csv_logs.ExperimentWriter", "_check_log_dir_exists")
    return ExperimentWriter


def logger_experiment(logger: Any) -> Any:
    """The experiment object a Lightning logger has built (None before its first use), from its `_experiment`."""
    return _private("lightning", logger, type(logger).__name__, "_experiment")


def cache_logger_experiment(logger: Any, experiment: Any) -> None:
    """Store `experiment` where Lightning's logger methods (`save`, `finalize`) look for it."""
    logger_experiment(logger)  # UpstreamChanged if the slot is gone
    logger._experiment = experiment


def wandb_init_arguments(logger: Any) -> dict[str, Any]:
    """The keyword arguments Lightning's `WandbLogger` will pass to `wandb.init` (its `_wandb_init`), to edit."""
    return _private("lightning", logger, "WandbLogger", "_wandb_init")


def epochs_processed(trainer: Any) -> int:
    """The fit loop's count of processed epochs: an epoch counts once its end-of-epoch work has run."""
    return int(_private("lightning", trainer.fit_loop, "fit_loop", "epoch_progress").current.processed)


def batches_completed_in_epoch(trainer: Any) -> int:
    """Training batches of the current epoch that have fully run (a resumed fit skips them); 0 between epochs."""
    epochs = _private("lightning", trainer.fit_loop, "fit_loop", "epoch_progress").current
    if epochs.processed >= epochs.started:  # between epochs: the next one starts from its first batch
        return 0
    epoch_loop = _private("lightning", trainer.fit_loop, "fit_loop", "epoch_loop")
    return int(_private("lightning", epoch_loop, "epoch_loop", "batch_progress").current.completed)


def checkpoint_epochs_processed(checkpoint: dict[str, Any]) -> int:
    """The same count as saved in a checkpoint (`loops.fit_loop.epoch_progress.current.processed`)."""
    try:
        return int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError):
        raise _changed(
            "lightning", "checkpoint['loops']['fit_loop']['epoch_progress']['current']['processed']"
        ) from None


def python_unpickler_class() -> type[pickle.Unpickler]:
    """`pickle._Unpickler`, which data.safe_pickle subclasses to check every opcode (the C one cannot be hooked)."""
    import pickle

    return _private("pickle", pickle, "pickle", "_Unpickler")
