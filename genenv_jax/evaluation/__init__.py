"""Benchmark evaluation of a model: the library (`evaluate.py`: greedy episodes scored by the
domain's verifier, per-category accuracy, the domain's summary, JSON and Markdown reports) and the
command (`cli.py`, `python -m genenv_jax.evaluation`)."""

from genenv_jax.evaluation.cli import domain_options, main
from genenv_jax.evaluation.evaluate import (REPORT_VERSION, EvalItem, EvalReport, GenerateFn, evaluate, evaluate_params,
                                            format_markdown, load_run_agent, make_generate_fn, metric_details,
                                            per_category_accuracy, select_tasks, truncate_at_stop, write_report)

__all__ = ["EvalItem", "EvalReport", "GenerateFn", "REPORT_VERSION", "domain_options", "evaluate", "evaluate_params",
           "format_markdown", "load_run_agent", "main", "make_generate_fn", "metric_details", "per_category_accuracy",
           "select_tasks", "truncate_at_stop", "write_report"]
