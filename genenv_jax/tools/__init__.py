"""Commands above the loop: the TPU-slice memory planner (`python -m genenv_jax.tools.tpu_memory`,
its library `memory_plan`) and the DreamGym miniature comparison
(`python -m genenv_jax.tools.dreamgym_compare`)."""
