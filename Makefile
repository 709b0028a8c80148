# vit-locality: `make help` lists the targets and these variables.
# VENV: the virtualenv `make install` creates on first use and installs the package into (default .venv); install,
#   test, demo, lint, format and bench run its Python.
# PY: the Python the report targets (table-ablation, table-protocols, figures, paper) and the sweeps they train run.
#   Default: the active virtualenv's ($VIRTUAL_ENV) when one is active, else VENV's. A PY outside VENV is used as it
#   is, nothing created or installed: `make table-ablation SWEEP=multirun/x PY=python`. VENV's (the default, or an
#   activated .venv) is installed first, as every other target does.
VENV ?= .venv
VENV_PY := $(VENV)/bin/python
PY ?= $(if $(VIRTUAL_ENV),$(VIRTUAL_ENV)/bin/python,$(VENV_PY))
PY_SETUP = $(if $(filter $(abspath $(VENV_PY)),$(abspath $(PY))),install)
PYTHON ?= python3
SWEEP_ROOT ?= multirun
# Paper sweeps: override on the command line, e.g. `make table-ablation SEEDS=0,1,2 LAUNCHER=joblib`.
SEEDS ?= 0
EPOCHS ?= 200
MODEL ?= vit_paper
DATA ?= cifar100
DATASETS ?= cifar10,cifar100,tiny_imagenet
LAUNCHER ?= basic    # basic | joblib | submitit_local | slurm | slurm_node | packed | packed_slurm (hydra/launcher=...)
REPORTS ?= reports
TRAIN_ARGS ?=
SWEEP_ARGS = model=$(MODEL) seed=$(SEEDS) trainer.max_epochs=$(EPOCHS) hydra/launcher=$(LAUNCHER) $(TRAIN_ARGS)

.DEFAULT_GOAL := help
.PHONY: help install test test-fast demo bench bench-gpu gpu-check lint format clean clean-runs table-ablation table-protocols figures paper \
	sweep-ablation sweep-protocols slurm-local slurm-stop

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'
	@echo "variables: VENV=$(VENV) (made by make install); PY=$(PY) (the report targets' Python: PY=python or an active"
	@echo "  virtualenv renders there and installs nothing); the paper's: SEEDS EPOCHS MODEL DATA DATASETS LAUNCHER SWEEP"

