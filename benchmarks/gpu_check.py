"""`python -m benchmarks.gpu_check` (`make gpu-check`): the first thing to run on a new GPU machine, in at most about
10 minutes of device time.

Steps, in order, each a subprocess under its own timeout (and the whole check's `--budget-s`), each with its log in
the output folder (default reports/gpu_check/: `<step>.log`, `summary.json`; train.py's runs under `runs/`, named
debug runs that no report counts):

- install: the versions of torch (and its CUDA build), lightning, torchvision and timm.
- cuda: CUDA visible, the device's name, compute capability and bf16 support, the device count.
- fdr_*: a `trainer.fast_dev_run` of train.py (the paper model on synthetic data) on each CUDA path: the defaults
  (data on the device, compiled, bf16), the per-sample data workers (`data.on_device=false`), AutoAugment batched on
  the GPU behind the workers (`aug.device=gpu`), `trainer.deterministic=true` (CUDA may refuse an operation in
  deterministic mode: the step records what happens and does not count against the exit status), the ColorJitter
  policy, and DDP (`trainer=ddp`) when more than one GPU is visible.
- sync_count: host syncs in a few training steps of train.py, counted by `torch.cuda.set_sync_debug_mode("warn")`.
- paper_epoch: one epoch of the paper cell (real CIFAR-100 when it is in data.root, else the synthetic set in its
  shape: 100 classes, 50,000 + 10,000 images, which the key line says), its time and the recompiles
  (TORCH_LOGS=recompiles).
- modern_eager, modern_compiled: one epoch of the Modern cell of the paper model (on the same synthetic shape)
  eager and with the whole training step compiled (`model.compile=true`): the mode the run chose, its epoch time,
  the graphs dynamo compiled, the graph breaks and the recompiles (dry run: a near-zero model, CPU inductor).
- bench: what fits of `make bench-gpu` in the time left (`--budget-s`, which bounds its whole call); the dry run
  runs its sections `DRY_BENCH` names (AutoAugment, the fused packs of 1, 8 and 24 cells, the projection).

A failing or timed-out step does not stop the next; the summary table (step, status, seconds, key line) is printed
and written to summary.json; the exit status is 1 when a step that counts failed or timed out. `--dry-run` runs the
same steps on the CPU with tiny sizes (vit_tiny, a small synthetic set) in about 2 to 3 minutes, the CUDA-only ones
marked "skipped: no CUDA", so the script has run before the first GPU session does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # the checkout: train.py and `python -m benchmarks` run from here
STOP_GRACE_S = 10.0  # a timed-out step's process group gets this long after SIGTERM before SIGKILL
BENCH_MIN_S = {False: 20.0, True: 10.0}  # the bench is skipped with less left (by mode): its start takes seconds
DRY_BENCH = "autoaugment,fused,projection"  # the dry run's bench sections: seconds on a CPU (tests run the rest)
PAPER = {"train": 50_000, "test": 10_000, "classes": 100}  # CIFAR-100's shape, for the synthetic stand-in
PAPER_SHAPE = [f"data.num_classes={PAPER['classes']}", f"data.train_size={PAPER['train']}",
               f"data.test_size={PAPER['test']}"]  # fmt: skip

# Tiny sizes of the dry run (as the tests' QUICK runs): seconds per train.py run on 2 CPU cores.
DRY_TRAIN = ["data=synthetic", "model=vit_tiny", "trainer=cpu", "data.train_size=256", "data.test_size=64",
             "data.batch_size=64"]  # fmt: skip
GPU_TRAIN = ["data=synthetic", "model=vit_paper"]

INSTALL = """
import importlib
found = []
for name in ("torch", "lightning", "torchvision", "timm"):
    module = importlib.import_module(name)
    found.append(f"{name} {module.__version__}")
import torch
print(", ".join(found) + f" (torch's CUDA build: {torch.version.cuda})")
"""

CUDA = """
import json, sys, torch
dry = sys.argv[1] == "dry"
info = {"available": torch.cuda.is_available(), "count": torch.cuda.device_count()}
if info["available"]:
    capability = ".".join(map(str, torch.cuda.get_device_capability(0)))
    info |= {"name": torch.cuda.get_device_name(0), "capability": capability, "bf16": torch.cuda.is_bf16_supported()}
