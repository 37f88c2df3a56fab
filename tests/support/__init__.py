"""Helpers the test files share, imported as `tests.support.<module>` (pyproject.toml puts the
repository root on pytest's path), and the paths they build on: every test file finds the tests'
folders from here, not from its own place in tests/."""

import contextlib
import os
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
CONFIGS = TESTS / "support" / "configs"  # config files for `--config=...` (toy_run.py, study_smoke.py)

# XLA flags of every JAX process the suite runs, itself and the processes it starts. The tests'
# programs are tiny, so most of the suite is XLA:CPU compiling them, and LLVM's optimisation of the
# generated code is a third of that: level 0 skips it (HLO passes and library matmuls are
# unchanged). XLA:CPU's MLIR fusion emitters take about as long again to generate each fusion as
# its older IR emitter: off, test_attention + test_rl_losses compile and run in 75 s instead of
# 143 s, a cold toy run in 16 s instead of 26 s (measured in docs/benchmarks.md, "Test suite").
# `make demo`, benchmarks and real runs keep XLA's defaults.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def xla_flags(devices: int | None = None) -> str:
    """XLA_FLAGS for a JAX process the suite starts: the tests' flags, and `devices` virtual CPU
    devices (None: XLA's default of one)."""
    return TEST_XLA_FLAGS + ("" if devices is None else f" {DEVICE_COUNT_FLAG}={devices}")


def subprocess_env(devices: int | None = None, **extra: str) -> dict[str, str]:
    """This process's environment for a JAX subprocess on the CPU with `devices` virtual devices
    (None: one, which compiles fastest) and the tests' XLA flags, plus `extra`."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(devices), **extra}


def compilation_cache_dir() -> Path:
    """The suite's persistent XLA compilation cache, kept between runs: `test-compilation-cache`
    under genenv_jax's download cache (`genenv_jax.data.model_sources.cache_root`, whose rule this
    repeats so that conftest.py sets it before anything imports JAX; a test checks they agree).
    Entries are keyed by the compiled program, its compile options and flags and the jax/jaxlib
    version, so a changed program compiles afresh and never meets a stale entry."""
    if os.environ.get("GENENV_JAX_CACHE"):
        root = Path(os.environ["GENENV_JAX_CACHE"]).expanduser()
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "genenv_jax"
    return root / "test-compilation-cache"


# The suite's cache is pruned to this size at the start of a session: JAX's own bound
# (`jax_compilation_cache_max_size`) rescans every entry under a file lock on each write, which made a
# cold run's ~4,500 writes quadratic (docs/benchmarks.md, "Test suite"). One cold run writes ~85 MB.
COMPILATION_CACHE_BYTES = 2 << 30


def prune_compilation_cache(cache_dir: Path, max_bytes: int = COMPILATION_CACHE_BYTES) -> int:
    """Deletes the least recently written entries of `cache_dir` until it holds at most `max_bytes`
    (once, before any test process writes to it); returns the number of files deleted."""
    entries = []
    with os.scandir(cache_dir) if cache_dir.is_dir() else contextlib.nullcontext(()) as scan:
        for entry in scan:
            if entry.is_file():
                stat = entry.stat()
                entries.append((stat.st_mtime, stat.st_size, Path(entry.path)))
    total = sum(size for _, size, _ in entries)
    deleted = 0
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)
        total -= size
        deleted += 1
    return deleted
