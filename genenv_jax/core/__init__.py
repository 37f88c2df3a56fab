"""Leaves: small helpers with no genenv_jax imports (shape rounding, JSON text reading, config-section
checks, the persistent compilation cache). Every other package may use them."""