print("CUDA_INFO " + json.dumps(info))
if info["available"]:
    print(f"{info['count']} x {info['name']}, capability {info['capability']}, bf16 {info['bf16']}")
else:
    print("no CUDA device visible" + (" (dry run: expected)" if dry else ""))
sys.exit(0 if info["available"] or dry else 1)
"""

# train.py with torch's sync debug mode on from the second training batch (the first compiles) to the end of
# training; every "synchronizing" warning is counted by where it was raised, and one line says how many per step.
SYNC_COUNT = """
import sys, warnings
from collections import Counter
from pathlib import Path
import torch
from vit_locality.model.classifier import ViTClassifier
seen, steps, cuda = Counter(), [0], torch.cuda.is_available()
shown = warnings.showwarning
def count(message, category, filename, lineno, file=None, line=None):
    if "synchroniz" in str(message):
        seen[f"{Path(filename).name}:{lineno}"] += 1
    else:
        shown(message, category, filename, lineno, file, line)
warnings.showwarning = count
batch_start, train_end = ViTClassifier.on_train_batch_start, ViTClassifier.on_train_end
def on_start(self, batch, batch_idx):
    if batch_idx >= 1:
        steps[0] += 1
        if batch_idx == 1 and cuda:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
    return batch_start(self, batch, batch_idx)
def on_train_end(self):
    train_end(self)
    if cuda:
        torch.cuda.set_sync_debug_mode("default")
    places = "; ".join(f"{p} x{n}" for p, n in seen.most_common(3))
    total, per = sum(seen.values()), sum(seen.values()) / max(steps[0], 1)
    note = "" if cuda else " (CPU: no CUDA syncs to see)"
    print(f"SYNCS {total} host-sync warnings in {steps[0]} training steps ({per:g} per step){note}"
          + (f": {places}" if places else ""), flush=True)
ViTClassifier.on_train_batch_start = on_start
ViTClassifier.on_train_end = on_train_end
from vit_locality.train import cli
cli()
"""

# train.py with dynamo's counters read at the end of training: the graphs compiled, the graph breaks and the
# recompiles (TORCH_LOGS=recompiles lists them in the log too), after the run's own `compile:` line.
COMPILE_COUNT = """
import torch._dynamo as dynamo
from vit_locality.model.classifier import ViTClassifier
train_end = ViTClassifier.on_train_end
def on_train_end(self):
    train_end(self)
    counters = dynamo.utils.counters
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    print(f"GRAPHS {graphs} graphs, {breaks} graph breaks", flush=True)
ViTClassifier.on_train_end = on_train_end
from vit_locality.train import cli
cli()
"""
MODERN = ["aug.autoaug=true", "aug.cutmix=true", "loss.ls=0.1"]
# The dry run's compiled cell: a near-zero model on on-device data, so the CPU's inductor compile takes seconds.
DRY_COMPILE = ["model.depth=1", "model.dim=16", "model.heads=2", "stats.early_layers=1", "data.on_device=true",
               "data.image_size=16", "data.num_workers=0", "data.batch_size=32"]  # fmt: skip


@dataclass
class Context:
    """What the steps' commands depend on: the mode, where results go, what the cuda step found, the user's extras."""

    dry: bool
    out: Path
    cuda: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Step:
    """One check: its command (or why it is skipped), its own timeout, and how its key line is read from its log."""

    name: str
    what: str
    timeout_s: float
    command: Callable[[Context, str], list[str] | str]  # a command line, or the reason it is skipped
    key: Callable[[str, Context], str] | None = None  # the key line from the log (default: `last_line`)
    counts: bool = True  # a failure sets the exit status (deterministic mode on CUDA may fail, as a finding)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    """One step's result, as summary.json and the table give it."""

    step: str
    status: str  # ok | failed | timeout | skipped: <why>
    seconds: float
    line: str
    what: str = ""
    log: str = ""
    command: str = ""
    counts: bool = True


def last_line(text: str, ctx: Context | None = None) -> str:
    """The last non-empty line: a command's result or its one-line error."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def train_key(text: str, ctx: Context) -> str:
    """A train.py run's result line (its test accuracy and where results.json went), else its last line."""
    found = re.findall(r"INFO\] - (\S+: test acc1 [0-9.]+)", text)
    return found[-1] if found else last_line(text)


