"""Statistics section: what one attention-statistics probe pass costs against training.

Interleaved after a warm-up: one training step (forward + backward + AdamW, fused attention, the device's
precision) and one probe pass (`probe_attention`: the explicit fp32 attention path and the per-head MAD and
entropy reduction, no gradients). The callback adds a CSV write and a log call per probe, not timed here.
"""

from __future__ import annotations

from typing import Any

import torch

from ..attention_probe import ProbeSettings, probe_attention
from .common import ModelConfig, make_train_step
from .timing import interleaved, timed


def run(
    config: ModelConfig,
    batch: int,
    probe_size: int,
    train_images: int,
    repeats: int,
    warmup: int,
    device: torch.device,
) -> dict[str, Any]:
    torch.manual_seed(0)
    model = config.build()
    step = make_train_step(model, config, batch, device)
    size = config.image_size
    probe = torch.randn(probe_size, 3, size, size, generator=torch.Generator().manual_seed(1)).to(device)
    settings = ProbeSettings(probe_size=probe_size)
    runs = {
        "train_step": timed(step, device),
        "probe": timed(lambda: probe_attention(model, probe, settings), device),
    }
    timings = interleaved(runs, repeats=repeats, warmup=warmup)
    step_s, probe_s = timings["train_step"].median, timings["probe"].median
    steps_per_epoch = train_images // batch
    epoch_s = step_s * steps_per_epoch
    return {
        "model": config.as_dict(),
        "batch": batch,
        "probe_images": probe_size,
        "train_images": train_images,
        "steps_per_epoch": steps_per_epoch,
        "repeats": repeats,
        "train_step_s": step_s,
        "probe_s": probe_s,
        "epoch_s_estimate": epoch_s,
        "probe_in_steps": probe_s / step_s,
        "probe_pct_of_epoch": 100 * probe_s / epoch_s,
        "ratios": {"probe_over_step": probe_s / step_s, "probe_over_epoch": probe_s / epoch_s},
        "samples_s": {name: t.samples for name, t in timings.items()},
    }
