# The two commands that matter on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install serve test lint openapi clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

serve: install
	$(BIN)/retarget serve

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff format --check service tests migrations benchmarks
	$(BIN)/ruff check service tests migrations benchmarks
	$(BIN)/mypy service

openapi: install
	$(BIN)/retarget openapi

clean:
	rm -rf $(VENV) retarget-data