# TORCH_INDEX: a package index for torch and torchvision, installed first (pip then keeps them), e.g. PyTorch's CPU-only
# wheels on a machine without a GPU: `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu` (PyPI's Linux
# torch brings the CUDA libraries). Empty (the default): pip's own index for everything.
TORCH_INDEX ?=
$(VENV)/.installed: pyproject.toml
	test -x $(VENV_PY) || $(PYTHON) -m venv $(VENV)
	$(VENV_PY) -m pip install --quiet --upgrade pip
	$(if $(strip $(TORCH_INDEX)),$(VENV_PY) -m pip install --quiet torch torchvision --index-url $(strip $(TORCH_INDEX)))
	$(VENV_PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed ## create .venv if missing and install the package with its dev extras

# Two pytest workers, one torch thread each, in the training subprocesses too (tests/helpers.py passes
# OMP_NUM_THREADS on): two threads each would put four on 2 cores (measured: the 8-cell multirun, 100 s of CPU against
# 37 s). loadfile: each test file on one worker, so a module's shared runs are trained once and the SLURM cluster
# tests run one after another; tests/conftest.py puts the long files first.
TEST_ARGS ?= -n 2 --dist loadfile --durations=15
test: install ## run the whole CPU test suite (pytest, two workers)
	OMP_NUM_THREADS=1 $(VENV_PY) -m pytest -q $(TEST_ARGS)

test-fast: install ## the fast tier: no training loop, no subprocess (the tests using neither `trains` nor `spawns`)
	OMP_NUM_THREADS=1 $(VENV_PY) -m pytest -q -m "not slow" $(TEST_ARGS)

# The demo's numbers repeat on one CPU when these are fixed (each can be overridden; another CPU: docs/demo.md):
# - the vector instructions of torch's kernels: an AVX-512 machine otherwise picks kernels that round differently,
#   and 10 epochs later prints another table (measured: Baseline 83.1% against the README's 81.2%); pinned to AVX2
#   it prints the README's on the machine that measured it. Recorded as `cpu_capability` in each results.json.
# - OMP_WAIT_POLICY=PASSIVE: torch's threads sleep instead of spinning while they wait for each other; the same
#   numbers, a step 1.2 to 1.7 times slower on an idle machine and 1.7 to 6 times faster on a busy one (measured
#   with the demo's model at 2 threads: 56-72 against 39-49 ms a step idle; 68 against 116 ms with one other busy
#   process on the 2 cores, 58 against 354 ms with two).
# The thread count is the third (threads=2 in experiment=demo).
DEMO_ENV ?= ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 OMP_WAIT_POLICY=PASSIVE
demo: install ## offline: the 8-cell ablation on generated glyphs with a tiny ViT on CPU, its tables, figures and HTML page
	env $(DEMO_ENV) $(VENV_PY) train.py -m experiment=demo
	@mkdir -p $(REPORTS)/demo
	@$(VENV_PY) -m vit_locality.report all $(SWEEP_ROOT)/demo --out $(REPORTS)/demo > $(REPORTS)/demo/report.txt
	@$(VENV_PY) -m vit_locality.report page $(SWEEP_ROOT)/demo --out $(REPORTS) >> $(REPORTS)/demo/report.txt
	@echo "reports: tables and figures in $(REPORTS)/demo/, the page $(REPORTS)/demo.html (what the report printed: $(REPORTS)/demo/report.txt)"
	@$(VENV_PY) -m vit_locality.report.summary $(SWEEP_ROOT)/demo

sweep-ablation: $(PY_SETUP)
	$(PY) train.py -m experiment=ablation data=$(DATA) $(SWEEP_ARGS) hydra.sweep.dir=$(SWEEP_ROOT)/ablation

sweep-protocols: $(PY_SETUP)
	$(PY) train.py -m experiment=protocols data=$(DATASETS) $(SWEEP_ARGS) hydra.sweep.dir=$(SWEEP_ROOT)/protocols

# SWEEP=multirun/<name> (one or more sweep directories): the report targets render that sweep as it is and train
# nothing; DATA and MODEL then narrow the report only where given on the command line (or in the environment). They
# run PY, installing into VENV first only where PY is VENV's.
SWEEP ?=
GIVEN = $(filter command line environment,$(origin $(1)))
SWEEP_FILTER = $(if $(call GIVEN,DATA),--data $(DATA)) $(if $(call GIVEN,MODEL),--model $(MODEL))
ABLATION_RUNS = $(or $(SWEEP),$(SWEEP_ROOT)/ablation)
PROTOCOLS_RUNS = $(or $(SWEEP),$(SWEEP_ROOT)/protocols)
FIGURE_RUNS = $(or $(SWEEP),$(SWEEP_ROOT)/ablation $(SWEEP_ROOT)/protocols)

table-ablation: $(if $(SWEEP),$(PY_SETUP),sweep-ablation) ## the 8-cell grid on DATA (cifar100): trains what is missing, then the table (SWEEP=dir: render only)
	$(PY) -m vit_locality.report ablation $(ABLATION_RUNS) $(if $(SWEEP),$(SWEEP_FILTER),--data $(DATA) --model $(MODEL)) --out $(REPORTS)

table-protocols: $(if $(SWEEP),$(PY_SETUP),sweep-protocols) ## Baseline vs Modern on DATASETS: trains what is missing, then the table (SWEEP=dir: render only)
	$(PY) -m vit_locality.report protocols $(PROTOCOLS_RUNS) $(if $(SWEEP),$(SWEEP_FILTER),--model $(MODEL)) --out $(REPORTS)

figures: $(if $(SWEEP),$(PY_SETUP),sweep-ablation sweep-protocols) ## planes, per-layer curves, emergence, instruments; one HTML page per sweep (SWEEP=dir: render only)
	$(PY) -m vit_locality.report figures $(FIGURE_RUNS) $(if $(SWEEP),$(SWEEP_FILTER),--model $(MODEL)) --out $(REPORTS)
	$(PY) -m vit_locality.report page $(FIGURE_RUNS) $(if $(SWEEP),$(SWEEP_FILTER),--model $(MODEL)) --out $(REPORTS)

paper: table-ablation table-protocols figures ## every paper table and figure (variables: SEEDS EPOCHS MODEL DATA DATASETS LAUNCHER; SWEEP=dir: render only)

BENCH_ARGS ?=   # e.g. --quick (every section in tiny settings) or --sections model,framework
bench: install ## the benchmark suite (benchmarks/): side-by-side ratios (ours vs timm, Trainer vs plain loop, data, statistics)
	$(VENV_PY) -m benchmarks --out bench_results.json --markdown bench_rows.md $(BENCH_ARGS)

# No `install` prerequisite: a GPU host may have no network, where a stale .installed stamp would start pip.
bench-gpu: ## the GPU bench (one call of at most 8 minutes on one GPU; run `make install` first): BENCHMARKS.md's GPU rows
	$(VENV_PY) -m benchmarks gpu --out $(REPORTS)/bench_gpu.json --markdown $(REPORTS)/bench_gpu_rows.md \
		--benchmarks BENCHMARKS.md

# No `install` prerequisite either. Each step runs under its own timeout; logs and summary.json in $(REPORTS)/gpu_check.
GPU_CHECK_ARGS ?=   # e.g. --dry-run (the same steps on a CPU, tiny sizes, about 2 to 3 minutes) or --budget-s 300
gpu-check: ## first thing on a new GPU machine (at most 10 minutes): install, CUDA, each CUDA path, host syncs, one epoch, bench
	$(VENV_PY) -m benchmarks.gpu_check --out $(REPORTS)/gpu_check $(GPU_CHECK_ARGS)

lint: install ## ruff check and format check
	$(VENV_PY) -m ruff check .
	$(VENV_PY) -m ruff format --check .

format: install ## apply ruff's fixes and formatting
	$(VENV_PY) -m ruff check --fix .
	$(VENV_PY) -m ruff format .

slurm-local: ## start a one-node SLURM cluster on this machine (root; installs slurm-wlm and munge when missing)
	tests/slurm/local_cluster.sh start

slurm-stop: ## stop the local SLURM cluster that `make slurm-local` started
	tests/slurm/local_cluster.sh stop

clean: ## remove caches and build files; results stay (multirun/, outputs/, reports/, data/ and .venv are kept)
	rm -rf .pytest_cache .ruff_cache build dist
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +

clean-runs: ## DELETE every sweep and run in multirun/ and outputs/ (finished results too; asks first)
	@printf 'Delete every run in $(SWEEP_ROOT)/ and outputs/, finished results included? [y/N] ' && read answer && [ "$$answer" = y ]
	find $(SWEEP_ROOT) -mindepth 1 -not -name .gitkeep -delete 2>/dev/null || true
	rm -rf outputs