def train(ctx: Context, name: str, overrides: list[str], cuda_only: bool = False) -> list[str] | str:
    """train.py as a user runs it: the paper model on synthetic data (dry run: the tiny model, small set, CPU), a
    debug run in the output folder, plus `overrides` and the user's `--args` for this step."""
    if cuda_only and ctx.dry:
        return "skipped: no CUDA"
    if not ctx.dry and not ctx.cuda.get("available"):
        return "skipped: no CUDA"
    base = DRY_TRAIN if ctx.dry else GPU_TRAIN
    where = [f"hydra.run.dir={ctx.out / 'runs' / name}", "sweep_name=debug", "callbacks.progress_bar=none"]
    return [sys.executable, str(ROOT / "train.py"), *base, *overrides, *where, *ctx.extra.get(name, [])]


def fdr(overrides: list[str]) -> Callable[[Context, str], list[str] | str]:
    return lambda ctx, name: train(ctx, name, ["trainer.fast_dev_run=true", *overrides])


def ddp(ctx: Context, name: str) -> list[str] | str:
    """DDP across every visible GPU, with two or more (one needs no DDP; the CPU stand-in, ddp_cpu, is the tests')."""
    if ctx.dry or not ctx.cuda.get("available"):
        return "skipped: no CUDA"
    if ctx.cuda.get("count", 0) < 2:
        return f"skipped: {ctx.cuda.get('count', 0)} GPU visible, DDP needs 2 or more"
    return train(ctx, name, ["trainer=ddp", "trainer.fast_dev_run=true"])


def sync_count(ctx: Context, name: str) -> list[str] | str:
    """A few training steps of train.py under the sync debug mode (SYNC_COUNT); on the CPU it checks the harness."""
    smaller = ["data.batch_size=32"] if ctx.dry else []  # 8 batches of the dry run's 256 images
    command = train(ctx, name, ["trainer.max_steps=6", "trainer.max_epochs=1", *smaller])
    if isinstance(command, str):
        return command
    return [sys.executable, "-c", SYNC_COUNT, *command[2:]]


def modern_epoch(compiled: bool) -> Callable[[Context, str], list[str] | str]:
    """One epoch of the Modern cell of the paper model, eager or with the whole step compiled (COMPILE_COUNT)."""

    def command(ctx: Context, name: str) -> list[str] | str:
        flags = [*MODERN, f"model.compile={str(compiled).lower()}", "trainer.max_epochs=1"]
        shape = DRY_COMPILE if ctx.dry else PAPER_SHAPE
        found = train(ctx, name, [*shape, *flags])
        return found if isinstance(found, str) else [sys.executable, "-c", COMPILE_COUNT, *found[2:]]

    return command


def modern_key(text: str, ctx: Context) -> str:
    """The epoch's time as the run logged it, the compile mode the run chose, graphs, breaks and recompiles."""
    timed = re.findall(r"epoch 1/1(?:, step \d+/\d+)? \(([0-9.]+) s\)", text)
    graphs = re.findall(r"^GRAPHS (.*)$", text, flags=re.MULTILINE)
    mode = re.findall(r"compile: the whole training step as one graph, (mode=\S+ \([^)]*\))", text)
    if not timed or not graphs:
        return last_line(text)
    recompiles = len(re.findall(r"Recompiling function", text))
    compiled = f"{mode[-1]}, " if mode else "eager, "
    return f"{compiled}1 epoch in {timed[-1]} s (as the run logged it), {graphs[-1]}, {recompiles} recompiles"


def sync_key(text: str, ctx: Context) -> str:
    found = re.findall(r"^SYNCS (.*)$", text, flags=re.MULTILINE)
    return found[-1] if found else last_line(text)


def real_cifar100() -> Path | None:
    """Where CIFAR-100 lies if train.py could read it without a download (data.root's default), else None."""
    from vit_locality.datasets import spec_of

    root = Path(os.path.expanduser(os.environ.get("VIT_LOCALITY_DATA", "data")))
    root = root if root.is_absolute() else ROOT / root
    archive = spec_of("cifar100").archive()
    present = (root / archive.folder).exists() or (root / archive.filename).is_file()
    return root if present else None


