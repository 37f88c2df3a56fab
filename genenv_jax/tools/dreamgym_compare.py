"""DreamGym's miniature comparison on ALFWorld at equal agent updates: real-only GRPO, DreamGym (no
real rollouts while the agent trains), DreamGym-S2R (synthetic epochs, then real ones) and the
ablations without replay retrieval, without reasoning and without task generation. Success is
measured on the real engine (held-out games, greedy) after the warm-start and after every epoch,
and on the train games themselves for the warm-started and the final agent.

    python -m genenv_jax.tools.dreamgym_compare --workdir=runs/dreamgym-compare      # ~40 min on 2 CPU cores

Every arm is one `mode=dreamgym` run of the same config (`comparison_config`) with a few dreamgym
keys changed (`ARMS`); they share the generated games, a small SentencePiece tokenizer trained on
the train games' texts, the agent's warm-started weights and, where their SFT data agree, the
experience model's weights. Resumable: a finished arm is skipped, a killed one resumes. Writes
`report.md` and `summary.json` in the workdir.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from absl import flags
from ml_collections import ConfigDict

from genenv_jax import cli
from genenv_jax.core.errors import CommandError, check_at_least, check_output_path

FLAGS = flags.FLAGS
PROGRAM = "genenv_jax.tools.dreamgym_compare"
TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light")
REAL_EPOCHS = 2  # DreamGym-S2R's real epochs, at the end


def arms(epochs: int) -> dict[str, dict[str, Any]]:
    """Each arm's dreamgym keys (the rest as in `comparison_config`)."""
    return {
        "real_grpo": {"synthetic_epochs": 0, "task_generation": False},
        "dreamgym": {},
        "dreamgym_s2r": {"synthetic_epochs": max(epochs - REAL_EPOCHS, 1)},
        "no_replay": {"top_k": 0},
        "no_reasoning": {"reasoning": False},
        "no_taskgen": {"task_generation": False},
    }


def define_flags() -> None:
    """Defined only when run as a program (importing the module never touches absl's flags)."""
    flags.DEFINE_string("workdir", None, "Output directory (games, tokenizer, weights, runs, report).",
                        required=True)
    flags.DEFINE_list("arms", list(arms(1)), "Arms to run, in this order.")
    flags.DEFINE_integer("epochs", 5, "Epochs per arm (equal agent updates in every arm).")
    flags.DEFINE_integer("seed", 0, "The runs' seed (initial weights, sampling, data).", lower_bound=0)
    flags.DEFINE_bool("report_only", False, "Only rebuild the report from the arms' metrics.")


def comparison_config(workdir: Path, epochs: int, seed: int, arm: dict[str, Any]) -> ConfigDict:
    """The shared CPU-scale config: study-1m models over a 512-piece tokenizer, 8 train games of 2
    task types, 4 seeds x 4 rollouts per epoch, 6 held-out games, the experience model SFT'd 100 steps."""
    from genenv_jax.configs import alfworld

    c = alfworld.get_config("dreamgym")
    c.seed = seed
    c.epochs = epochs
    c.domain.options.update(games={"train": 8, "validation": 0, "test": 6}, task_types=TASK_TYPES, max_steps=8,
                            cache_dir=str(workdir / "games"), build_workers=1)
    c.tokenizer_dir = str(workdir / "tokenizer")
    for model in (c.agent, c.simulator):
        model.preset = "study-1m"
    c.seeds_per_epoch = 4
    c.rollouts_per_task = 4
    c.agent.train.tasks_per_step = 2          # 2 GRPO steps per epoch
    c.agent.sampling.update(max_new_tokens=24, max_prompt_len=2048, temperature=1.0)
    c.simulator.sampling.update(max_new_tokens=384, max_prompt_len=2048)
    c.episodes.update(max_turns=8, max_total_tokens=4096, env_workers=0)
    c.warmstart.update(agent_steps=80, simulator_steps=20, batch_size=4, cache_dir=str(workdir / "weights"))
    c.evaluation.update(split="test", max_per_category=3)
    c.experience.sampling.update(max_new_tokens=160, max_prompt_len=768, temperature=0.3)
    c.experience.optimizer.learning_rate = 1e-3
    c.dreamgym.update(synthetic_epochs=-1, task_generation=True, top_k=3, reasoning=True, max_history=2,
                      offline_random_per_task=2, offline_random_steps=8, sft_steps=100, sft_batch_size=8)
    c.dreamgym.update(arm)
    c.log.update(progress_bars=False, samples_per_epoch=4)
    return c


