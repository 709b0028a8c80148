"""Train one protocol cell, or a sweep of them with `-m`.

    python train.py                                   # paper ViT, Modern protocol, CIFAR-100
    python train.py data=synthetic model=vit_tiny trainer.max_epochs=1
    python train.py -m aug.cutmix=true,false aug.autoaug=true,false loss.ls=0,0.1   # the 8-cell ablation

Every cell of the command is checked before the first one starts. Exit status: 0 every cell complete,
1 a cell failed (with sweep.continue_on_error=true, after the others ran), 2 bad config or data, 3 a non-finite
loss, 130/143 interrupted by SIGINT/SIGTERM (run the same command again to resume).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vit_locality.config.identity import identities_of
from vit_locality.config.settings import RunSettings
from vit_locality.errors import ConfigError, exit_code_of, first_line
from vit_locality.paths import CONF_DIR, CONF_PATH
from vit_locality.precheck.preflight import CheckedCommand, Plan, plan_command
from vit_locality.precheck.refusals import config_groups_text
from vit_locality.precheck.resolvers import register_resolvers
from vit_locality.run.wait_policy import sleep_while_waiting
from vit_locality.sweep.command import CommandContext, current_command, new_command_id, publish_command, run_dirs_of
from vit_locality.sweep.launch import (
    in_multirun,
    is_ddp,
    pin_gpu_for_parallel_cells,
    point_ddp_children_at_this_cell,
    run_ddp_cell_in_own_process,
)
from vit_locality.sweep.progress import (
    cell_start_line,
    complete_already,
    finished_durations,
    in_sweep_command,
    sweep_cells,
)

log = logging.getLogger("vit_locality")
HELP_GROUPS_RESOLVER = "config_groups"  # conf/train.yaml's help template lists the groups through it


def objective_value(record: dict, name: str) -> float:
    """What a search sweeper (Optuna) optimises: a metric of the cell's record, or a final attention statistic."""
    metrics = record.get("metrics") or {}
    final = (record.get("attention") or {}).get("final") or {}
    for source in (metrics, final):
        if isinstance(source.get(name), int | float):
            return float(source[name])
    known = sorted(metrics) + sorted(k for k, v in final.items() if isinstance(v, int | float))
    raise ConfigError(f"optimized_metric={name!r} is not in the cell's record: one of {', '.join(known)}")


def failed_trial(cfg: DictConfig) -> None:
    """What a failed cell, or one whose objective is not finite, returns to a search sweeper: no value. The Optuna
    sweeper tells its study such a trial FAILED and goes on (hparams_search sets max_failure_rate to 1.0: whether a
    failure stops the search is sweep.continue_on_error's to say). A NaN instead makes Optuna refuse the value, and
    the sweeper then crashes telling the failure with that value."""
    log.warning("%s: reported to the search as a failed trial; the search goes on", cfg.run_name)
    return None


def print_each_line_once() -> None:
    """Lightning's top package (`import lightning`) gives its logger a console handler of its own and lets it
    propagate to the root logger, where Hydra's job logging prints it again: every INFO line showed twice. Hydra's
    handlers (its format, the cell's log file) are kept; Lightning's own goes once they are there."""
    if not logging.getLogger().handlers:
        return
    lightning_log = logging.getLogger("lightning")
    for handler in list(lightning_log.handlers):
        if type(handler) is logging.StreamHandler:
            lightning_log.removeHandler(handler)


def name_the_cell_in_each_line(run_name: str) -> None:
    """Parallel cells (hydra/launcher=joblib) interleave their lines in one terminal: each line names its cell.
    Hydra sets its job logging up again for every cell, so the prefix is never added twice."""
    for handler in logging.getLogger().handlers:
        formatter = handler.formatter
        fmt = getattr(formatter, "_fmt", None) or "%(message)s"
        if "%(message)s" in fmt and run_name not in fmt:
            cell_fmt = fmt.replace("%(message)s", f"[{run_name.replace('%', '%%')}] %(message)s")
            handler.setFormatter(logging.Formatter(cell_fmt, getattr(formatter, "datefmt", None)))


def cell_callbacks(settings: Any, run_dir: Path) -> list[Any]:
    """What a cell's Trainer gets besides loggers: the core's callbacks (callbacks.build_callbacks), drawing the
    extras' known-answer references on their pictures, and the extras' own (the noise band)."""
    from vit_locality import extras
    from vit_locality.callbacks import build_callbacks
    from vit_locality.extras.references import figure_references

    return build_callbacks(settings, run_dir, figure_references) + extras.run_callbacks(settings, run_dir)


