"""The miniature reproduction study (docs/reproduction.md): GenEnv vs Random vs Static at equal agent data,
several seeds and an alpha sweep on the calc domain, with a report built from the runs' metrics.

`python -m genenv_jax.study --config=configs/study.py --workdir=runs/study`; see docs/reproduction.md.
"""
