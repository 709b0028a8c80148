"""`hparams_search=...`: Optuna's sweeper, checking the bounds of what it searches before the first trial
(sweeper.check_sweep); a search where no trial gave a finite value ends in one line and exit status 1, not Optuna's
"No trials are completed yet" under a Hydra traceback."""

from __future__ import annotations

import sys
from typing import Any

from hydra_plugins.vit_locality.sweeper import check_sweep

NO_COMPLETED_TRIAL = "No trials are completed yet"
WITHOUT_RESULT = (
    "error: no trial of the search completed with a finite value (each failed or returned NaN, see its line "
    "above): no best trial; narrow the searched ranges or fix the failing cells, then run again"
)

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # no `search` extra: nothing to extend, and Hydra's scan of this module must not warn
    OptunaSweeper = None

if OptunaSweeper is not None:

    class OneLineOptunaSweeper(OptunaSweeper):
        """Optuna's sweeper; its one error of a search without result becomes one line."""

        def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
            super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
            self.checked_with = (config, hydra_context.config_loader)

        def sweep(self, arguments: list[str]) -> Any:
            check_sweep(*self.checked_with, None)  # the bounds of every searched setting, before the first trial
            try:
                return super().sweep(arguments)
            except ValueError as error:
                if NO_COMPLETED_TRIAL not in str(error):
                    raise
                print(WITHOUT_RESULT, file=sys.stderr, flush=True)
                sys.exit(1)  # not an exception: Hydra would add a line about its full traceback
