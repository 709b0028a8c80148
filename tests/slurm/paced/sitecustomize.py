"""Test hook of tests/slurm, loaded by every Python process whose PYTHONPATH starts with this folder (SLURM jobs
inherit the submitting environment). With VIT_LOCALITY_TEST_PACE="<progress file>:<seconds>", each training batch
of a job's first attempt writes its global step to the file and then pauses, so a test's signal lands after a known
step, mid-epoch. A requeued attempt (SLURM_RESTART_COUNT > 0) trains at full speed. Pauses change no result."""

import os

_PACE = os.environ.get("VIT_LOCALITY_TEST_PACE", "")
if _PACE and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
    import time
    from pathlib import Path

    from vit_locality.model.classifier import ViTClassifier

    _progress, _, _seconds = _PACE.rpartition(":")
    _batch_end = ViTClassifier.on_train_batch_end

    def _paced(self, outputs, batch, batch_idx):  # type: ignore[no-untyped-def]
        _batch_end(self, outputs, batch, batch_idx)
        Path(_progress).write_text(str(self.global_step))
        time.sleep(float(_seconds))

    ViTClassifier.on_train_batch_end = _paced
