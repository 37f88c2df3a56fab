"""Leaves: small helpers with no genenv_jax imports. Every other package may use them.

- `bucketing`: length buckets (shape rounding); `json_text`: JSON read from model and file text;
  `bounded_text`: text cut to a stated length with a marker;
- `config_checks`: the `setting()` declarations and checks every config section uses;
- `errors` and `absl_flags`: how every command ends on an expected failure (one line, exit 2) and
  absl's flag parsing with that line (the commands' shared parts above them live in `cli`);
- `compilation_cache` (the persistent XLA cache) and `compile_clock` (compile seconds per phase).
"""

# modules, each a leaf
__all__ = ["absl_flags", "bounded_text", "bucketing", "compilation_cache", "compile_clock", "config_checks", "errors",
           "json_text"]
