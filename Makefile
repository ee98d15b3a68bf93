# Two commands from a fresh machine: `make run` and `make test`.
# Both create .venv and install the project when it is missing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast test-chaos bench lint venv clean report-check

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/python -m mecharm_tools.demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not slow and not chaos"

test-chaos: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile -m chaos -rs

bench: $(STAMP)
	$(BIN)/python -m bench

# Not part of `make test`: renders the run report in headless Chromium (Debian's package,
# installed when missing and run as root) and checks the DOM and the page's loads;
# docs/report.md. ROOT=path reports on an existing data root instead of a fresh demo.
report-check: $(STAMP)
	$(BIN)/python -m mecharm_tools.report.browser_check $(if $(ROOT),--root $(ROOT))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache bench/results
