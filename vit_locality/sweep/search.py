"""An Optuna search (`hparams_search=...`) where no trial gave a finite value ends in one line and exit status 1,
not Optuna's "No trials are completed yet" under a Hydra traceback."""

from __future__ import annotations

import functools
import sys
from typing import Any

NO_COMPLETED_TRIAL = "No trials are completed yet"
WITHOUT_RESULT = (
    "error: no trial of the search completed with a finite value (each failed or returned NaN, see its line "
    "above): no best trial; narrow the searched ranges or fix the failing cells, then run again"
)


def one_line_without_result() -> None:
    """Wrap the installed Optuna sweeper's `sweep` (idempotent; nothing to do without the `search` extra)."""
    try:
        from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
    except ImportError:
        return
    if getattr(OptunaSweeper.sweep, "ends_in_one_line", False):
        return
    original = OptunaSweeper.sweep

    @functools.wraps(original)
    def sweep(self: Any, arguments: list[str]) -> Any:
        try:
            return original(self, arguments)
        except ValueError as error:
            if NO_COMPLETED_TRIAL not in str(error):
                raise
            print(WITHOUT_RESULT, file=sys.stderr, flush=True)
            sys.exit(1)  # not an exception: Hydra would add a line about its full traceback

    sweep.ends_in_one_line = True  # type: ignore[attr-defined]
    OptunaSweeper.sweep = sweep
