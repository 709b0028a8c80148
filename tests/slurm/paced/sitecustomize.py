"""Test hook of tests/slurm, loaded by every Python process whose PYTHONPATH starts with this folder (SLURM jobs
inherit the submitting environment). With VIT_LOCALITY_TEST_PACE="<progress file>:<seconds>", each training batch
of a job's first attempt (a cell's, or a pack's step) writes its count of steps to the file and then pauses, so a
test's signal lands after a known step, mid-epoch. A requeued attempt (SLURM_RESTART_COUNT > 0) trains at full
speed. Pauses change no result."""

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

    from vit_locality.run import pack

    _pack_loss, _pack_steps = pack.pack_loss, [0]

    def _paced_pack(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = _pack_loss(*args, **kwargs)
        _pack_steps[0] += 1
        Path(_progress).write_text(str(_pack_steps[0]))
        time.sleep(float(_seconds))
        return result

    pack.pack_loss = _paced_pack
