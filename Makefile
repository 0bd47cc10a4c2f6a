# Two commands do everything: `make demo` and `make test`. Both build .venv first if needed.
# CI (.ci/run) also runs `make lint` first and `make test-slow` (the slow tests and the fault
# suite) after.
#
# PYTHON may be overridden (make test PYTHON=/path/to/python3.12). Otherwise the first of
# python3.12 on PATH, or a pyenv-managed 3.12, that actually runs is used.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
DEMO_DIR ?= runs/demo

PYTHON ?= $(shell for p in python3.12 "$$(PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null \
	| grep -m1 '^3\.12') pyenv which python3.12 2>/dev/null)"; do [ -n "$$p" ] \
	&& "$$p" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null \
	&& { echo "$$p"; break; }; done)

.PHONY: venv demo test test-slow test-all layers lint faults clean-demo accelerator-check

venv: $(VENV)/.installed

# Rebuilt only when pyproject.toml changes, so a second `make` does nothing. --no-compile:
# Python compiles a module when it is first imported, so pip need not compile the ~21,000
# modules of the extras, most never imported (about 2.5 minutes of one core here).
$(VENV)/.installed: pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: Python >= 3.12 not found; run with PYTHON=/path/to/python3.12" >&2; exit 1; fi
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[test]'
	@touch $@

demo: venv
	$(PY) -m transformer_jax.main --config=configs/demo.py --workdir=$(DEMO_DIR)

# The developers' loop: every test not marked slow, after the import layers. Within 8 minutes
# on a 2-core CPU (docs/testing.md has the times).
test: venv layers
	$(PY) -m pytest -q -m "not slow" -n auto --maxprocesses=4 --durations=15

# The slow tests (each over ~8 s on 2 cores): the 2-process runs, SLURM's requeue and srun,
# PostgreSQL studies and two controllers, whole sweeps, the runs in a bucket, training on
# text and mocked WMT14, the base rehearsal, the programs compiled for H100s and TPUs
# (docs/testing.md lists them), and the fault-injection suite among them (alone it leaves a
# core idle for minutes). CI runs it after `make test`.
test-slow: venv
	$(PY) -m pytest -q -m "slow or faults" -n auto --maxprocesses=4 --dist worksteal --durations=40

# Both: every test but the fault suite.
test-all: venv layers
	$(PY) -m pytest -q -n auto --maxprocesses=4

# The fault-injection suite alone (kill -9 at random moments, then resume); `make test-slow`
# runs it too.
faults: venv
	$(PY) -m pytest -q -m faults

# The first command on a new machine (README, "First run on a new accelerator"): devices,
# train and decode speed, the attention kernels agreeing, the demo trained; ends with one JSON
# line. Within 8 minutes on one GPU; install JAX's GPU or TPU build first (pip install -e '.[cuda]').
accelerator-check: venv
	$(PY) -m experiments.benchmarks.accelerator_check

# The layers of docs/architecture.md (import-linter's contract in pyproject.toml): no module
# imports from a layer above its own.
layers: venv
	$(VENV)/bin/lint-imports --no-cache

lint: venv
	$(VENV)/bin/ruff check transformer_jax configs experiments tests launch

clean-demo:
	rm -rf $(DEMO_DIR)
