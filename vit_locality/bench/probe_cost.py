"""What the attention-statistics probe costs against training, at the paper config.

    python -m vit_locality.bench.probe_cost [--train-images 50000] [--probe 512] [--repeats 5]

The measurement is the `stats` section of the bench suite (`python -m vit_locality.bench --sections stats`);
this entry point keeps the original command and printout.
"""

from __future__ import annotations

import argparse

import torch

from . import stats_bench
from .common import PAPER


def measure(train_images: int, probe_size: int, batch: int, repeats: int, device: str) -> dict[str, float]:
    result = stats_bench.run(PAPER, batch, probe_size, train_images, repeats, warmup=1, device=torch.device(device))
    keys = ("train_step_s", "probe_s", "probe_in_steps", "probe_pct_of_epoch")
    return {"epoch_s": result["epoch_s_estimate"], **{k: result[k] for k in keys}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-images", type=int, default=50_000)
    parser.add_argument("--probe", type=int, default=512)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    result = measure(args.train_images, args.probe, args.batch, args.repeats, args.device)
    print(f"device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}")
    print(f"training step (paper ViT):         {result['train_step_s'] * 1000:9.1f} ms")
    print(f"probe pass ({args.probe} images):         {result['probe_s'] * 1000:9.1f} ms")
    print(f"probe / training step:             {result['probe_in_steps']:9.2f} steps")
    print(f"epoch of {args.train_images} images (est.):   {result['epoch_s']:9.1f} s")
    print(f"probe / epoch:                     {result['probe_pct_of_epoch']:9.3f} %")


if __name__ == "__main__":
    main()
