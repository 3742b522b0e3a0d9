# The project's vocabulary: install, run, test, lint, format, docs, bench.
# Every target builds what it needs from scratch, so a fresh clone works.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install run test coverage coverage-report lint format dist docs docs-serve bench redis-server chromium sidekiq postgres clean

install: $(STAMP) redis-server

# The project editable with every extra, and the development and docs tools (pyproject.toml's
# [dependency-groups]; pip reads them since 25.1, hence pip first).
EXTRAS := web,django,fastapi,otel,sentry,flask

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[$(EXTRAS)]' --group dev --group docs
	touch $(STAMP)

# Tests and `make run` start private redis-server processes, so the binary must exist.
redis-server:
	@deploy/ensure-redis-server.sh

# The Web UI's browser tests (tests/e2e/web/) drive Debian's chromium; Playwright downloads none.
chromium:
	@deploy/ensure-chromium.sh

# The Sidekiq compatibility tests run Debian's Sidekiq 6 (and redis-namespace) against cogworker's keys.
sidekiq:
	@deploy/ensure-sidekiq.sh

# The Django tests make their databases on a PostgreSQL server on 127.0.0.1:5432 (user postgres).
postgres:
	@deploy/ensure-postgres.sh

run: install
	deploy/run-local.sh

# The suite runs once, under coverage: the pytest processes and every Python process they start
# (workers, swarms, fork servers and the workers they fork; see [tool.coverage.run] in pyproject.toml)
# write their data under .coverage-data/, which is combined into the one-line-per-module summary
# printed at the end. With no PYTEST_ARGS the suite runs as a few pytest streams side by side
# (tests/run_streams.py says which folders and why); with PYTEST_ARGS, as one pytest over them. The
# exit status is pytest's when it fails, else the report's.
COVERAGE_DIR := $(CURDIR)/.coverage-data
COVERAGE     := COVERAGE_FILE=$(COVERAGE_DIR)/coverage $(BIN)/coverage

ifeq ($(strip $(PYTEST_ARGS)),)
RUN_TESTS := COVERAGE_FILE=$(COVERAGE_DIR)/coverage COVERAGE_RUN="$(BIN)/coverage run" $(BIN)/python tests/run_streams.py
else
RUN_TESTS := $(COVERAGE) run -m pytest -q $(PYTEST_ARGS)
endif

test: install chromium sidekiq postgres
	rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR)
	$(RUN_TESTS); tests=$$?; \
	$(COVERAGE) combine -q && $(COVERAGE) report; report=$$?; \
	if [ $$tests -ne 0 ]; then exit $$tests; fi; exit $$report

# `make test` plus the HTML report (.coverage-data/html/index.html) and the per-module floor: every
# module at 85 % or more, or listed with its reason under [tool.cogworker.coverage] in pyproject.toml.
coverage: test coverage-report

# The report and the floor for the data the last `make test` left (CI runs it right after `make test`).
coverage-report: install
	$(COVERAGE) html -q
	$(COVERAGE) json -q -o $(COVERAGE_DIR)/coverage.json
	$(BIN)/python tests/check_coverage.py $(COVERAGE_DIR)/coverage.json

# tests/type_checks holds what the job API's types must accept and refuse, checked by mypy and pyright.
lint: install
	$(BIN)/ruff check cogworker supervisor tests
	$(BIN)/ruff format --check cogworker supervisor tests
	$(BIN)/mypy cogworker supervisor
	$(BIN)/mypy --strict --warn-unused-ignores tests/type_checks
	$(BIN)/pyright

format: install
	$(BIN)/ruff format cogworker supervisor tests
	$(BIN)/ruff check --fix cogworker supervisor tests

# The sdist and the wheel, as they would be published, then their metadata as PyPI would check it.
dist: install
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

# The documentation site (mkdocs.yml) into site/. --strict: a broken link, a page left out of the nav
# or a reference mkdocstrings can't resolve fails the build. The reference pages are generated from
# the code as it builds (docs/hooks/reference.py).
docs: install
	$(BIN)/mkdocs build --strict

# The site on http://127.0.0.1:8000/, rebuilt as pages change.
docs-serve: install
	$(BIN)/mkdocs serve

bench: install
	tests/bench/run.sh

clean:
	rm -rf $(VENV) .bench-venv .run build dist *.egg-info .coverage-data site