def is_complete_cell(run_dir: Path, settings: RunSettings | None) -> bool:
    """Whether the cell runner will find the cell complete in `run_dir` and skip it in one line (run/cell.py); a
    cell whose settings are not known here (a DDP cell refused by the gate in its own process) is not."""
    if settings is None:
        return False
    try:
        return complete_already(run_dir, identities_of(settings))
    except OSError:  # a start checkpoint that cannot be read now: the cell runner says why
        return False


def gated_or_none(cfg: DictConfig) -> RunSettings | None:
    """A DDP cell's settings as its own process will have them (this machine aside), or None where it refuses them:
    that process then says why."""
    from vit_locality.precheck.gate import settings_from

    try:
        return settings_from(cfg, machine=False)
    except ConfigError:
        return None


def announce_cell(cfg: DictConfig, run_dir: Path, settings: RunSettings | None, child: bool = False) -> None:
    """What a cell shows as it starts: `cell k of N` (with the sweep's time left) in a sweep, the config tree in a
    single run (`startup.print_config`). Nothing in a DDP rank > 0, nor for a cell complete already, which the
    cell runner skips in one line; never a tree in a sweep's cell, whose command printed the sweep's (cli)."""
    if child or is_complete_cell(run_dir, settings):
        return
    if in_multirun():
        hydra_job = HydraConfig.get()
        durations = finished_durations(Path(hydra_job.sweep.dir))
        log.info("%s", cell_start_line(int(hydra_job.job.num) + 1, sweep_cells(), durations))
    elif cfg.startup.print_config and not in_sweep_command():
        from vit_locality.precheck.tree import config_tree_text

        print(config_tree_text(cfg), flush=True)


@hydra.main(version_base="1.3", config_path=CONF_PATH, config_name="train")
def main(cfg: DictConfig) -> float | None:
    # Heavy imports only after Hydra has parsed the command line (so --help and typos answer at once).
    from vit_locality.precheck.gate import settings_from
    from vit_locality.run.advice import remove_refused_run_dir
    from vit_locality.run.cell import CellInterrupted, run_cell
    from vit_locality.store.disk_space import disk_full_cause
    from vit_locality.tracking.quiet import quiet_library_noise

    quiet_library_noise()
    print_each_line_once()
    cfg.run_name = str(cfg.run_name)  # resolved once: the name is computed from the rest (precheck/names.py)
    if in_multirun() and "BasicLauncher" not in str(HydraConfig.get().launcher.get("_target_", "")):
        name_the_cell_in_each_line(cfg.run_name)  # cells run side by side
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    on_slurm = "SLURM_JOB_ID" in os.environ  # SLURM starts one task per rank itself: nothing to re-launch
    if is_ddp(cfg) and in_multirun() and not on_slurm:
        announce_cell(cfg, run_dir, gated_or_none(cfg))
        code = run_ddp_cell_in_own_process(run_dir)  # it skips a complete cell itself
        if code and not cfg.sweep.continue_on_error:
            sys.exit(code)
        return
    if not on_slurm:
        pin_gpu_for_parallel_cells(cfg)
    child = "LOCAL_RANK" in os.environ  # a DDP rank > 0 started by Lightning: it must not re-point anything
    original_argv = sys.argv if child else point_ddp_children_at_this_cell(run_dir)
    try:
        settings = settings_from(cfg)  # the job's own cell through the gate: on a SLURM node, the node's machine
        announce_cell(cfg, run_dir, settings, child)
        record = run_cell(settings, run_dir, cell_callbacks)
    except CellInterrupted as stop:
        log.error("%s", stop)
        sys.exit(stop.exit_code)
    except Exception as error:
        full = disk_full_cause(error, run_dir)  # said as such, whatever the writer raised (store/disk_space.py)
        log.error("%s failed: %s", cfg.run_name, first_line(full or error))
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            log.exception("full traceback")
        if exit_code_of(error) == 2 and not child:  # refused before anything ran: no run directory left behind
            remove_refused_run_dir(run_dir)
        if cfg.sweep.continue_on_error:
            return failed_trial(cfg) if cfg.optimized_metric else None  # recorded as failed; the verdict reports it
        sys.exit(exit_code_of(error))
    finally:
        sys.argv = original_argv
    if not cfg.optimized_metric:
        return None
    value = objective_value(record, cfg.optimized_metric)
    return value if math.isfinite(value) else failed_trial(cfg)


