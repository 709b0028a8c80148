"""Train one protocol cell, or a sweep of them with `-m` (usage: the checkout's train.py; exit statuses:
docs/troubleshooting.md). Every cell of the command is checked before the first one starts (docs/runs.md)."""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vit_locality.config.identity import identities_of
from vit_locality.config.settings import RunSettings
from vit_locality.errors import ConfigError, exit_code_of, first_line
from vit_locality.paths import CONF_DIR, CONF_PACKAGE, CONF_PATH
from vit_locality.precheck.command_line import command_args
from vit_locality.precheck.preflight import check_command, plan_command
from vit_locality.precheck.refusals import config_groups_text
from vit_locality.precheck.resolvers import register_resolvers
from vit_locality.run.threads import sleep_while_waiting
from vit_locality.sweep.command import CommandContext, current_command, new_command_id, publish_command
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


def announce_cell(cfg: DictConfig, run_dir: Path, settings: RunSettings | None, child: bool = False) -> None:
    """What a cell shows as it starts: `cell k of N` (with the sweep's time left) in a sweep, the config tree in a
    single run (`startup.print_config`). Nothing in a DDP rank > 0, nor for a cell complete already, which the
    cell runner skips in one line; never a tree in a sweep's cell, whose command printed the sweep's (cli)."""
    if child or is_complete_cell(run_dir, settings):
        return
    if in_multirun():
        hydra_job = HydraConfig.get()
        durations = finished_durations(Path(hydra_job.sweep.dir))
        log.info("%s", cell_start_line(int(hydra_job.job.num) + 1, current_command().cell_count, durations))
    elif cfg.startup.print_config and not current_command().sweep:  # a sweep's command printed its tree
        from vit_locality.precheck.tree import config_tree_text

        print(config_tree_text(cfg), flush=True)


def run_cell_job(cfg: DictConfig, checked: RunSettings | None = None) -> float | None:
    """Hydra's job for one cell. `checked`: the cell's settings as the command's check validated and named them
    (machine checks included, but for a SLURM node's), else validated here through the gate."""
    # Heavy imports only after Hydra has parsed the command line (so --help and typos answer at once).
    from vit_locality.precheck.gate import on_this_machine, settings_from
    from vit_locality.run.cell import CellInterrupted, run_cell
    from vit_locality.run.lock import remove_refused_run_dir
    from vit_locality.store.atomic import disk_full_cause
    from vit_locality.tracking.wandb_mode import quiet_library_noise

    quiet_library_noise()
    print_each_line_once()
    # Resolved once: the name is computed from the rest (precheck/names.py), or was by the command's check.
    cfg.run_name = str(cfg.run_name) if checked is None else checked.run_name
    if in_multirun() and "BasicLauncher" not in str(HydraConfig.get().launcher.get("_target_", "")):
        name_the_cell_in_each_line(cfg.run_name)  # cells run side by side
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    on_slurm = "SLURM_JOB_ID" in os.environ  # SLURM starts one task per rank itself: nothing to re-launch
    if is_ddp(cfg) and in_multirun() and not on_slurm:
        announce_cell(cfg, run_dir, checked)
        code = run_ddp_cell_in_own_process(run_dir)  # it skips a complete cell itself
        if code and not cfg.sweep.continue_on_error:
            sys.exit(code)
        return
    if not on_slurm:
        pin_gpu_for_parallel_cells(cfg)
    child = "LOCAL_RANK" in os.environ  # a DDP rank > 0 started by Lightning: it must not re-point anything
    original_argv = sys.argv if child else point_ddp_children_at_this_cell(run_dir)
    try:
        settings = settings_from(cfg) if checked is None else on_this_machine(checked) if on_slurm else checked
        announce_cell(cfg, run_dir, settings, child)
        if settings.packs:  # a packed cell that its launcher did not pack (a single run): a pack of its own
            records = run_pack_job([(settings, run_dir)], run_dir.name)
            return objective_of(cfg, records[0])
        record = run_cell(settings, run_dir, cell_callbacks, current_command().command_id)
    except CellInterrupted as stop:
        log.error("%s", stop)
        sys.exit(stop.exit_code)
    except Exception as error:
        full = disk_full_cause(error, run_dir)  # said as such, whatever the writer raised (store/atomic.py)
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
    return objective_of(cfg, record)


def objective_of(cfg: DictConfig, record: dict | None) -> float | None:
    """What the cell returns to its sweeper: its objective when a search asks for one (None for a failed cell)."""
    if not cfg.optimized_metric:
        return None
    if record is None:
        return failed_trial(cfg)
    value = objective_value(record, cfg.optimized_metric)
    return value if math.isfinite(value) else failed_trial(cfg)


