"""Evaluate any checkpoint (test top-1/top-5, attention statistics and pictures) into a folder beside it:

    python -m vit_locality.extras.analyze ckpt_path=multirun/demo/<cell>/checkpoints/last.ckpt stats.units=pixels

Exit status: 0 written; 2 bad settings, checkpoint, run directory or data (one line on stderr); 1 anything else.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from vit_locality.config.schema import StatsConfig
from vit_locality.errors import ConfigError, exit_code_of, first_line
from vit_locality.paths import CONF_DIR, CONF_PATH
from vit_locality.precheck.gate import AnalysisRequest, validate_analysis
from vit_locality.precheck.resolvers import register_resolvers
from vit_locality.store.atomic import atomic_write_text
from vit_locality.store.record import ATTENTION_CSV, RESULTS_FILE, RecordError, read_record
from vit_locality.tracking.wandb_mode import quiet_library_noise

log = logging.getLogger("vit_locality")
CHECKPOINT_KEYS = ("state_dict", "hyper_parameters")  # what every checkpoint train.py writes holds


def run_config(run_dir: Path) -> dict[str, Any]:
    """The config the run was trained with, as plain data: from its record, else from Hydra's saved copy."""
    try:
        record = read_record(run_dir)
    except RecordError as error:
        raise ConfigError(f"{run_dir}: {error}") from None
    if record is not None and record.config is not None:
        return record.config
    hydra_cfg = run_dir / ".hydra" / "config.yaml"
    if hydra_cfg.exists():
        try:
            saved = OmegaConf.load(hydra_cfg)
        except Exception as error:  # YAML syntax, not UTF-8, a directory: the file is unusable whatever the cause
            raise ConfigError(f"{hydra_cfg} is unreadable: {first_line(error)}") from None
        return OmegaConf.to_container(saved, resolve=True)  # type: ignore[return-value]
    raise ConfigError(f"checkpoint's run directory {run_dir} has neither {RESULTS_FILE} nor .hydra/config.yaml")


def default_out_dir(checkpoint: Path, stats: StatsConfig) -> Path:
    """Beside the checkpoint, one folder per checkpoint and statistics convention."""
    return checkpoint.parent / f"{checkpoint.stem}_eval" / f"{'renorm' if stats.renormalize else 'raw'}_{stats.units}"


def test_accuracy(module: Any, datamodule: Any) -> dict[str, float]:
    """Top-1, top-5 (top-k capped at the class count) and mean loss over the run's test set, in eval mode."""
    import torch
    import torch.nn.functional as F

    module.eval()
    correct1 = correct5 = loss_sum = count = 0
    with torch.no_grad():
        for images, labels in datamodule.test_dataloader():
            images, labels = images.to(module.device), labels.to(module.device)
            logits = module(images).float()
            hits = logits.topk(min(5, logits.shape[1]), dim=1).indices == labels[:, None]
            correct1 += float(hits[:, 0].sum())
            correct5 += float(hits.any(dim=1).sum())
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            count += len(labels)
    if count == 0:
        raise ConfigError("the run's test set is empty: nothing to evaluate")
    return {"test/acc1": correct1 / count, "test/acc5": correct5 / count, "test/loss": loss_sum / count}


def _not_ours(checkpoint: Path, why: str) -> ConfigError:
    return ConfigError(f"ckpt_path={str(checkpoint)!r} is not allowed: a checkpoint written by train.py ({why})")


