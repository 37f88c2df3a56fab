"""Test session setup: 8 virtual CPU devices (sharding tests), CPU platform, the test tiers as
markers, and the fixtures many files share.

Tiers (pyproject.toml lists the markers):
- `slow`: over ~20 s on 2 CPU cores (`make test-fast` leaves them out);
- `full`: too slow for `make test`'s 20-minute budget; skipped unless `pytest --full` (`make
  test-full`; GENENV_FULL_TESTS=1 is an alias). A `full` test is `slow` too;
- `alfworld`: needs the optional ALFWorld engine (`make alfworld`); its files skip without it;
- `pretrained`: needs the downloaded real model (`python -m genenv_jax.data.download ...`);
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


# The longest files first: `make test` runs two xdist workers, one file each at a time, in this
# order (`--no-loadscope-reorder`; xdist's default order, most tests first, put the 4-test
# multi-process file last, where it ran alone for the suite's last ~5 minutes).
FIRST_FILES = ("test_multiprocess.py", "test_study.py", "test_benchmark_loops.py", "test_notebook.py", "test_loop.py",
               "test_alfworld.py", "test_alfworld_loop.py", "test_dreamgym_loop.py", "test_prefix_reuse.py")


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="also run the `full` tier (what `make test-full` runs; GENENV_FULL_TESTS=1 is an alias)")


def full_tier(config) -> bool:
    return bool(config.getoption("--full") or os.environ.get("GENENV_FULL_TESTS"))


def pytest_configure(config):
    """In the controller (not in an xdist worker), before any test runs: prune the suite's own
    compilation cache to its size (`tests.support.COMPILATION_CACHE_BYTES`)."""
    if not hasattr(config, "workerinput") and os.environ["JAX_COMPILATION_CACHE_DIR"] == str(compilation_cache_dir()):
        prune_compilation_cache(compilation_cache_dir())


def pytest_collection_modifyitems(config, items):
    full = full_tier(config)
    for item in items:
        marker = item.get_closest_marker("full")
        if marker is not None:
            item.add_marker(pytest.mark.slow)
            if not full:
                item.add_marker(pytest.mark.skip(reason=marker.kwargs.get("reason", "a `full` test: make test-full")))
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
