"""Silence what libraries print on every run that is not the user's concern. Called by the entry points (never at
import time), so importing the library changes no global logging or warning state."""

from __future__ import annotations

import logging
import warnings


def quiet_library_noise() -> None:
    # Lightning 2.6 with torch 2.14 warns about its own use of a torch pytree API at every fit.
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    # Lightning advertises a cloud logger at every Trainer construction; one per cell of a sweep is noise.
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(lambda r: "Tip:" not in r.getMessage())