def paper_epoch(ctx: Context, name: str) -> list[str] | str:
    """One epoch of the paper cell: real CIFAR-100 when present (never downloaded here), else its synthetic shape."""
    if ctx.dry:
        return train(ctx, name, ["trainer.max_epochs=1"])
    if real_cifar100() is not None:
        return train(ctx, name, ["data=cifar100", "data.download=false", "trainer.max_epochs=1"])
    return train(ctx, name, [*PAPER_SHAPE, "trainer.max_epochs=1"])


def epoch_key(text: str, ctx: Context) -> str:
    """The data the epoch read, its time as the run logged it, and the recompiles TORCH_LOGS listed."""
    timed = re.findall(r"epoch 1/1(?:, step \d+/\d+)? \(([0-9.]+) s\)", text)
    if not timed:
        return last_line(text)
    if ctx.dry:
        data = "synthetic (dry run: tiny model, 256 images; compile is off on the CPU)"
    elif "data=cifar100" in text.splitlines()[0]:
        data = "real CIFAR-100"
    else:
        data = "synthetic in CIFAR-100's shape (real CIFAR-100 not in data.root)"
    recompiles = len(re.findall(r"Recompiling function", text))
    return f"{data}: 1 epoch in {timed[-1]} s (as the run logged it), {recompiles} recompiles"


def bench(ctx: Context, name: str, left_s: float) -> list[str] | str:
    """`make bench-gpu`'s call with the time left as its budget (which bounds its whole call), into the output
    folder (BENCHMARKS.md is left alone: copy the rows file in once they are worth keeping)."""
    budget = left_s - 10.0  # its interpreter's start and the table after the budget
    if budget < BENCH_MIN_S[ctx.dry]:
        return f"skipped: time budget ({left_s:.0f} s left)"
    command = [sys.executable, "-m", "benchmarks", "gpu", "--budget-s", f"{budget:.0f}"]
    command += ["--out", str(ctx.out / "bench_gpu.json"), "--markdown", str(ctx.out / "bench_gpu_rows.md")]
    command += ["--device", "cpu", "--smoke", "--sections", DRY_BENCH] if ctx.dry else []
    if not ctx.dry and not ctx.cuda.get("available"):
        return "skipped: no CUDA"
    return [*command, *ctx.extra.get(name, [])]


def bench_key(text: str, ctx: Context) -> str:
    """How many rows the bench wrote, which sections it cut or skipped or lost, and its targets line."""
    path = ctx.out / "bench_gpu.json"
    if not path.exists():
        return last_line(text)
    rows = json.loads(path.read_text())["rows"]
    trouble = [f"{r['section']} {r['quantity'].split()[-1]}" for r in rows if r["quantity"].startswith("section ")]
    targets = re.findall(r"^(Targets met: .*)$", text, flags=re.MULTILINE)
    parts = [
        f"{len(rows)} rows in {ctx.out / 'bench_gpu_rows.md'}",
        *(targets[-1:]),
        *(trouble and [", ".join(trouble)]),
    ]
    return "; ".join(parts)


def python_c(script: str, *args: str) -> Callable[[Context, str], list[str]]:
    return lambda ctx, name: [sys.executable, "-c", script, *args, *(["dry"] if ctx.dry else ["gpu"])]


