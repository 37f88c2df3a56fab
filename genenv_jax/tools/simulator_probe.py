"""What an untrained simulator writes: parse and accept rates, rejections by reason, and the levels
(categories) of what it wrote, for a run config's simulator and domain, before any training.

    python -m genenv_jax.tools.simulator_probe --config=configs/calc.py:real --generations=200 \\
        --out=runs/probe-calc

Draws `--generations` seeds uniformly from the run's training seeds (seeded by `--seed`), asks the
simulator for one variant of each exactly as the loop's first epoch does (`loop.tasks.TaskGenerator`:
the same prompts, sampling settings, parser and rejection reasons; no agent results yet), and
writes `generations.jsonl` (seed, direction, text, accepted or the rejection reason) and
`summary.json` under `--out`. A rejected generation is one the loop would not give the agent;
"accepted" counts the tasks the loop would roll out.
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path

from absl import flags

from genenv_jax import cli
from genenv_jax.core.errors import check_at_least, check_output_path

PROGRAM = "genenv_jax.tools.simulator_probe"
_CONFIG = cli.config_flag()
_GENERATIONS = flags.DEFINE_integer("generations", 200, "simulator generations (one per drawn seed)")
_SEED = flags.DEFINE_integer("seed", 0, "seed of the seed draw and of sampling", lower_bound=0)
_OUT = flags.DEFINE_string("out", None, "directory for generations.jsonl and summary.json (created; must be new "
                                        "or empty)")


def probe(config, count: int, seed: int) -> tuple[list[dict], dict]:
    """(one record per generation, the summary) for `count` generations of the config's simulator."""
    import jax
    import numpy as np

    from genenv_jax.domains import get_domain
    from genenv_jax.loop.context import LoopContext, training_seeds
    from genenv_jax.loop.policy import Placement, build_policy
    from genenv_jax.loop.tasks import TaskGenerator
    from genenv_jax.parallel import make_mesh
    from genenv_jax.sampling import PrefixCacheConfig, Sampler
    from genenv_jax.text.chat_text import ChatText

    text = ChatText.load(config.tokenizer_dir or config.agent.model_dir or None)
    domain = get_domain(config.domain.name, **config.domain.options)
    ctx = LoopContext(config, domain, text, training_seeds(config, domain, text))
    settings = config.simulator
    mesh = make_mesh(config.mesh)
    cfg = settings.model_config().replace(param_dtype=settings.param_dtype)
    sampler = Sampler(cfg, mesh, pad_id=text.pad_id,
                      prefix_cache=PrefixCacheConfig(tokens=settings.sampling.prefix_cache_tokens))
    sampler.timed = True  # the summary reports the sampler's program seconds
    simulator = build_policy(settings, mesh, sampler, warmstart_lr=None)
    weights = simulator.initial_params(config.init_seed)
    state = simulator.new_state(simulator.initial_trained(weights, config.init_seed), simulator.frozen_of(weights))
    rng = np.random.default_rng(seed)
    seeds = [ctx.train_seeds[i] for i in rng.choice(len(ctx.train_seeds), size=count, replace=True)]
    started = time.perf_counter()
    gens, counts = TaskGenerator(ctx, simulator).generate(seeds, Placement(simulator, state), {}, seed)
    seconds = time.perf_counter() - started
    records = [{"seed": g.seed.task_id, "seed_category": g.seed.category, "direction": g.difficulty, "text": g.text,
                "accepted": g.task is not None,
                "category": g.task.category if g.task is not None else None,
                "reason": None if g.task is not None else g.result.reason} for g in gens]
    accepted = [r for r in records if r["accepted"]]
    summary = {
        "generations": len(records), "accepted": len(accepted),
        "accept_rate": len(accepted) / max(len(records), 1),
        "prompts_too_long": counts.get("simulator_prompt_too_long", 0),
        "rejections": dict(collections.Counter(r["reason"] for r in records if not r["accepted"]).most_common()),
        "accepted_by_category": dict(sorted(collections.Counter(r["category"] for r in accepted).items())),
        "seed_category_of_accepted": dict(sorted(collections.Counter(r["seed_category"] for r in accepted).items())),
        "model": settings.model_dir or settings.preset, "domain": config.domain.name,
        "domain_options": dict(config.domain.options), "temperature": settings.sampling.temperature,
        "jax_devices": len(jax.devices()), "seconds": seconds,
        "sampler": {k: v for k, v in counts.items() if k.startswith(("simulator/", "time/"))},
    }
    return records, summary


@cli.command(PROGRAM)
def main(argv):
    if len(argv) > 1:
        cli.die(f"unexpected arguments: {argv[1:]}", PROGRAM)
    check_at_least(_GENERATIONS.value, "--generations", 1)
    if not _OUT.value:
        cli.die("--out is required: a new or empty directory for generations.jsonl and summary.json", PROGRAM)
    check_output_path(_OUT.value, "--out", directory=True)
    import jax

    from genenv_jax.configs.run_config import RunConfig

    config = RunConfig.from_config_dict(_CONFIG.value, num_devices=jax.device_count())
    config.check_domain_registered()
    check_output_path(_OUT.value, "--out", directory=True, inputs=config.input_paths())  # not into the model
    records, summary = probe(config, _GENERATIONS.value, _SEED.value)
    out = Path(_OUT.value)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "generations.jsonl", "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{summary['accepted']} of {summary['generations']} generations accepted ({summary['accept_rate']:.1%}); "
          f"rejections {summary['rejections']}; accepted by category {summary['accepted_by_category']}")


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    cli.run(main, PROGRAM)
