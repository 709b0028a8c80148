"""The project's launcher and sweeper are Hydra plugins of their own (`hydra_plugins.vit_locality`), registered
before Hydra instantiates them; the upstream plugins' classes are left as they ship."""

from __future__ import annotations

import pytest
from helpers import CONF, QUICK
from hydra import compose, initialize_config_dir
from hydra.core.plugins import Plugins
from hydra.types import HydraContext
from omegaconf import DictConfig

from vit_locality.precheck.resolvers import register_resolvers


def composed(overrides: list[str]) -> DictConfig:
    """The train config with Hydra's own section, as train.py composes it."""
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", [*QUICK, *overrides], return_hydra_config=True)


def instantiated(config: DictConfig, kind: str) -> object:
    """The launcher or sweeper Hydra instantiates for `config`, as a multirun does."""
    from hydra_plugins.vit_locality import register_chosen

    register_chosen(config)
    context = HydraContext(config_loader=None, callbacks=None)  # type: ignore[arg-type]  # only kept, not used
    instantiate = (
        Plugins.instance().instantiate_launcher if kind == "launcher" else Plugins.instance().instantiate_sweeper
    )
    return instantiate(hydra_context=context, task_function=print, config=config)


def test_the_slurm_launcher_is_a_plugin_of_its_own() -> None:
    launcher = instantiated(composed(["hydra/launcher=slurm"]), "launcher")
    assert type(launcher).__qualname__ == "FollowingSlurmLauncher"
    assert launcher.params["timeout_min"] == 240 and launcher.params["max_num_timeout"] == 3  # slurm.yaml's settings
    submitits = type(instantiated(composed(["hydra/launcher=submitit_slurm"]), "launcher"))
    assert submitits.__qualname__ == "SlurmLauncher"  # by name: Hydra's scan may execute its module again
    assert submitits.launch.__qualname__ == "BaseSubmititLauncher.launch"  # not patched


def test_the_search_sweeper_is_a_plugin_of_its_own() -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    sweeper = instantiated(composed(["hparams_search=optuna_lr"]), "sweeper")
    assert type(sweeper).__qualname__ == "OneLineOptunaSweeper"
    optunas = type(instantiated(composed(["hydra/sweeper=optuna"]), "sweeper"))
    assert optunas.__qualname__ == "OptunaSweeper" and optunas.sweep.__qualname__ == "OptunaSweeper.sweep"


def test_a_plugin_outside_hydra_plugins_is_refused_by_hydra() -> None:
    """Why the plugins live under hydra_plugins: Hydra takes no launcher from elsewhere."""
    config = composed(["hydra/launcher=slurm"])
    config.hydra.launcher._target_ = "vit_locality.sweep.plugins.slurm.FollowingSlurmLauncher"
    with pytest.raises(Exception, match="not the hydra_plugins package"):
        instantiated(config, "launcher")
