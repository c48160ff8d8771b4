# The two commands that matter on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Where torch comes from. The API and the accounting worker need no GPU: on a host
# without an NVIDIA driver the CPU build is taken from PyTorch's CPU index when that
# index answers (the plain registry would bring the CUDA build, gigabytes). Set
# TORCH_INDEX= (empty) to take torch from the configured registry, or a CUDA index
# on a GPU merge host.
TORCH_INDEX ?= $(shell command -v nvidia-smi >/dev/null 2>&1 || ! curl -fsS --max-time 3 -o /dev/null https://download.pytorch.org/whl/cpu/ 2>/dev/null || echo https://download.pytorch.org/whl/cpu)
# The exact torch the tests and CI run on (a local CPU wheel on the CI machine). The server
# extra in pyproject.toml takes a compatible range; this pin is installed first, so the
# range is already satisfied.
TORCH_PIN ?= torch==2.13.0

.PHONY: install install-runtime serve smoke test lint openapi clean

# runtime only: what `retarget serve`, `worker` and `migrate` need (the SDK and the server extra)
$(BIN)/.runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) '$(TORCH_PIN)'
	$(BIN)/pip install --quiet -e '.[server]'
	touch $@

# everything the tests, lint and the demo need
$(BIN)/.installed: $(BIN)/.runtime
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install-runtime: $(BIN)/.runtime

install: $(BIN)/.installed

serve: install-runtime
	$(BIN)/retarget serve

# after an install: a throwaway service, two generated models, plan, release, download,
# verify, deploy, pull, clean up (`retarget selftest`)
smoke: install-runtime
	$(BIN)/retarget selftest

test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint: install
	$(BIN)/ruff format --check retarget service tests benchmarks
	$(BIN)/ruff check retarget service tests benchmarks
	$(BIN)/mypy retarget service
	$(BIN)/lint-imports

openapi: install
	$(BIN)/retarget openapi

clean:
	rm -rf $(VENV) retarget-data
