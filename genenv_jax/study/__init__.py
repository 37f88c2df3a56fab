"""The miniature reproduction study (docs/reproduction.md): GenEnv vs Random vs Static at equal agent data,
several seeds and an alpha sweep on the calc domain, with a report built from the runs' metrics.

`python -m genenv_jax.study --config=configs/study.py --workdir=runs/study`; see docs/reproduction.md.
"""

# modules (the command is `python -m genenv_jax.study`)
__all__ = ["aim_claims", "aim_plots", "arm_epochs", "bootstrap", "calc_report", "details", "plots", "report",
           "results", "runner"]