def sweep_configs(plan: Plan) -> list[dict[str, Any]]:
    """The resolved config of each run directory of a sweep (its first cell's), as the pre-check composed it."""
    from omegaconf import OmegaConf

    composed = {" ".join(cell): tree for cell, tree in plan.composer.composed.items()}
    trees = [composed[shown] for shown in plan.directories.values() if shown in composed]
    return [OmegaConf.to_container(OmegaConf.create(tree), resolve=True) for tree in trees]


def every_cell_complete(plan: Plan) -> bool:
    """Whether every cell of a grid sweep is complete already (each then skipped in one line); a search's cells are
    the bounds it draws from, never complete."""
    if plan.cell_count is None or not plan.run_dirs:
        return False
    identities = (plan.identities.get(run_dir.name) for run_dir in plan.run_dirs.values())
    pairs = zip(plan.run_dirs.values(), identities, strict=True)
    return all(identity is not None and complete_already(run_dir, (identity,)) for run_dir, identity in pairs)


def print_sweep_tree(plan: Plan) -> None:
    """A sweep's config tree, once, before its first cell (`startup.print_config` of its first cell): what its
    cells share, and each setting they sweep with its values (precheck/tree.py). None where every cell is complete
    already: the re-run only says, cell by cell, that it skips them."""
    from vit_locality.precheck.tree import sweep_tree_text

    configs = sweep_configs(plan)
    if not configs or not (configs[0].get("startup") or {}).get("print_config") or every_cell_complete(plan):
        return
    if plan.cell_count is None:
        title = "config of the search (a swept setting lists the bounds or choices its trials are drawn from)"
    else:
        title = f"config of the {plan.cell_count} cells of this sweep (a swept setting lists its values)"
    print(sweep_tree_text(configs, title), flush=True)


def register_help() -> None:
    """`--help` lists the config groups through `${config_groups:}` (conf/train.yaml's hydra.help.template):
    Hydra's own list would offer each group's shared parts (`data: _downloadable, _shared, ...`) too."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(HELP_GROUPS_RESOLVER):
        OmegaConf.register_new_resolver(HELP_GROUPS_RESOLVER, lambda: config_groups_text(CONF_DIR))


def command_context(checked: CheckedCommand) -> CommandContext:
    """What this command hands its cells (sweep/command.py): a new id, and from its plan the cell count, whether it
    is a sweep and each cell's run directory. Without a plan (a DDP cell's own process, started on the cell's saved
    config) the sweep's count and mark are the ones it inherited."""
    plan = checked.plan
    if plan is None:
        inherited = current_command()
        return CommandContext(new_command_id(), inherited.cell_count, inherited.sweep)
    return CommandContext(new_command_id(), plan.cell_count, plan.multirun, run_dirs_of(plan.run_dirs))


def cli() -> None:
    """`python train.py` and the installed `vit-locality-train`: check every cell, run, give the verdict."""
    sleep_while_waiting()  # OMP_WAIT_POLICY=PASSIVE on a CPU, before anything loads torch (run/wait_policy.py)
    # Every cell composed, checked and named; data to download: its server must answer before anything is made.
    checked = plan_command(sys.argv[1:], CONF_DIR, ask_servers=True)
    for problem in checked.problems:
        print(f"error: {problem}", file=sys.stderr)
    if checked.problems:
        sys.exit(2)
    register_resolvers()  # before main(): Hydra resolves run_name when it builds the output directory
    register_help()
    from vit_locality.sweep.verdict import report_verdict, started_sweep_dir

    # This command's id (its cells and verdict, no other's), cell count ("cell k of N") and sweep mark (a sweep's
    # cells print no tree), handed to every process that runs one of its cells.
    context = publish_command(command_context(checked))
    if checked.plan is not None and checked.plan.multirun:
        print_sweep_tree(checked.plan)
    main()
    sweep_dir = started_sweep_dir()  # where Hydra's multirun wrote (None: a single run)
    if sweep_dir is not None and (status := report_verdict(sweep_dir, context.command_id)):
        sys.exit(status)


if __name__ == "__main__":
    cli()
