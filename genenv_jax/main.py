"""GenEnv co-evolution: `python -m genenv_jax.main --config=configs/bfcl.py[:preset] --workdir=DIR`.

`--config` takes a config file path (from any directory) or the name of a packaged config
(`--config=bfcl:tiny`). Overrides: `--config.epochs=3 --config.agent.model_dir=/ckpt/Qwen2.5-7B-Instruct`.
A run resumes from the latest checkpoint in its workdir. Every expected failure (a bad key or
value, a broken model dir, a locked workdir, an unreadable checkpoint) ends with one line naming
the cause and exit status 2.
"""

from __future__ import annotations

from absl import flags, logging

from genenv_jax import cli
from genenv_jax.cli import die, error_text, is_storage_error, one_line

_CONFIG = cli.config_flag()
_WORKDIR = cli.workdir_flag("Run directory (checkpoints, pools, metrics, plots): a local path or gs://BUCKET/PATH; "
                            "default runs/<domain>-<preset>.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "Multi-process runs where JAX cannot detect the cluster: process 0's host:port "
                                   "(with --num_processes and --process_id). TPU pods and SLURM need none of these.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "With --coordinator_address: how many processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "With --coordinator_address: this process's index.")
_COORDINATOR_TIMEOUT = flags.DEFINE_float("coordinator_timeout_s", 60.0,
                                          "With --coordinator_address: seconds to wait for the coordinator and every "
                                          "process to join before failing with one line naming the address.")


PROGRAM = "genenv_jax"


@cli.command(PROGRAM)
def main(argv):
    if len(argv) > 1:
        die(f"unexpected arguments: {argv[1:]} (flags are --name=value; see --help)", PROGRAM)
    if _WORKDIR.value is not None:  # before any work: an occupied or unwritable workdir
        cli.check_output_path(_WORKDIR.value, "--workdir", directory=True)
    from genenv_jax.parallel import check_distributed_flags

    check_distributed_flags(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value, _COORDINATOR_TIMEOUT.value)
    if not flags.FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # Orbax / JAX info logs drown the progress bars; -v 0 shows them
    import jax

    from genenv_jax.workdir.checkpoints import CheckpointError
    from genenv_jax.loop import CoEvolution, NonFiniteLossError
    from genenv_jax.workdir.metrics import summary_table
    from genenv_jax.parallel import initialize_distributed
    from genenv_jax.configs.run_config import ConfigError, RunConfig
    from genenv_jax.workdir.lock import WorkdirLockedError

    initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value, _COORDINATOR_TIMEOUT.value)
    try:
        config = RunConfig.from_config_dict(_CONFIG.value, num_devices=jax.device_count())
        config.check_domain_registered()
        workdir = _WORKDIR.value or config.default_workdir()
        cli.check_output_outside(workdir, "--workdir", config.input_paths())  # never into a model or data dir
        with cli.no_empty_directory_left(workdir):
            rows = CoEvolution(config, workdir).run()
    except NonFiniteLossError as e:
        die(f"{e}. The last checkpoint is intact; lower the learning rate and rerun the same command to resume.")
    except (ConfigError, CheckpointError, WorkdirLockedError, cli.CommandError) as e:
        die(one_line(e))
    except ImportError as e:  # a domain's optional extra is not installed (e.g. ALFWorld's engine)
        die(one_line(e))
    except (OSError, ValueError) as e:  # a path of the config or --workdir, a broken model dir, a full disk
        hint = ("the last checkpoint is intact; rerun the same command to resume" if is_storage_error(e)
                else "check --workdir and the config's paths")
        die(f"{error_text(e)} ({hint})")
    if jax.process_index() != 0:  # process 0 reports for the run
        return
    print(f"\nGenEnv ({config.mode}) on {config.domain.name}: {len(rows)} epochs in {workdir}\n")
    print(summary_table(rows))
    print(f"\ncurves: {workdir}/curves.png  metrics: {workdir}/metrics.jsonl  "
          f"samples: {workdir}/samples/  tensorboard: {workdir}/tensorboard")


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    cli.run(main, PROGRAM)
