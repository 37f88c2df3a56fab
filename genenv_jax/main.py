"""GenEnv co-evolution: `python -m genenv_jax.main --config=configs/bfcl.py[:preset] --workdir=DIR`.

Overrides: `--config.epochs=3 --config.agent.model_dir=/ckpt/Qwen2.5-7B-Instruct ...`. A run
resumes from the latest checkpoint in its workdir.
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from genenv_jax import sharding
from genenv_jax.coevolve import CoEvolution, NonFiniteLossError, validate_config
from genenv_jax.metrics import summary_table

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/bfcl.py:tiny.",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, pools, metrics, plots); "
                               "default runs/<domain>-<preset>.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax / JAX info logs drown the progress bars; -v 0 shows them
    sharding.initialize_distributed()
    config = _CONFIG.value
    validate_config(config)
    workdir = _WORKDIR.value or f"runs/{config.domain.name}-{config.get('preset_name', 'custom')}"
    logging.info("workdir %s", workdir)
    loop = CoEvolution(config, workdir)
    try:
        rows = loop.run()
    except NonFiniteLossError as e:
        logging.error("stopped: %s. The last checkpoint in %s is intact; lower the learning rate and "
                      "rerun the same command to resume.", e, workdir)
        sys.exit(2)
    print(f"\nGenEnv ({config.mode}) on {config.domain.name}: {len(rows)} epochs in {workdir}\n")
    print(summary_table(rows))
    print(f"\ncurves: {workdir}/curves.png  metrics: {workdir}/metrics.jsonl  "
          f"samples: {workdir}/samples/  tensorboard: {workdir}/tensorboard")


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    app.run(main)