def load_checkpoint(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint's contents; ConfigError when it is not one of this project's (not deep inside Lightning)."""
    from vit_locality.run.checkpoints import DamagedCheckpoint, read_checkpoint_file

    try:
        return read_checkpoint_file(checkpoint, needs=CHECKPOINT_KEYS)
    except DamagedCheckpoint as damage:
        why = f"it holds no {' or '.join(damage.missing)}" if damage.missing else f"torch cannot read it: {damage.why}"
        raise _not_ours(checkpoint, why) from None


def load_module(checkpoint: Path, contents: dict[str, Any], device: str) -> Any:
    """The trained model rebuilt from `contents` as Lightning would (strictly); ConfigError for another model's."""
    from vit_locality.model.classifier import ViTClassifier

    try:
        module = ViTClassifier(**contents["hyper_parameters"])
        module.load_state_dict(contents["state_dict"])
    except Exception as error:  # a mismatch surfaces as TypeError, KeyError or RuntimeError from Lightning or torch
        raise _not_ours(checkpoint, f"its model does not load: {first_line(error)}") from None
    return module.to(device)


def analysis_device(requested: str) -> str:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' is not allowed: auto or cpu (this machine has no CUDA GPU)")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def recorded_run_band(run_dir: Path) -> float | None:
    """The noise band of `surround_pref` in the run's record; None where it holds none or is unreadable."""
    from vit_locality.attention.units import recorded_band

    try:
        record = read_record(run_dir)
    except RecordError:
        return None
    return None if record is None else recorded_band(record.data)


def analyze(request: AnalysisRequest) -> dict[str, Any]:
    """Load, test, probe, record; returns the record written to analysis.json."""
    from vit_locality.attention.probe import probe_attention
    from vit_locality.attention.stats_log import probe_rows, probe_summary, save_pictures, write_csv
    from vit_locality.attention.units import shown
    from vit_locality.config.settings import RunSettings, early_layers_rule
    from vit_locality.run.builders import build_datamodule
    from vit_locality.run.checkpoints import completed_epochs

    checkpoint, settings = request.ckpt_path, request.stats
    meta = load_checkpoint(checkpoint)
    # <run dir>/checkpoints/<file>; a checkpoint elsewhere is its own run directory
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    run_cfg = run_config(run_dir)
    depth = (run_cfg.get("model") or {}).get("depth")
    early_layers_rule(settings.early_layers, depth if isinstance(depth, int) else None)  # <= the run's depth
    out_dir = request.out_dir or default_out_dir(checkpoint, settings)
    if (out_dir / "analysis.json").exists() and not request.overwrite:
        raise ConfigError(f"{out_dir} holds an analysis already; pass overwrite=true to replace it")
    if request.data_root:
        run_cfg["data"]["root"] = request.data_root
    run_cfg["data"]["num_workers"] = 0
    module = load_module(checkpoint, meta, analysis_device(request.device))
    datamodule = build_datamodule(RunSettings.from_record(run_cfg))
    datamodule.setup("test")
    metrics = test_accuracy(module, datamodule)
    images = module.preprocess(datamodule.probe_images(settings.probe_size).to(module.device))
    result = probe_attention(module.model, images, settings)
    epoch, step = completed_epochs(meta), int(meta.get("global_step", 0))
    write_csv(out_dir / ATTENTION_CSV, probe_rows(result, epoch, step))
    save_pictures(result, out_dir, f"{run_dir.name} ({out_dir.name})", recorded_run_band(run_dir))
    record = {"checkpoint": str(checkpoint), "run_dir": str(run_dir), "epoch": epoch, "step": step, "metrics": metrics}
    record |= {"test_images": len(datamodule.test_dataloader().dataset), **probe_summary(result), "status": "complete"}
    atomic_write_text(out_dir / "analysis.json", json.dumps(record, indent=2) + "\n")
    log.info("test top-1 %.2f%%, top-5 %.2f%%", 100 * metrics["test/acc1"], 100 * metrics["test/acc5"])
    mad = shown(result.min_mad_early(), settings.units, result.grid_size, result.patch_size)
    figures = (mad, result.mean_entropy_early(), result.num_images, settings.renormalize)
    log.info("min early-layer MAD %s, mean early-layer entropy %.4f (%d probe images, renormalize=%s)", *figures)
    log.info("wrote %s", out_dir)
    return record


def fail(message: str, code: int) -> None:
    """One line on stderr and the exit status; the log goes to stdout, so an error never hides in it."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


@hydra.main(version_base="1.3", config_path=CONF_PATH, config_name="analyze")
def main(cfg: DictConfig) -> None:
    quiet_library_noise()
    try:
        analyze(validate_analysis(cfg))  # the Hydra config stops here
    except Exception as error:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" and exit_code_of(error) == 1:
            raise
        hint = " (HYDRA_FULL_ERROR=1 shows the traceback)" if exit_code_of(error) == 1 else ""
        fail(first_line(error) + hint, exit_code_of(error))


def cli() -> None:
    """`python -m vit_locality.extras.analyze` and the installed `vit-locality-analyze`."""
    from vit_locality.precheck.preflight import check_command

    register_resolvers()
    problems = check_command(sys.argv[1:], CONF_DIR, config_name="analyze")
    for problem in problems[:-1]:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        fail(problems[-1], 2)
    main()


if __name__ == "__main__":
    cli()
