"""Commands above the loop: the TPU-slice memory planner (`python -m genenv_jax.tools.tpu_memory`,
its library `memory_plan`), the DreamGym miniature comparison
(`python -m genenv_jax.tools.dreamgym_compare`), and the generators of docs/api.md and docs/config.md."""

# modules, each a command or its library
__all__ = ["api_docs", "config_docs", "dreamgym_compare", "memory_plan", "simulator_probe", "tpu_memory"]
