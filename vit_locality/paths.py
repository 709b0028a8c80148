"""Where the package's own files are: the checkout's `conf/` installs as the package `vit_locality.conf`
(pyproject's package-dir mapping), so one lookup serves a checkout, an editable install and a wheel alike."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

CONF_PACKAGE = "vit_locality.conf"
# Hydra's form of the same place: @hydra.main(config_path=CONF_PATH).
CONF_PATH = f"pkg://{CONF_PACKAGE}"
CONF_DIR = Path(str(files(CONF_PACKAGE)))
