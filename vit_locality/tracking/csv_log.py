"""Lightning's CSV logger, made to survive a resume: earlier attempts' rows are kept, a row logged again (same step,
same metric names) replaces the old one, and a save never tears a row (one append, or an atomic replace)."""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment

from vit_locality.store.atomic import replace_atomically
from vit_locality.store.file_read import CSV_SIZE_LIMIT, UnreadableFile, read_regular_file
from vit_locality.upstream import cache_logger_experiment, csv_experiment_writer_class, logger_experiment

log = logging.getLogger("vit_locality")


def _signature(row: dict[str, Any]) -> tuple[str, frozenset[str]]:
    """Which logging call a row came from: its step and the metrics it carries (empty CSV fields are absent)."""
    return str(row.get("step")), frozenset(k for k, v in row.items() if k != "step" and v not in ("", None))


class ResumableExperimentWriter(csv_experiment_writer_class()):
    """Lightning's writer (it still collects the rows and writes hparams.yaml), saving as the module says."""

    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        self.rows: list[dict[str, Any]] = []  # every row of the file, in order: the earlier attempts' first
        try:
            text = read_regular_file(Path(self.metrics_file_path), CSV_SIZE_LIMIT).decode("utf-8")
            # A last line without its newline is a save cut short (a crash, a full disk): left out.
            self.rows = list(csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1], newline="")))
        except UnreadableFile as error:
            log.warning("%s", error.skipped("the log starts afresh"))
        except FileNotFoundError:  # no earlier attempt, or a link to nothing
            pass
        self._logged = {_signature(row) for row in self.rows}

    def _check_log_dir_exists(self) -> None:
        """The base class deletes an existing metrics.csv here; its rows are an earlier attempt's, and kept."""

    def save(self) -> None:
        """The new rows in one write; the whole file, atomically, when its header changes or a row is replaced."""
        if not self.metrics:
            return
        new, self.metrics = self.metrics, []
        signatures = [_signature(row) for row in new]
        if replaced := self._logged.intersection(signatures):
            self.rows = [row for row in self.rows if _signature(row) not in replaced]
        self._logged.update(signatures)
        self.rows.extend(new)
        path = Path(self.metrics_file_path)
        if replaced or not set().union(*new) <= set(self.metrics_keys) or not path.is_file():
            self.metrics_keys = sorted({key for row in self.rows for key in row})
            replace_atomically(path, lambda stream: stream.write(self._lines(self.rows, header=True)))
        else:
            with path.open("ab", buffering=0) as file:  # unbuffered: the rows go out in one write
                file.write(self._lines(new, header=False))

    def _lines(self, rows: list[dict[str, Any]], header: bool) -> bytes:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.metrics_keys, restval="")
        if header:
            writer.writeheader()
        writer.writerows(rows)
        return buffer.getvalue().encode("utf-8")


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
