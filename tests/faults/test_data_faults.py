"""A corrupted data file stops the run with one line naming the file, through the real entry point; the run
directory records the failure and nothing in it looks complete. (The loaders' own fault cases, e.g. bit flips,
escaping zip members, a missing val_annotations.txt and malicious pickles, are in tests/test_data_*.py; the limits
on archive bombs, image sizes, val file names and pickle allocations in tests/faults/test_data_limits.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from data_fakes import write_fake_cifar10
from helpers import Spawner


def test_truncated_cifar_batch_is_named(tmp_path: Path, spawns: Spawner) -> None:
    write_fake_cifar10(tmp_path / "data", n_train_per_batch=40, n_test=20)
    batch = tmp_path / "data" / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:200])
    run_dir = tmp_path / "run"
    args = ["data=cifar10", "model=vit_tiny", f"data.root={tmp_path / 'data'}", "data.download=false"]
    proc = spawns.run_train(
        [*args, "data.verify=false", "data.batch_size=16", f"hydra.run.dir={run_dir}"], cwd=tmp_path
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert "data_batch_3" in out
    record = json.loads((run_dir / "results.json").read_text())
    assert record["status"] == "failed" and "data_batch_3" in record["error"]
