# The project's vocabulary: install, run, test, lint, format, bench.
# Every target builds what it needs from scratch, so a fresh clone works.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test lint format bench redis-server clean

install: $(STAMP) redis-server

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# Tests and `make run` start private redis-server processes, so the binary must exist.
redis-server:
	@deploy/ensure-redis-server.sh

run: install
	deploy/run-local.sh

test: install
	$(BIN)/pytest -q $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check cogworker supervisor tests
	$(BIN)/ruff format --check cogworker supervisor tests
	$(BIN)/mypy cogworker supervisor

format: install
	$(BIN)/ruff format cogworker supervisor tests
	$(BIN)/ruff check --fix cogworker supervisor tests

bench: install
	tests/bench/run.sh

clean:
	rm -rf $(VENV) .bench-venv .run build *.egg-info
