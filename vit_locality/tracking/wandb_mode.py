"""Which mode a W&B run takes and whether it can: the API key found where wandb itself looks. Imports neither wandb
nor Lightning: the pre-check asks it before any cell starts."""

from __future__ import annotations

import configparser
import netrc
import os
from collections.abc import Mapping
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
