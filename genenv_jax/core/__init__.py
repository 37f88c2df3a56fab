"""Leaves: small helpers with no genenv_jax imports (shape rounding, JSON text reading, config-section
checks, the persistent compilation cache). Every other package may use them."""

# modules, each a leaf
__all__ = ["absl_flags", "bounded_text", "bucketing", "compilation_cache", "compile_clock", "config_checks", "errors",
           "json_text"]