def prepare_tokenizer(workdir: Path, config: ConfigDict) -> Path:
    """A 512-piece tokenizer on the train games' agent / simulator texts and the experience model's
    prompts and replies for their offline transitions (trained once; atomic)."""
    from genenv_jax.domains import get_domain
    from genenv_jax.dreamgym.domains import OfflineSettings, domain_support, run_rng_key
    from genenv_jax.dreamgym.experience_text import PromptSettings
    from genenv_jax.dreamgym.fit_experience import tokenizer_texts
    from genenv_jax.text.small_tokenizer import domain_training_texts, small_tokenizer_once

    def texts():
        domain = get_domain("alfworld", **config.domain.options)
        d = config.dreamgym
        offline = domain_support(domain).offline(domain, domain.seeds("train"), OfflineSettings(
            d.offline_random_per_task, d.offline_random_steps, d.offline_invalid_prob, run_rng_key(config.seed)))
        return domain_training_texts(domain) + tokenizer_texts(offline, PromptSettings(max_history=d.max_history))

    return small_tokenizer_once(texts, workdir / "tokenizer", vocab_size=512)


def run_arm(workdir: Path, name: str, config: ConfigDict) -> None:
    import jax

    from genenv_jax.loop import CoEvolution
    from genenv_jax.configs.run_config import RunConfig

    run_dir = workdir / "runs" / name
    if (run_dir / "done.json").is_file():
        print(f"{name}: done before, skipped")
        return
    t0 = time.time()
    CoEvolution(RunConfig.from_config_dict(config, num_devices=jax.device_count()), run_dir).run()
    (run_dir / "done.json").write_text(json.dumps({"seconds": time.time() - t0}) + "\n")
    print(f"{name}: {time.time() - t0:.0f} s")


def evaluate_on_train_games(workdir: Path, name: str, config: ConfigDict) -> dict[str, Any]:
    """Greedy success on the real engine on the train games themselves, of the warm-started agent
    and of the arm's final one: whether what an arm learned (on synthetic or real episodes)
    transfers to the real engine; the held-out games ask for generalisation on top of that.
    Kept in the run's `train_games.json`."""
    import jax

    from genenv_jax.loop import CoEvolution
    from genenv_jax.loop.heldout import HeldOut
    from genenv_jax.loop.policy import Placement
    from genenv_jax.configs.run_config import RunConfig

    run_dir = workdir / "runs" / name
    path = run_dir / "train_games.json"
    if path.is_file():
        return json.loads(path.read_text())
    loop = CoEvolution(RunConfig.from_config_dict(config, num_devices=jax.device_count()), run_dir)
    loop.world = None  # evaluation only: the experience model is not needed
    try:
        final = loop.load_or_init()
        scorer = HeldOut(loop.ctx, loop.agent, loop.environments)
        scorer.tasks = list(loop.ctx.train_seeds)
        start = loop.fresh_state().agent  # the warm-started weights (from the cache)
        result = {"epoch": final.epoch, "start": scorer.metrics(Placement(loop.agent, start))["heldout/accuracy"],
                  "final": scorer.metrics(Placement(loop.agent, final.agent))["heldout/accuracy"],
                  "games": len(scorer.tasks)}
    finally:
        loop.checkpointer.close()
        loop.environments.close()
    path.write_text(json.dumps(result) + "\n")
    print(f"{name}: train games on the real engine {result['start']:.3f} -> {result['final']:.3f}")
    return result