def steps(dry: bool) -> list[Step]:
    """Every step in order, with its own timeout (the dry run's are shorter: tiny sizes, no compile)."""
    t = 90.0 if dry else 150.0  # a fast dev run: interpreter, data, (compile on CUDA), one batch of each loop
    return [
        Step("install", "torch, lightning, torchvision, timm import; versions", 60, python_c(INSTALL)),
        Step("cuda", "CUDA visible: device, capability, bf16", 60, python_c(CUDA)),
        Step("fdr_auto", "fast dev run, defaults (on-device data, compile, bf16)", t, fdr([]), train_key),
        Step("fdr_workers", "fast dev run, per-sample data workers", t,
             fdr(["data.on_device=false", "data.num_workers=2"]), train_key),
        Step("fdr_aug_gpu", "fast dev run, workers + AutoAugment batched on the GPU", t,
             fdr(["data.on_device=false", "data.num_workers=2", "aug.device=gpu"]), train_key),
        Step("fdr_deterministic", "fast dev run, trainer.deterministic=true (may be refused on CUDA)", t,
             fdr(["trainer.deterministic=true"]), train_key, counts=False),
        Step("fdr_colorjitter", "fast dev run, ColorJitter policy", t,
             fdr(["aug.autoaug=true", "aug.policy=colorjitter"]), train_key),
        Step("fdr_ddp", "fast dev run, DDP over every GPU (trainer=ddp)", t + 60, ddp, train_key),
        Step("sync_count", "host syncs in training steps (set_sync_debug_mode warn)", t + 30, sync_count, sync_key),
        Step("paper_epoch", "one epoch of the paper cell, time and recompiles", 90 if dry else 240, paper_epoch,
             epoch_key, env={"TORCH_LOGS": "recompiles"}),
        Step("modern_eager", "one Modern epoch of the paper model, eager", 90 if dry else 200, modern_epoch(False),
             modern_key, env={"TORCH_LOGS": "recompiles"}),
        Step("modern_compiled", "the same epoch, the whole step compiled (mode, graphs, recompiles)",
             150 if dry else 240, modern_epoch(True), modern_key, env={"TORCH_LOGS": "recompiles"}),
        Step("bench", "what fits of make bench-gpu in the time left", 0, lambda ctx, name: "", bench_key),
    ]  # fmt: skip


STEP_NAMES = [s.name for s in steps(True)]


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's whole process group (its data workers, the bench's packed cells), SIGKILL after
    STOP_GRACE_S: a timed-out step leaves nothing running on the GPU."""
    for signum, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    with suppress(ProcessLookupError):  # what of the group outlived its leader
        os.killpg(proc.pid, signal.SIGKILL)


def execute(command: list[str], log: Path, timeout_s: float, env: dict[str, str]) -> str:
    """Run `command` in a process group of its own, output to `log`: ok, failed or timeout. Whatever stops this
    script (SIGTERM, Ctrl-C) stops the step's group first."""
    with log.open("w") as out:
        out.write(f"$ {shlex.join(command)}\n")
        out.flush()
        proc = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            code = proc.wait(timeout=max(timeout_s, 0.001))
        except subprocess.TimeoutExpired:
            stop_group(proc)
            return "timeout"
        except BaseException:
            stop_group(proc)
            raise
    return "ok" if code == 0 else "failed"


