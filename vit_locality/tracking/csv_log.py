"""Lightning's CSV logger, made to survive a resume: rows written before an interruption are kept, not lost or
doubled.

Lightning's writer deletes `metrics.csv` when it starts in a non-empty directory, so a resumed cell lost every
row before the interruption. Here the writer reads the existing rows first; a resumed run logs again the steps
between its checkpoint and the interruption, and such a row (same step, same metric names) replaces the old one
instead of doubling it. The file is rewritten atomically on every save: a reader never sees half a file.
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment

from vit_locality.store.atomic import atomic_write_text
from vit_locality.store.file_read import UnreadableFile, read_csv_rows
from vit_locality.upstream import cache_logger_experiment, csv_experiment_writer_class, logger_experiment

log = logging.getLogger("vit_locality")


def _signature(row: dict[str, Any]) -> tuple[str, frozenset[str]]:
    """Which logging call a row came from: its step and the metrics it carries (empty CSV fields are absent)."""
    return str(row.get("step")), frozenset(k for k, v in row.items() if k != "step" and v not in ("", None))


class ResumableExperimentWriter(csv_experiment_writer_class()):
    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        path = Path(self.metrics_file_path)
        self.rows: list[dict[str, Any]] = []
        if path.exists() or path.is_symlink():
            try:  # the bounded reader of run files: a FIFO or device in its place never blocks the run
                self.rows = list(read_csv_rows(path))
            except UnreadableFile as error:
                log.warning("%s", error.skipped("the log starts afresh"))
            except FileNotFoundError:  # a link to nothing: no earlier rows
                pass
        self.metrics_keys = sorted({key for row in self.rows for key in row})

    def _check_log_dir_exists(self) -> None:
        """The base class deletes an existing metrics.csv here; its rows are an earlier attempt's, and kept."""

    def save(self) -> None:
        if not self.metrics:
            return
        new = [{k: self._plain(v) for k, v in row.items()} for row in self.metrics]
        replaced = {_signature(row) for row in new}
        self.rows = [row for row in self.rows if _signature(row) not in replaced] + new
        self.metrics_keys = sorted({*self.metrics_keys, *(key for row in new for key in row)})
        self.metrics = []
        self._write_all_rows()

    @staticmethod
    def _plain(value: Any) -> Any:
        return value.item() if hasattr(value, "item") else value

    def _write_all_rows(self) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.metrics_keys, restval="")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write_text(Path(self.metrics_file_path), buffer.getvalue())


class ResumableCSVLogger(CSVLogger):
    """`CSVLogger` whose `metrics.csv` keeps the rows of earlier attempts of the same run (see the module)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ResumableExperimentWriter:
        writer = logger_experiment(self)
        if writer is None:
            Path(self.root_dir).mkdir(parents=True, exist_ok=True)  # a local directory: the file is written atomically
            writer = ResumableExperimentWriter(log_dir=self.log_dir)
            cache_logger_experiment(self, writer)
        return writer