def summarise(workdir: Path, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per arm: held-out success after the warm-start, per epoch and at the end; train-time success;
    the experience model's failures; generated tasks; replay size; wall time."""
    from genenv_jax.workdir.metrics import read_metrics

    out = {}
    for name in names:
        path = workdir / "runs" / name / "metrics.jsonl"
        if not path.is_file():
            continue
        rows = read_metrics(path)
        start = next((r for r in rows if r["epoch"] == -1), {})
        epochs = [r for r in rows if r["epoch"] >= 0]
        if not epochs:
            continue
        done = workdir / "runs" / name / "done.json"
        out[name] = {
            "heldout_start": start.get("heldout/accuracy"),
            "heldout_by_epoch": [r.get("heldout/accuracy") for r in epochs],
            "heldout_final": epochs[-1].get("heldout/accuracy"),
            "train_success_by_epoch": [r.get("success_rate") for r in epochs],
            "synthetic_epochs": sum(int(r.get("dreamgym/synthetic_epoch", 0)) for r in epochs),
            "agent_updates": len(epochs),
            "generated_tasks": sum(int(r.get("dreamgym/generated_tasks", 0)) for r in epochs),
            "generation_requests": sum(int(r.get("dreamgym/generation_requests", 0)) for r in epochs),
            "experience_failures": sum(int(v) for r in epochs for k, v in r.items()
                                       if k.startswith("env_errors/experience_")),
            "invalid_actions": sum(int(r.get("env_errors/invalid_action", 0)) for r in epochs),
            "replay_size": epochs[-1].get("replay/size"),
            "experience_sft_loss": [start.get("experience/sft_loss_first"), start.get("experience/sft_loss_last")],
            "seconds": json.loads(done.read_text())["seconds"] if done.is_file() else None,
        }
        train_games = workdir / "runs" / name / "train_games.json"
        if train_games.is_file():
            t = json.loads(train_games.read_text())
            out[name] |= {"train_games_start": t["start"], "train_games_final": t["final"]}
    return out


def report(summary: dict[str, dict[str, Any]], epochs: int) -> str:
    def f(x):
        return "-" if x is None else f"{x:.3f}"

    lines = [f"DreamGym miniature on ALFWorld ({epochs} epochs per arm, equal agent updates; held-out "
             "success on the real engine, greedy)", "",
             "| arm | held-out start | held-out final | held-out by epoch | train games, real engine: start -> final | "
             "train success by epoch | synthetic epochs | generated tasks | experience failures | wall |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        wall = "-" if s["seconds"] is None else f"{s['seconds'] / 60:.1f} min"
        lines.append(
            f"| {name} | {f(s['heldout_start'])} | {f(s['heldout_final'])} | "
            f"{' '.join(f(x) for x in s['heldout_by_epoch'])} | "
            f"{f(s.get('train_games_start'))} -> {f(s.get('train_games_final'))} | "
            f"{' '.join(f(x) for x in s['train_success_by_epoch'])} | "
            f"{s['synthetic_epochs']} | {s['generated_tasks']}/{s['generation_requests']} | "
            f"{s['experience_failures']} | {wall} |")
    return "\n".join(lines) + "\n"


def check_flags(workdir: Path, names: Sequence[str], epochs: int, report_only: bool) -> None:
    """Refuses, before the workdir is created, an unknown arm, a count of epochs an arm cannot
    run, an occupied or unwritable workdir, and `--report_only` where no arm has metrics (an
    empty report would look like a finished comparison)."""
    table = arms(1)
    unknown = [a for a in names if a not in table]
    if unknown:
        raise CommandError(f"--arms: unknown arm {unknown[0]!r} (known: {', '.join(table)})")
    check_at_least(epochs, "--epochs", 1)
    check_output_path(workdir, "--workdir", directory=True)
    if report_only and not any((workdir / "runs" / name / "metrics.jsonl").is_file() for name in names):
        raise CommandError(f"--report_only: no arm of {', '.join(names)} has metrics under {workdir / 'runs'} "
                           "(run the comparison first)")


@cli.command(PROGRAM)
def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        cli.die(f"unexpected arguments: {argv[1:]} (flags are --name=value; see --help)", PROGRAM)
    f = FLAGS
    workdir = Path(f.workdir).absolute()
    check_flags(workdir, f.arms, f.epochs, f.report_only)
    workdir.mkdir(parents=True, exist_ok=True)
    table = arms(f.epochs)
    if not f.report_only:
        from genenv_jax.core.compilation_cache import persistent_compilation_cache

        persistent_compilation_cache(workdir / "xla_cache")  # arms 2..n reload arm 1's programs
        prepare_tokenizer(workdir, comparison_config(workdir, f.epochs, f.seed, {}))
        for name in f.arms:
            run_arm(workdir, name, comparison_config(workdir, f.epochs, f.seed, table[name]))
            evaluate_on_train_games(workdir, name, comparison_config(workdir, f.epochs, f.seed, table[name]))
    summary = summarise(workdir, f.arms)
    if not summary:
        raise CommandError(f"no arm of {', '.join(f.arms)} has a finished epoch under {workdir / 'runs'}")
    (workdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = report(summary, f.epochs)
    (workdir / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    define_flags()
    cli.run(main, PROGRAM)
