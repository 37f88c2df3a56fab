"""Test session setup: 8 virtual CPU devices (sharding tests), CPU platform, the test tiers as
markers, and the fixtures many files share.

Markers (pyproject.toml lists them); `make test` runs every test, the real-weight checks included:
- `slow`: over ~5 s on 2 CPU cores in a cold whole-suite run (`make test-fast`, the edit loop, leaves them out);
- `alfworld`: needs the optional ALFWorld engine (`make alfworld`); its files skip without it;
- `pretrained`: needs the downloaded real model (`python -m genenv_jax.data.download ...`, which
  `make test` runs first); they skip with the reason when it is absent;
- `shared_data(path)`: needs benchmark data under ../shared; skipped when `path` is absent.
"""

import os
from pathlib import Path

import pytest

from tests.support import DEVICE_COUNT_FLAG, TEST_XLA_FLAGS, compilation_cache_dir, prune_compilation_cache

# 8 virtual devices unless the command line chose a count, and the tests' codegen flags
# (tests/support/__init__.py) unless XLA_FLAGS already sets the optimisation level.
_flags = os.environ.get("XLA_FLAGS", "")
if DEVICE_COUNT_FLAG not in _flags:
    _flags += f" {DEVICE_COUNT_FLAG}=8"
if "xla_backend_optimization_level" not in _flags:
    _flags += f" {TEST_XLA_FLAGS}"
os.environ["XLA_FLAGS"] = _flags.strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# One persistent compilation cache for the session, the processes it starts (the loop tests' runs,
# the multi-process harness, the notebook kernel compile the same programs again and again: a fresh
# CoEvolution builds fresh jitted functions) and later sessions (`compilation_cache_dir`: a changed
# program gets a new key, so a test never meets a stale program). Every program is cached, however
# quick its compile (JAX's default keeps only those over 1 s; most of the suite's are shorter), also
# in a directory the caller chose, as for a cold run: JAX_COMPILATION_CACHE_DIR=$(mktemp -d) make
# test. Not bounded by JAX (its bound rescans the whole directory under a lock at every write): the
# suite's own directory is pruned once a session instead (`pytest_configure`).
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(compilation_cache_dir()))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


# The longest files first, as measured (docs/benchmarks.md, "Test suite"): `make test` runs two
# xdist workers, one file each at a time, in this order (`--no-loadscope-reorder`; xdist's default
# order, most tests first, left a long file for the end, where it ran alone for minutes).
FIRST_FILES = ("test_multiprocess.py", "test_benchmark_loops.py", "test_real_model.py", "test_alfworld.py",
               "test_dreamgym_loop.py", "test_attention.py", "test_prefix_reuse.py", "test_sampling.py",
               "test_rl_learning.py", "test_study.py", "test_lora_loop.py", "test_export.py",
               "test_reliability_storage.py", "test_loop.py", "test_simulator_objectives.py",
               "test_environment_limits.py", "test_notebook.py", "test_alfworld_loop.py")


def pytest_configure(config):
    """In the controller (not in an xdist worker), before any test runs: prune the suite's own
    compilation cache to its size (`tests.support.COMPILATION_CACHE_BYTES`)."""
    if not hasattr(config, "workerinput") and os.environ["JAX_COMPILATION_CACHE_DIR"] == str(compilation_cache_dir()):
        prune_compilation_cache(compilation_cache_dir())


def pytest_collection_modifyitems(config, items):
    for item in items:
        for data in item.iter_markers("shared_data"):
            if not Path(data.args[0]).exists():
                item.add_marker(pytest.mark.skip(reason=data.kwargs.get("reason", f"no shared data at {data.args[0]}")))
    rank = {name: i for i, name in enumerate(FIRST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST_FILES)))  # stable: order within a file kept


# ------------------------------------------------------------------ shared fixtures
@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The bundled Qwen2.5 tokenizer, loaded once per session."""
    from genenv_jax.text import tokenization

    return tokenization.load_tokenizer()


@pytest.fixture(scope="session")
def chat_text():
    """`ChatText` over the bundled Qwen2.5 tokenizer, built once per session."""
    from genenv_jax.text.chat_text import ChatText

    return ChatText.load(None)


@pytest.fixture
def toy_domain(monkeypatch):
    """The toy domain (tests/support/toy_domain.py) registered as "toy" for one test."""
    from genenv_jax import domains

    monkeypatch.setitem(domains.DOMAINS, "toy", "tests.support.toy_domain:ToyDomain")
