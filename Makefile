# DeepSummit: `make train` runs the main job on the bundled data, `make test` runs the tests.
# Both install what they need first (a venv in .venv, torch==2.13.0 CPU before the package).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian's Chromium and its driver, for the browser checks of the end-to-end tests.
CHROMEDRIVER := /usr/bin/chromedriver
# Debian's PostgreSQL server, for the end-to-end test on the production backends
# (deepsummit/services/postgres.py finds the newest under /usr/lib/postgresql).
POSTGRES := /usr/bin/pg_ctlcluster
# mount, for the disk-full tests' tmpfs: Debian's `mount` is of required priority but not
# essential, so a slim image may lack it. The remote-worker tests' `unshare` comes with
# util-linux, which is essential: every Debian has it. (These tests also need root: where CI is
# set, they fail without it rather than skip, tests/machine.py.)
MOUNT := /usr/bin/mount
NPM := /usr/bin/npm
DOCS_ASSETS := deployments/data-docs-assets
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

.PHONY: setup test lint train up down status bench soak screenshots cli-docs clean

setup: $(STAMP)

# torch first, pinned: a plain "torch" requirement would pull several GB of CUDA wheels.
# Then the files the Data Docs pages load from CDNs, from npm (deepsummit/records/data_docs.py).
$(STAMP): pyproject.toml $(DOCS_ASSETS)/package.json $(DOCS_ASSETS)/package-lock.json | $(NPM)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	mkdir -p $(VENV)/data-docs
	cp $(DOCS_ASSETS)/package.json $(DOCS_ASSETS)/package-lock.json $(VENV)/data-docs/
	npm ci --prefix $(VENV)/data-docs --legacy-peer-deps --no-audit --no-fund --silent
	touch $(STAMP)

$(NPM):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq npm

$(POSTGRES):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq postgresql

$(MOUNT):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq mount

$(CHROMEDRIVER):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq chromium chromium-driver

# The test files in parallel (pytest-xdist), each file on one worker so that its module fixtures
# (servers, a harness, a training) are made once, the long ones first (tests/conftest.py); the
# 25 slowest steps are printed.
# The project's own modules are compiled first (0.3 s): where PYTHONDONTWRITEBYTECODE is set, as
# on this machine, nothing else caches them, and each of the suite's Python processes (over a
# hundred: flow runs, commands, workers) would compile what it imports again (0.14 s for a stage).
# Three workers on two cores: a fault test spends much of its time waiting (a lease running out,
# heartbeats missed, a slow sender, a server coming back), and a third worker's tests run
# meanwhile: 3% and 14% less time than two in two pairs of runs (docs/benchmarks.md#costs).
TEST_WORKERS ?= 3

test: $(STAMP) $(CHROMEDRIVER) $(POSTGRES) $(MOUNT)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m compileall -q src tests
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The main job: local Prefect + MLflow servers and a worker, then `prefect deployment run summit/train`.
train: $(STAMP)
	$(BIN)/deepsummit main-job

up: $(STAMP)
	$(BIN)/deepsummit up

down: $(STAMP)
	$(BIN)/deepsummit down

status: $(STAMP)
	$(BIN)/deepsummit status

# After `make train`: refresh the README's screenshots from the running services.
screenshots: $(STAMP) $(CHROMEDRIVER)
	$(BIN)/python tests/e2e/refresh_screenshots.py --out docs/screenshots

# docs/cli.md from the commands' --help (tests/cli/test_reference.py checks it is current).
cli-docs: $(STAMP)
	$(BIN)/python -m deepsummit.cli.reference

# The product benchmarks: what the pipeline costs and how fast it answers (docs/benchmarks.md).
# Not here: the studies in bench/studies/ (each chose a setting, docs/evaluation.md), the soak
# (10 nightly runs with a kill in each, about half an hour: a target of its own; `make test` runs
# a short one, tests/e2e/test_soak.py), suite_cpu.py and half_speed.py (they run a whole
# `make test` or another command, by hand).
BENCHES := features_build predict_latency model_throughput checkpoint_upload weather_requests \
	windows outlook gpu backtest train_stage_cost two_workers scorer_load

bench: $(STAMP)
	for script in $(BENCHES); do $(BIN)/python bench/$$script.py || exit 1; done

soak: $(STAMP)
	$(BIN)/python bench/soak.py

clean:
	rm -rf var
