"""Which mode a W&B run takes (the API key found where wandb itself looks), and the library output each run would
print silenced. Imports neither wandb nor Lightning: the pre-check asks it before any cell starts."""

from __future__ import annotations

import configparser
import logging
import netrc
import os
import warnings
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_HOST = "https://api.wandb.ai"


def _settings_file(environ: Mapping[str, str]) -> dict[str, str]:
    """The `[default]` section of W&B's global settings file (written by `wandb login --host`, `wandb offline`)."""
    home = Path(environ.get("HOME") or Path.home())
    config_dir = environ.get("WANDB_CONFIG_DIR") or str(home / ".config" / "wandb")
    parser = configparser.ConfigParser()
    try:
        parser.read(Path(config_dir) / "settings")
    except (configparser.Error, OSError):
        return {}
    return dict(parser["default"]) if parser.has_section("default") else {}


def _netrc_path(environ: Mapping[str, str]) -> Path:
    if environ.get("NETRC"):
        return Path(environ["NETRC"]).expanduser()
    home = Path(environ.get("HOME") or Path.home())
    return home / ".netrc" if (home / ".netrc").exists() or not (home / "_netrc").exists() else home / "_netrc"


def api_key_source(environ: Mapping[str, str] | None = None) -> str | None:
    """Where W&B would find an API key, or None: the environment, the W&B host's netrc entry, the settings file."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    settings = _settings_file(environ)
    host = urlsplit(environ.get("WANDB_BASE_URL") or settings.get("base_url") or DEFAULT_HOST).netloc
    path = _netrc_path(environ)
    try:
        entry = netrc.netrc(str(path)).authenticators(host) if host else None
    except (OSError, netrc.NetrcParseError):
        entry = None
    if entry and entry[2]:
        return str(path)
    return "settings" if settings.get("api_key") else None


def resolve_mode(setting: str, environ: Mapping[str, str] | None = None) -> str:
    """`logger.wandb.mode`: `auto` follows `WANDB_MODE`, then the settings file, then online if a key is found."""
    if setting != "auto":
        return setting
    environ = os.environ if environ is None else environ
    for chosen in (environ.get("WANDB_MODE"), _settings_file(environ).get("mode")):
        chosen = {"dryrun": "offline", "run": "online"}.get(chosen, chosen)
        if chosen in ("online", "offline", "disabled"):
            return chosen
    return "online" if api_key_source(environ) else "offline"


def quiet_library_noise() -> None:
    """Silence what libraries print on every run that is not the user's concern; the entry points call it."""
    quiet_wandb()
    # Lightning 2.6 with torch 2.14 warns about its own use of a torch pytree API at every fit.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # A short epoch under log_every_n_steps only loses per-step points; the per-epoch figures are logged anyway.
    warnings.filterwarnings(
        "ignore", message=r"The number of training batches \(\d+\) is smaller than the logging interval"
    )
    # `epoch` is logged per epoch without reducing it over ranks: every rank has the same number (classifier.py).
    warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('epoch', \.\.\., sync_dist=True\)`")
    # Lightning's hint to use `srun` matters only inside a SLURM job.
    if "SLURM_JOB_ID" not in os.environ:
        warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")
    # Lightning advertises a cloud logger at every Trainer construction; one per cell of a sweep is noise.
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "Tip:" not in r.getMessage())


def quiet_wandb(environ: MutableMapping[str, str] | None = None) -> None:
    """`WANDB_SILENT=true` unless the user set it: W&B's ~35 lines per run would be most of a cell's output."""
    (os.environ if environ is None else environ).setdefault("WANDB_SILENT", "true")
