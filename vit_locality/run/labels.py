"""Tags added to a complete cell without training it again: tags change no result, so a re-run with more `tags=[...]`
merges them into its results.json (noted under `label_updates`) and its W&B run. Tags are only ever added."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vit_locality.config.settings import RunSettings
from vit_locality.store.record import RESULTS_FILE, RunRecord, write_record

log = logging.getLogger("vit_locality")
LABEL_UPDATES = "label_updates"  # the record's list of {"at": UTC time, "tags_added": [...]}


@dataclass(frozen=True)
class LabelUpdate:
    """The record as rewritten, and the one line that says what changed."""

    data: dict[str, Any]
    summary: str


def add_labels(settings: RunSettings, run_dir: Path, record: RunRecord) -> LabelUpdate | None:
    """Merge the command's new tags into the complete `record` (and the cell's W&B run when `logger=wandb`); None
    when there is nothing new. Called under the run directory's lock, after the data were found to be the same."""
    have = {str(tag) for tag in record.data.get("tags") or []}
    added = [tag for tag in dict.fromkeys(str(tag) for tag in settings.tags) if tag not in have]  # command's order
    if not added:
        return None
    data = {key: value for key, value in record.data.items() if key != "status"}
    data["tags"] = [*(str(tag) for tag in data.get("tags") or []), *added]
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    data[LABEL_UPDATES] = [*(data.get(LABEL_UPDATES) or []), {"at": when, "tags_added": added}]
    write_record(run_dir, data, status="complete")
    parts = [f"tags {', '.join(added)} added to {RESULTS_FILE}", _update_wandb(settings, Path(run_dir), data)]
    return LabelUpdate({**data, "status": "complete"}, "; ".join(part for part in parts if part))


def _update_wandb(settings: RunSettings, run_dir: Path, record: dict[str, Any]) -> str:
    """The W&B half: the cell's run (the id its record holds, wherever the directory now lies) gets the record's
    tags besides its own; what happened, in a few words. A failed update leaves the record updated (W&B is a
    dashboard, never the record)."""
    had_run = (run_dir / "wandb").is_dir()
    if not settings.logger.wandb:
        return "its W&B run not updated (logger=wandb is off)" if had_run else ""
    if not had_run:
        return "no W&B run of this cell to tag (it ran without logger=wandb)"
    from vit_locality.tracking.wandb_run import cell_run_id, retag_wandb_run, run_tags

    run_id = cell_run_id(str(record.get("identity_hash")), run_dir, record)
    try:
        return retag_wandb_run(settings, run_dir, run_id, [*run_tags(settings), *record["tags"]])
    except Exception as error:
        log.warning("W&B tag update failed (%s: %s); the record has the tags", type(error).__name__, error)
        return "W&B run not updated (see the warning)"
