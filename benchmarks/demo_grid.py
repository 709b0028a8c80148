"""`python -m benchmarks.demo_grid [--epochs 3]`: the demo's 8-cell grid through train.py as a user runs it, one
cell after another and then as one pack (hydra/launcher=packed), wall seconds of each and their ratio side by side.
Each run writes into a fresh temporary sweep folder, removed afterwards; the demo's own pins (2 threads, AVX2 kernels)
hold for both."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"one after another": [], "packed": ["hydra/launcher=packed"]}


def run_grid(extra: list[str], epochs: int, sweep: Path) -> float:
    """Seconds of `python train.py -m experiment=demo` with `extra`, to its end; a failed run stops the bench."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "avx2")}
    command = [sys.executable, str(ROOT / "train.py"), "-m", "experiment=demo", f"trainer.max_epochs={epochs}"]
    command += [*extra, f"hydra.sweep.dir={sweep}"]
    began = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.demo_grid", description=__doc__)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per cell (the demo trains 10)")
    args = parser.parse_args(argv)
    seconds = {}
    folder = Path(tempfile.mkdtemp(prefix="demo_grid_"))
    try:
        for name, extra in KINDS.items():
            seconds[name] = run_grid(extra, args.epochs, folder / name.replace(" ", "_"))
            print(f"{name}: {seconds[name]:.0f} s", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ratio = seconds["packed"] / seconds["one after another"]
    print(f"the demo's 8 cells, {args.epochs} epochs: packed {seconds['packed']:.0f} s, one after another "
          f"{seconds['one after another']:.0f} s (packed / unpacked {ratio:.2f})")  # fmt: skip
    return seconds


if __name__ == "__main__":
    main()
