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

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# One persistent compilation cache for the session and the processes it starts (the loop tests'
# runs, the multi-process harness, the notebook kernel compile the same programs again and again:
# a fresh CoEvolution builds fresh jitted functions). A fresh directory per session: nothing is
# reused across sessions, so a test never depends on an earlier run.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="genenv-jax-cache-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


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
