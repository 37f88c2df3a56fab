"""Taking a run's results elsewhere: its trained policies as HF, PEFT or GGUF models, and the
simulator's generated tasks as a dataset (Parquet; BFCL's own files for BFCL runs).

The command is `python -m genenv_jax.export` (`cli.py`); docs/export.md describes the formats and
what the tests check of each. A policy is read from the run's checkpoint by
`evaluation.run_policy.load_run_policy` (the evaluator's reader too) and written by
`policy_formats.export_policy`; `gguf_writer.write_gguf` writes any Qwen2 params as GGUF and
`tasks.export_tasks` the task pool.
"""

# modules (the command is `python -m genenv_jax.export`)
__all__ = ["cli", "gguf_writer", "policy_formats", "tasks"]
