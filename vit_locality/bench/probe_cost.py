"""What the attention-statistics probe costs against training, at the paper config.

    python -m vit_locality.bench.probe_cost [--train-images 50000] [--probe 512] [--repeats 5]

Times, interleaved and after a warm-up, one training step (forward + backward + AdamW, batch 128, fused
attention) and one probe pass (512 images, explicit fp32 attention), then reports the probe in training-step
equivalents and as a share of an epoch of `--train-images` images (CIFAR-100: 50,000).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from ..attention_probe import ProbeSettings, probe_attention
from ..model import VisionTransformer


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(train_images: int, probe_size: int, batch: int, repeats: int, device: str) -> dict[str, float]:
    torch.manual_seed(0)
    model = VisionTransformer(num_classes=100, image_size=32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    images = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(100, (batch,), device=device)
    probe = torch.randn(probe_size, 3, 32, 32, device=device)
    settings = ProbeSettings(probe_size=probe_size)

    def train_step() -> None:
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def probe_pass() -> None:
        probe_attention(model, probe, settings)

    train_step(), probe_pass()  # warm-up
    steps, probes = [], []
    for _ in range(repeats):  # A and B interleaved, so drift in machine load hits both alike
        steps.append(_timed(train_step))
        probes.append(_timed(probe_pass))
    step_s, probe_s = statistics.median(steps), statistics.median(probes)
    epoch_s = step_s * (train_images // batch)
    return {
        "train_step_s": step_s,
        "probe_s": probe_s,
        "probe_in_steps": probe_s / step_s,
        "epoch_s": epoch_s,
        "probe_pct_of_epoch": 100 * probe_s / epoch_s,
    }


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
    print(f"training step (paper ViT, fp32):   {result['train_step_s'] * 1000:9.1f} ms")
    print(f"probe pass ({args.probe} images):         {result['probe_s'] * 1000:9.1f} ms")
    print(f"probe / training step:             {result['probe_in_steps']:9.2f} steps")
    print(f"epoch of {args.train_images} images (est.):   {result['epoch_s']:9.1f} s")
    print(f"probe / epoch:                     {result['probe_pct_of_epoch']:9.3f} %")


if __name__ == "__main__":
    main()
