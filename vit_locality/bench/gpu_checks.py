"""The GPU bench's checks of what decides speed before any timing: host syncs per cell, the cost of sync-free
AutoAugment, and the memory model. Each section takes the run's Settings, the device and the state earlier sections
left, and returns its table rows.

- syncs: every cell's host syncs per training step, counted on the CPU by `HostSyncCounter` over real Lightning
  steps (host_sync_cells.py), named by cause; on CUDA also `torch.cuda.set_sync_debug_mode("error")` over one step
  of every cell, which raises at the first sync the counter could not see (a host-to-device copy that waits).
- autoaugment: batched AutoAugment on one batch, sync-free (`select`: every op on the whole batch, picked per image)
  against grouped (one call per drawn group, host reads), same pixels.
- memory: the peak tensor memory of a paper-model training step at batch 128, 256 and 512 and the data set on the
  device, projected to the cells one H200 holds; on CUDA, `max_memory_allocated` of the measured step beside it.
"""

from __future__ import annotations

from typing import Any

import torch

from vit_locality.augment.batched_autoaugment import apply, draw
from vit_locality.bench.common import bench_config, timed
from vit_locality.bench.gpu_sections import CellStep
from vit_locality.bench.gpu_settings import MEMORY_CELLS_PER_GPU, Settings, pack_levels, row
from vit_locality.bench.host_sync_cells import CELLS, count_cell, summary, unexpected
from vit_locality.bench.memory_model import GIB, H200_GIB, cells_per_gpu, dataset_bytes, step_memory
from vit_locality.bench.suite import Row

SMOKE_CELLS = ("aa1_cm1_ls1", "aa0_mixup_ls0")  # the smoke run counts two cells; the full run all ten


def syncs_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    rows = []
    names = SMOKE_CELLS if settings.smoke else tuple(CELLS)
    for name in names:
        counts = count_cell(CELLS[name])
        mean, quiet, causes = summary(counts)
        named = "; ".join(f"{cause} x{n}" for cause, n in causes.most_common(3))
        extra = len(unexpected(counts))
        rows.append(row("syncs", f"{name}: host syncs per step, on steps without logging or check (CPU count)",
                        f"{quiet:g}{f' ({named})' if named else ''}"))  # fmt: skip
        rows.append(row("syncs", f"{name}: per step over the epoch (the check every 4, logging every 3 steps)",
                        f"{mean:.2f}, {extra} outside them"))  # fmt: skip
    if device.type != "cuda":
        rows.append(row("syncs", "torch.cuda.set_sync_debug_mode('error') over one step of every cell",
                        "skipped: CUDA only (no CUDA device)"))  # fmt: skip
        return rows
    rows.append(
        row(
            "syncs",
            "torch.cuda.set_sync_debug_mode('error') over one step of every cell",
            _sync_debug(names, settings, device),
        )
    )
    return rows


def _sync_debug(names: tuple[str, ...], settings: Settings, device: torch.device) -> str:
    """One warm step of each cell, then one under sync-debug "error": 'none' or the first cell and error."""
    sizes = [f"data.batch_size={settings.batch}", f"data.train_size={settings.train_size}"]
    for name in names:
        overrides = [*CELLS[name], "data.on_device=true", "model.compile=false", *sizes]
        cfg = bench_config(settings.model, device, overrides)
        step = CellStep(cfg, device)
        step()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step()
        except RuntimeError as error:
            return f"{name}: {str(error).splitlines()[0][:120]}"
        finally:
            torch.cuda.set_sync_debug_mode("default")
            step.close()
    return f"none in {len(names)} cells"


def autoaugment_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    generator = torch.Generator(device=device).manual_seed(0)
    images = torch.randint(0, 256, (settings.batch, 3, 32, 32), dtype=torch.uint8, device=device, generator=generator)
    draws = draw(settings.batch, generator, device)
    same = torch.equal(apply(images, draws, "select"), apply(images, draws, "grouped"))
    seconds = {}
    for grouping in ("select", "grouped"):
        run = timed(lambda grouping=grouping: apply(images, draws, grouping), device)
        run()
        seconds[grouping] = min(run() for _ in range(settings.repeats))
    where = f"batch {settings.batch}, 32 px, {device.type}"
    return [
        row("autoaugment", f"sync-free (select) ms/batch ({where})", f"{1000 * seconds['select']:.1f}"),
        row("autoaugment", "grouped (host reads) ms/batch", f"{1000 * seconds['grouped']:.1f}"),
        row("autoaugment", "select / grouped", f"{seconds['select'] / seconds['grouped']:.2f}x, same pixels: {same}"),
    ]


def memory_section(settings: Settings, device: torch.device, state: dict[str, Any]) -> list[Row]:
    data = dataset_bytes()
    rows = [row("memory", "CIFAR-100 on the device as uint8 (train + test), GiB", f"{data / GIB:.3f}")]
    batches = (128,) if settings.smoke else (128, 256, 512)
    for batch in batches:
        step = step_memory(batch)
        cells = cells_per_gpu(step, data)
        rows.append(row("memory", f"paper model, bf16 step at batch {batch}: state + step peak, GiB (traced on CPU)",
                        f"{step.state_bytes / GIB:.3f} + {step.step_peak_bytes / GIB:.3f}"))  # fmt: skip
        rows.append(row("memory", f"cells per H200 ({H200_GIB:g} GiB) at batch {batch}, projection", f"{cells}"))
        if batch == 128:
            levels = pack_levels(cells)
            rows.append(row("memory", "packing levels measured (projection, capped at one 8-cell wave)",
                            f"{', '.join(map(str, levels))} (default {MEMORY_CELLS_PER_GPU} cells fit)"))  # fmt: skip
    if device.type == "cuda":
        rows.append(row("memory", "max_memory_allocated of the measured steps so far, GiB",
                        f"{torch.cuda.max_memory_allocated(device) / GIB:.2f}"))  # fmt: skip
    else:
        rows.append(row("memory", "max_memory_allocated against the projection", "skipped: CUDA only"))
    return rows
