"""A persistent XLA compilation cache for programs that run many loops in one process (the study,
the DreamGym comparison): later runs reload the programs the first one compiled."""

from __future__ import annotations

import os


def persistent_compilation_cache(directory: str | os.PathLike) -> None:
    """Caches every compiled program under `directory`, unless JAX_COMPILATION_CACHE_DIR already
    names a cache (the test session's, or the user's)."""
    import jax

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", str(directory))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
