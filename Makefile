# vit-locality: `make help` lists the targets. The venv is created on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
SWEEP_ROOT ?= multirun

.DEFAULT_GOAL := help
.PHONY: help install test test-fast demo lint format clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed ## create .venv if missing and install the package with its dev extras

test: install ## run the whole CPU test suite (pytest)
	$(PY) -m pytest -q

test-fast: install ## run the tests not marked slow
	$(PY) -m pytest -q -m "not slow"

demo: install ## offline: the 8-cell ablation on synthetic data with a tiny ViT on CPU, then its table
	$(PY) train.py -m experiment=demo
	$(PY) -m vit_locality.report.summary $(SWEEP_ROOT)/demo

lint: install ## ruff check and format check
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: install ## apply ruff's fixes and formatting
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean: ## remove caches and local run outputs (multirun/ and outputs/); data/ and .venv stay
	rm -rf .pytest_cache .ruff_cache build *.egg-info outputs
	find $(SWEEP_ROOT) -mindepth 1 -not -name .gitkeep -delete 2>/dev/null || true
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +
