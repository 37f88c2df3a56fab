"""Commands above the loop: the TPU-slice memory planner (`python -m genenv_jax.tools.tpu_memory`,
its library `memory_plan`) and the DreamGym miniature comparison
(`python -m genenv_jax.tools.dreamgym_compare`)."""

# modules, each a command or its library
__all__ = ["api_docs", "dreamgym_compare", "memory_plan", "simulator_probe", "tpu_memory"]