def run_step(step: Step, ctx: Context, timeout_s: float, left_s: float) -> Outcome:
    """One step: skipped (with why), or run under min(its timeout, the budget left), its key line from its log."""
    log = ctx.out / f"{step.name}.log"
    command = bench(ctx, step.name, left_s) if step.name == "bench" else step.command(ctx, step.name)
    timeout = left_s if step.name == "bench" else min(timeout_s, left_s)
    if isinstance(command, str):
        return Outcome(step.name, command, 0.0, "", step.what, counts=step.counts)
    if left_s <= 1:
        return Outcome(step.name, "skipped: time budget", 0.0, "", step.what, counts=step.counts)
    shutil.rmtree(ctx.out / "runs" / step.name, ignore_errors=True)  # else train.py skips a run complete there
    env = {"OMP_NUM_THREADS": "1"} if ctx.dry else {}
    env |= {"WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "0", **step.env}
    began = time.monotonic()
    status = execute(command, log, timeout, env)
    seconds = time.monotonic() - began
    text = log.read_text(errors="replace")
    if status == "timeout":
        output = text.split("\n", 1)[1] if "\n" in text else ""  # past the command line
        line = f"timed out after {timeout:.0f} s; last output: {last_line(output) if output.strip() else 'none'}"
    else:
        line = (step.key or last_line)(text, ctx)
    return Outcome(step.name, status, seconds, line, step.what, str(log), shlex.join(command), step.counts)


def read_cuda(ctx: Context) -> None:
    """What the cuda step found (its CUDA_INFO line), for the steps that depend on it."""
    log = ctx.out / "cuda.log"
    found = re.findall(r"^CUDA_INFO (.*)$", log.read_text(errors="replace"), flags=re.MULTILINE) if log.exists() else []
    ctx.cuda = json.loads(found[-1]) if found else {}


def table(outcomes: list[Outcome]) -> str:
    """step | status | seconds | key line, as plain text for the terminal."""
    width = max(len(o.step) for o in outcomes)
    status = max(len(o.status) for o in outcomes)
    lines = [f"{'step':<{width}}  {'status':<{status}}  {'seconds':>7}  key line"]
    for o in outcomes:
        mark = "" if o.counts else " (informational)"
        lines.append(f"{o.step:<{width}}  {o.status:<{status}}  {o.seconds:7.1f}  {o.line}{mark}")
    return "\n".join(lines)


def key_values(values: list[str], flag: str) -> dict[str, str]:
    """`STEP=VALUE` options (repeatable); ValueError naming the steps when STEP is not one."""
    parsed = {}
    for value in values:
        step, sep, rest = value.partition("=")
        if not sep or step not in [*STEP_NAMES, "all"]:
            raise ValueError(f"{flag} {value!r}: expected STEP=VALUE with STEP one of all, {', '.join(STEP_NAMES)}")
        parsed[step] = rest
    return parsed


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, tiny sizes; CUDA-only steps skipped")
    parser.add_argument("--out", type=Path, default=Path("reports/gpu_check"), help="logs and summary.json")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="the whole check's seconds (default 560; dry run 240); the bench gets what is left",
    )
    parser.add_argument("--steps", default=",".join(STEP_NAMES), help="run only these (the rest: skipped)")
    parser.add_argument(
        "--timeout",
        action="append",
        default=[],
        metavar="STEP=SECONDS",
        help="a step's own timeout (repeatable; STEP `all` for every step)",
    )
    parser.add_argument(
        "--args",
        action="append",
        default=[],
        metavar="STEP=ARGS",
        help="extra arguments for a step's command, e.g. paper_epoch=data.root=/data (repeatable)",
    )
    args = parser.parse_args(argv)  # fmt: skip
    chosen = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STEP_NAMES]
    if unknown:
        parser.error(f"--steps: unknown {', '.join(unknown)}; choose from {', '.join(STEP_NAMES)}")
    args.steps = chosen
    try:
        args.timeout = {k: float(v) for k, v in key_values(args.timeout, "--timeout").items()}
        args.args = {k: shlex.split(v) for k, v in key_values(args.args, "--args").items()}
    except ValueError as error:
        parser.error(str(error))
    args.budget_s = args.budget_s if args.budget_s is not None else (240.0 if args.dry_run else 560.0)
    return args


def summarize(outcomes: list[Outcome], args: argparse.Namespace, elapsed_s: float) -> dict[str, Any]:
    """summary.json's content: the mode, the budget, every step (run or not), and whether the check passed."""
    bad = [o.step for o in outcomes if o.counts and o.status in ("failed", "timeout")]
    return {
        "dry_run": args.dry_run,
        "budget_s": args.budget_s,
        "elapsed_s": round(elapsed_s, 1),
        "passed": not bad,
        "not_passed": bad,
        "steps": [asdict(o) | {"seconds": round(o.seconds, 1)} for o in outcomes],
    }


def main(argv: list[str] | None = None) -> int:
    """Every step in order (a failure or timeout never stops the next), the summary after each; 0 when every step
    that counts passed or was skipped."""
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    ctx = Context(args.dry_run, args.out.resolve(), extra=args.args)
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    outcomes: list[Outcome] = []
    try:
        for step in steps(args.dry_run):
            left = args.budget_s - (time.monotonic() - started)
            if step.name not in args.steps:
                outcome = Outcome(step.name, "skipped: not in --steps", 0.0, "", step.what, counts=step.counts)
            else:
                timeout = args.timeout.get(step.name, args.timeout.get("all", step.timeout_s))
                print(f"[gpu-check] {step.name}: {step.what} ...", file=sys.stderr, flush=True)
                outcome = run_step(step, ctx, timeout, left)
            outcomes.append(outcome)
            if step.name == "cuda":
                read_cuda(ctx)
            summary = summarize(outcomes, args, time.monotonic() - started)
            (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(table(outcomes))
    where = f"logs and summary.json in {args.out}"
    verdict = "passed" if summary["passed"] else f"NOT passed: {', '.join(summary['not_passed'])}"
    print(f"gpu-check {verdict} in {summary['elapsed_s']:.0f} s ({'dry run, ' if args.dry_run else ''}{where})")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