def run_pack_job(entries: list[tuple[RunSettings, Path]], pack_id: str) -> list[dict | None]:
    """Hydra's job for a pack of cells (hydra/launcher=packed): trained together, each into its own directory, its
    lines in each cell's log too; each one's record (None: failed). A cell that failed stops the sweep after its pack
    unless sweep.continue_on_error."""
    from vit_locality.run.cell import CellInterrupted
    from vit_locality.run.pack import run_pack
    from vit_locality.tracking.wandb_mode import quiet_library_noise

    quiet_library_noise()
    print_each_line_once()
    shown = next((h.formatter for h in logging.getLogger().handlers if h.formatter is not None), None)
    handlers = [logging.FileHandler(run_dir / f"{HydraConfig.get().job.name}.log") for _, run_dir in entries]
    for handler in handlers:
        handler.setFormatter(shown or logging.Formatter("%(message)s"))
        logging.getLogger().addHandler(handler)
    try:
        records = run_pack(entries, cell_callbacks, current_command().command_id, pack_id)
    except CellInterrupted as stop:
        log.error("%s", stop)
        sys.exit(stop.exit_code)
    finally:
        for handler in handlers:
            logging.getLogger().removeHandler(handler)
            handler.close()
    failed = [settings.run_name for (settings, _), record in zip(entries, records, strict=True) if record is None]
    if failed and not entries[0][0].sweep.continue_on_error:
        log.error("stopping the sweep: %s failed (sweep.continue_on_error=false)", ", ".join(failed))
        sys.exit(1)
    return records


class CellJobs:
    """Hydra's task for a command: one cell (a call), or under hydra/launcher=packed a pack of them (`run_pack`)."""

    def __call__(self, cfg: DictConfig, checked: RunSettings | None = None) -> float | None:
        return run_cell_job(cfg, checked)

    def run_pack(self, entries: list[tuple[RunSettings, Path]], cfgs: list[DictConfig], pack_id: str) -> list[Any]:
        """Train a pack; what each cell returns to its sweeper (its objective, for a search)."""
        records = run_pack_job(entries, pack_id)
        return [objective_of(cfg, record) for cfg, record in zip(cfgs, records, strict=True)]


def register_help() -> None:
    """`--help` lists the config groups through `${config_groups:}` (conf/train.yaml's hydra.help.template):
    Hydra's own list would offer each group's shared parts (`data: _downloadable, _shared, ...`) too."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(HELP_GROUPS_RESOLVER):
        OmegaConf.register_new_resolver(HELP_GROUPS_RESOLVER, lambda: config_groups_text(CONF_DIR))


main = hydra.main(version_base="1.3", config_path=CONF_PATH, config_name="train")(run_cell_job)


def run_hydra(argv: list[str], args: Any, overrides: list[str], task: Callable[..., Any]) -> None:
    """Hydra's run or multirun of the command, as `hydra.main` starts them less its first composition, made only to
    read `hydra.mode` (which `-m` says here): one composition for the command. Where Hydra refuses the command, the
    pre-check says why in one line (exit status 2)."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from vit_locality.upstream import hydra_run_and_report

    mode = "MULTIRUN" if args.multirun else "RUN"
    try:
        with initialize_config_module(config_module=CONF_PACKAGE, job_name="train", version_base="1.3"):
            app = GlobalHydra.instance().hydra
            start = app.multirun if args.multirun else app.run
            name = args.config_name or "train"
            start(config_name=name, task_function=task, overrides=[*overrides, f"hydra.mode={mode}"])
    except Exception as error:
        problems = check_command(argv, CONF_DIR)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        if problems:
            sys.exit(2)
        hydra_run_and_report()(partial(_raise, error))


def _raise(error: Exception) -> None:
    raise error


def cli() -> None:
    """`python train.py` and the installed `vit-locality-train`: check every cell, run, give the verdict."""
    sleep_while_waiting()  # OMP_WAIT_POLICY=PASSIVE on a CPU, before anything loads torch (run/threads.py)
    argv = sys.argv[1:]
    args, problem = command_args(argv)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        sys.exit(2)
    register_resolvers()  # before Hydra: it resolves run_name when it builds the output directory
    register_help()
    from vit_locality.sweep.verdict import report_verdict, started_sweep_dir

    # This command's id (its cells and verdict, no other's) and sweep mark (a sweep's cells print no tree), handed to
    # every process that runs one of its cells; a sweep's sweeper adds its cell count (plugins/sweeper.py).
    if args is None:  # --help, --cfg, ...; another config tree (a DDP cell's own process): Hydra's own
        inherited = current_command()
        context = publish_command(CommandContext(new_command_id(), inherited.cell_count, inherited.sweep))
        main()
    elif args.multirun:  # the sweeper composes and checks every cell before the first starts
        context = publish_command(CommandContext(new_command_id(), sweep=True))
        run_hydra(argv, args, args.overrides, CellJobs())
    else:  # the one cell composed and checked here, run on those settings in its directory as checked
        checked = plan_command(argv, CONF_DIR, ask_servers=True)
        for problem in checked.problems:
            print(f"error: {problem}", file=sys.stderr)
        if checked.problems or checked.plan is None:
            sys.exit(2)
        context = publish_command(CommandContext(new_command_id()))
        settings = next((settings for _, settings in checked.plan.checked.values()), None)
        run_dir = next(iter(checked.plan.run_dirs.values()), None)  # Hydra then resolves no run name
        named_dir = [f"hydra.run.dir={quoted(str(run_dir))}"] if run_dir is not None else []
        run_hydra(argv, args, [*args.overrides, *named_dir], partial(run_cell_job, checked=settings))
    sweep_dir = started_sweep_dir()  # where Hydra's multirun wrote (None: a single run)
    if sweep_dir is not None and (status := report_verdict(sweep_dir, context.command_id)):
        sys.exit(status)


def quoted(value: str) -> str:
    """A value as a Hydra override reads it literally (no sweep at a comma, no interpolation)."""
    return "'" + value.replace("'", "\\'") + "'"


if __name__ == "__main__":
    cli()
