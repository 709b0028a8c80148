"""The surround preference's noise band: the largest |surround_pref| of untrained heads of the run's design, at fixed
seeds in a forked random state (every cell of a design gets the same band; the run's draws stay unchanged)."""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from vit_locality.attention.probe import probe_attention
from vit_locality.callbacks.attention_stats import AttentionStatsCallback
from vit_locality.config.schema import StatsConfig
from vit_locality.model.vit import VisionTransformer

log = logging.getLogger("vit_locality")
BAND_SEEDS = (9001, 9002, 9003, 9004)  # initialisations measured; fixed so that every cell of a design shares them
BAND_RULE = "max |surround_pref| over every head of every layer, at initialisation, one model per seed"
_KEPT = 8  # designs remembered per process; a sweep has one or a few


@dataclass(frozen=True)
class BandInputs:
    """What a band is measured from. Equal and hashed by `key` alone (everything the band depends on), so that one
    process measures each design's band once, whichever cell asks."""

    key: Hashable
    build: Callable[[], VisionTransformer] = field(compare=False)
    images: torch.Tensor = field(compare=False)
    settings: StatsConfig = field(compare=False)
    seeds: tuple[int, ...] = field(compare=False)


@dataclass(frozen=True)
class MeasuredBand:
    """A band and when its measurement ended (time.perf_counter), which tells a later cell it was reused."""

    band: dict[str, Any]
    finished: float


def _cache_key(design: Hashable, images: torch.Tensor, settings: StatsConfig, seeds: tuple[int, ...]) -> Hashable:
    """Everything the band depends on, down to the device and dtype (kernels differ there in their last bits)."""
    digest = hashlib.sha256(images.detach().cpu().contiguous().numpy().tobytes()).hexdigest()
    where = (images.device.type, str(images.dtype), tuple(images.shape))
    return (design, digest, where, settings.renormalize, settings.batch_size, seeds)


def measure_band(inputs: BandInputs) -> MeasuredBand:
    """The band of untrained models of `inputs.build`, one per seed, in a forked random state."""
    start = time.perf_counter()
    per_seed = []
    images = inputs.images
    devices = [images.device] if images.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        for seed in inputs.seeds:
            torch.manual_seed(seed)
            result = probe_attention(inputs.build().to(images.device), images, inputs.settings)
            per_seed.append(float(result.stats["surround_pref"].abs().max()))
    band = {"surround_pref": max(per_seed), "per_seed": per_seed, "seeds": list(inputs.seeds)}
    band |= {"heads": int(result.depth * result.heads), "probe_images": int(result.num_images), "rule": BAND_RULE}
    band |= {"seconds": round(time.perf_counter() - start, 3)}
    return MeasuredBand(band, time.perf_counter())


# A pure function of its key: the cache is the process's memory of each design's band across its cells.
remembered_band = functools.lru_cache(maxsize=_KEPT)(measure_band)


def surround_band(
    build: Callable[[], VisionTransformer],
    images: torch.Tensor,
    settings: StatsConfig,
    seeds: tuple[int, ...] = BAND_SEEDS,
    design: Hashable | None = None,
) -> dict[str, Any]:
    """The record's `attention.noise_band` (unit square) over the preprocessed probe `images`. `build` makes an
    untrained model; `design` names its architecture, and given, reuses an earlier band of the same inputs."""
    asked = time.perf_counter()
    key = None if design is None else _cache_key(design, images, settings, seeds)
    inputs = BandInputs(key, build, images, settings, seeds)
    measured = measure_band(inputs) if key is None else remembered_band(inputs)
    return {**measured.band, "reused": measured.finished < asked}


class NoiseBandCallback(Callback):
    """Measures the band at fit start (rank 0) on untrained models of the module's architecture and the run's probe
    images; hands it to the statistics callback for its pictures and adds it to the record (`attention.noise_band`)."""

    def __init__(self, settings: StatsConfig) -> None:
        self.settings = settings
        self.band: dict[str, Any] | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        arch = getattr(pl_module, "hparams", {}).get("model")
        if not isinstance(arch, dict) or not trainer.is_global_zero:
            return
        classes, size = pl_module.hparams["num_classes"], pl_module.hparams["image_size"]
        build = functools.partial(VisionTransformer, num_classes=classes, image_size=size, **arch)
        probe = trainer.datamodule.probe_images(self.settings.probe_size).to(pl_module.device)
        design = (repr(sorted(arch.items())), classes, size)
        band = self.band = surround_band(build, pl_module.preprocess(probe), self.settings, design=design)
        for callback in trainer.callbacks:
            if isinstance(callback, AttentionStatsCallback):
                callback.band = band
        how = "reused from this process's earlier cell" if band["reused"] else f"{band['seconds']:.1f} s"
        figures = (band["surround_pref"], len(band["seeds"]), band["heads"], how)
        log.info("surround_pref noise band at initialisation: %.4f (%d seeds x %d heads, %s)", *figures)

    def record_section(self) -> dict[str, Any]:
        """The record's `attention.noise_band` (merged into the statistics' section)."""
        return {} if self.band is None else {"attention": {"noise_band": dict(self.band)}}
