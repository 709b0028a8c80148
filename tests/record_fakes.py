"""Run directories and records as the pipeline leaves them, with numbers written here (not computed by the
library under test)."""

from __future__ import annotations

import copy
import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

# (AA, CM, LS) of the paper's 8 cells, written out here rather than imported.
FLAGS = {
    "Baseline": (0, 0, 0),
    "+AA": (1, 0, 0),
    "+CM": (0, 1, 0),
    "+LS": (0, 0, 1),
    "Modern": (1, 1, 1),
    "-AA": (0, 1, 1),
    "-CM": (1, 0, 1),
    "-LS": (1, 1, 0),
}


ORDER = list(FLAGS)


# Records and CSVs hold accuracy as a fraction; the tables below are written in percent, as printed tables show it.
IN_FILES = {"acc1": 0.01, "min_mad": 1.0, "entropy": 1.0}


# CIFAR-100: 3 seeds (0, 1, 2) in every cell -> paired intervals. Accuracy in percent, per seed.
ACC100 = {
    "Baseline": [50.0, 51.5, 49.0],
    "+AA": [56.0, 57.0, 55.5],
    "+CM": [57.0, 58.5, 56.0],
    "+LS": [51.0, 50.5, 50.0],
    "Modern": [63.0, 64.0, 62.5],
    "-AA": [58.0, 59.5, 57.0],
    "-CM": [57.5, 57.0, 56.5],
    "-LS": [62.0, 63.5, 61.0],
}


MAD100 = {
    "Baseline": [0.316, 0.300, 0.290],
    "+AA": [0.310, 0.296, 0.305],
    "+CM": [0.020, 0.024, 0.016],
    "+LS": [0.298, 0.320, 0.310],
    "Modern": [0.008, 0.010, 0.006],
    "-AA": [0.012, 0.015, 0.009],
    "-CM": [0.210, 0.250, 0.230],
    "-LS": [0.011, 0.018, 0.013],
}


ENT100 = {
    "Baseline": [0.80, 0.82, 0.78],
    "+AA": [0.79, 0.81, 0.80],
    "+CM": [0.40, 0.42, 0.38],
    "+LS": [0.81, 0.80, 0.82],
    "Modern": [0.30, 0.28, 0.32],
    "-AA": [0.35, 0.33, 0.37],
    "-CM": [0.70, 0.72, 0.74],
    "-LS": [0.36, 0.34, 0.38],
}


# CIFAR-10: seeds 0, 1 everywhere, seed 2 only in Baseline and Modern -> Welch intervals; +AA is local
# without CutMix, so the separation verdict is "no".
ACC10 = {
    "Baseline": [80.0, 81.0, 79.5],
    "+AA": [84.0, 85.5],
    "+CM": [85.0, 84.0],
    "+LS": [80.5, 80.0],
    "Modern": [88.0, 89.0, 88.5],
    "-AA": [86.0, 85.0],
    "-CM": [84.5, 85.5],
    "-LS": [88.5, 87.0],
}


MAD10 = {
    "Baseline": [0.30, 0.28, 0.29],
    "+AA": [0.015, 0.019],
    "+CM": [0.020, 0.030],
    "+LS": [0.27, 0.31],
    "Modern": [0.010, 0.012, 0.008],
    "-AA": [0.011, 0.013],
    "-CM": [0.22, 0.24],
    "-LS": [0.014, 0.016],
}


# Tiny-ImageNet: one seed per cell -> effects without intervals.
ACC_TINY = {
    "Baseline": 30.0,
    "+AA": 33.0,
    "+CM": 35.0,
    "+LS": 31.0,
    "Modern": 38.0,
    "-AA": 36.0,
    "-CM": 34.0,
    "-LS": 37.0,
}


MAD_TINY = {
    "Baseline": 0.3,
    "+AA": 0.29,
    "+CM": 0.02,
    "+LS": 0.31,
    "Modern": 0.01,
    "-AA": 0.015,
    "-CM": 0.28,
    "-LS": 0.012,
}


