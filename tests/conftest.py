"""Test session setup: 8 virtual CPU devices (sharding tests), CPU platform, shared fixtures."""

import os

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
               "test_alfworld.py", "test_alfworld_loop.py", "test_dreamgym_loop.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST_FILES)))  # stable: order within a file kept