T975 = {1: 12.7062047, 2: 4.3026527, 3: 3.1824463, 4: 2.7764451, 5: 2.5705818, 10: 2.2281389, 30: 2.0422725}


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def var(xs: list[float]) -> float:
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def write_run(
    root: Path,
    data: str,
    cell: str,
    seed: int,
    acc: float,
    mad: float,
    entropy: float,
    model: str = "vit_paper",
    status: str = "complete",
    early: int = 2,
    config: dict | None = None,
    name: str = "",
) -> Path:
    """A run directory as the training pipeline leaves it: results.json and attention_stats.csv.

    Depth 3, 2 heads. The early layers' smallest MAD is `mad` (layer 0, head 0); the last layer holds a smaller
    value, which a correct reader never counts. In the CSV, epoch e adds (2 - e) * 0.2 to every head. `config` is
    recorded as the run's resolved config; `name` is added to the directory's name (runs of one cell and seed)."""
    aa, cm, ls_on = FLAGS[cell]
    run_dir = root / f"{data}_{model}_aa{aa}_cm{cm}_ls{0.1 * ls_on:g}_s{seed}{name}"
    run_dir.mkdir(parents=True)
    depth, heads = 3, 2
    per_mad = [[mad + 0.05 * layer + 0.01 * head for head in range(heads)] for layer in range(depth)]
    per_mad[early][0] = mad / 2
    per_ent = [[entropy] * heads for _ in range(depth)]
    per_layer = [
        {
            "layer": layer,
            "mad_min": min(per_mad[layer]),
            "mad_mean": mean(per_mad[layer]),
            "mad_max": max(per_mad[layer]),
            "entropy_min": entropy,
            "entropy_mean": entropy,
            "entropy_max": entropy,
        }
        for layer in range(depth)
    ]
    with (run_dir / "attention_stats.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", "step", "layer", "head", "mad", "entropy", "cls_mass", "mad_std", "entropy_std"])
        for epoch in range(3):
            for layer in range(depth):
                for head in range(heads):
                    value = per_mad[layer][head] + (2 - epoch) * 0.2
                    writer.writerow([epoch, epoch * 10, layer, head, value, entropy, 0.01, 0.001, 0.001])
    record = {
        "run_name": run_dir.name,
        "data": {"name": data, "num_classes": 100},
        "protocol": {"autoaug": bool(aa), "cutmix": bool(cm), "ls": 0.1 if ls_on else 0.0, "policy": None},
        "model": {"name": model, "depth": depth, "dim": 64, "heads": heads, "num_params": 1000},
        "seed": seed,
        "identity_hash": f"hash-{run_dir.name}",
        "metrics": {"test/acc1": acc / 100, "test/acc5": 0.9, "test/loss": 1.0},
        "epochs": 2,
        "attention": {
            "final": {
                "epoch": 2,
                "min_mad_early": mad,
                "mean_entropy_early": entropy,
                "early_layers": early,
                "probe_images": 64,
                "settings": {"renormalize": True, "units": "unit", "probe_size": 64},
                "per_layer": per_layer,
                "per_head": {"mad": per_mad, "entropy": per_ent},
            },
            "initial": {"min_mad_early": 0.51, "mean_entropy_early": 0.99},
            "csv": "attention_stats.csv",
        },
        "status": status,
    }
    if config is not None:
        record = {**record, "config": config}
    (run_dir / "results.json").write_text(json.dumps(record))
    return run_dir


def complete_payload(**changes: object) -> dict:
    payload = {
        "run_name": "r",
        "identity_hash": "abc",
        "seed": 0,
        "data": {"name": "synthetic"},
        "protocol": {"autoaug": False, "cutmix": True, "ls": 0.1},
        "model": {"name": "vit_tiny"},
        "metrics": {"test/acc1": 0.75},
        "attention": {"final": {"min_mad_early": 0.4, "mean_entropy_early": 0.9, "early_layers": 2}},
    }
    payload.update(changes)
    return payload


BAD_RECORDS = {
    "a list": (b"[]", "malformed: holds a JSON list"),
    "a number": (b"3", "malformed: holds a JSON int"),
    "invalid UTF-8": (b'{"status": "\xff"}', "unreadable: not UTF-8"),
    "not JSON": (b"{ nope", "unreadable: not JSON"),
    "no status": (b'{"seed": 0}', "malformed: has status None"),
    "missing keys": (json.dumps({"status": "complete", "seed": 0}).encode(), "malformed: lacks protocol$"),
    "NaN accuracy": (
        json.dumps({**complete_payload(metrics={"test/acc1": math.nan}), "status": "complete"}).encode(),
        "not a fraction",
    ),
    "NaN statistics": (
        json.dumps(
            {
                **complete_payload(attention={"final": {"min_mad_early": math.nan, "mean_entropy_early": 0.5}}),
                "status": "complete",
            }
        ).encode(),
        "attention.final.min_mad_early=nan",
    ),
    "seed of the wrong type": (
        json.dumps({**complete_payload(seed="0"), "status": "complete"}).encode(),
        "seed='0' of the wrong type",
    ),
}


def config(seed: int, **changes: Any) -> dict[str, Any]:
    """A recorded config; `changes` maps dotted keys (with "__" for ".") to new values."""
    base: dict[str, Any] = {
        "seed": seed,
        "run_name": f"run_s{seed}",
        "sweep_name": "main",
        "data": {"name": "cifar100", "batch_size": 128, "num_workers": 4, "root": "data", "train_size": None},
        "model": {"name": "vit_paper", "depth": 3, "compile": "auto"},
        "aug": {"autoaug": False, "cutmix": True, "cutmix_alpha": 1.0, "device": "cpu"},
        "loss": {"ls": 0.0},
        "optim": {"lr": 0.001, "betas": [0.9, 0.999]},
        "trainer": {"max_epochs": 2, "precision": "auto", "devices": 1, "limit_train_batches": None},
        "stats": {"early_layers": 2, "renormalize": True, "units": "unit", "batch_size": 128, "pictures": True},
        "logger": {"wandb": None},
        "callbacks": {"progress_bar": "tqdm"},
        "sweep": {"continue_on_error": False},
        "hydra": {"run": {"dir": f"outputs/s{seed}"}},
    }
    result = copy.deepcopy(base)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = result
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return result


def debug_copy(run_dir: Path, acc: float) -> Path:
    """The same cell run again under `debug=profiler`: same identity, sweep_name debug, below outputs/debug/."""
    record = json.loads((run_dir / "results.json").read_text())
    record["config"] = {**record["config"], "sweep_name": "debug", "trainer": {"max_epochs": 2, "profiler": "simple"}}
    record["metrics"] = {**record["metrics"], "test/acc1": acc}
    debug_dir = run_dir.parent.parent / "debug" / run_dir.name
    shutil.copytree(run_dir, debug_dir)
    (debug_dir / "results.json").write_text(json.dumps(record))
    return debug_dir
