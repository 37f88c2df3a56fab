"""Fits an experience model on real transitions and measures it on held-out tasks: next-state exact
match and reward accuracy against the trivial baselines (repeat the current state; "Nothing
happens.").

    python -m genenv_jax.dreamgym.fit_experience --workdir=runs/experience [--steps=300 ...]
    python -m genenv_jax.dreamgym.fit_experience --domain=bfcl_multiturn --workdir=runs/experience-bfcl \
        --max_prompt_len=2048 --max_new_tokens=384

ALFWorld (default): train transitions come from the generated train games (expert walkthroughs +
random admissible and inadmissible actions), held-out ones from the validation games (other
placements, other tasks). BFCL multi-turn: from the train split's tasks (ground-truth and perturbed
episodes run on the backends), held out from the validation split (other scenarios). No held-out
task is ever seen in training. The tokenizer is a small SentencePiece model trained on the train
transitions' texts (as the study's miniature models do); the model a random `study-*` preset.
Retrieval keys on the model's initial weights (a fixed embedding: stored vectors never go stale
when the model trains). Writes `results.json` and prints the table."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import random
import shutil
import time
from pathlib import Path
from typing import Sequence

from absl import flags

from genenv_jax.core import absl_flags
from genenv_jax.core.errors import CommandError, check_at_least, check_output_path, check_within, command, die

FLAGS = flags.FLAGS
PROGRAM = "genenv_jax.dreamgym.fit_experience"


def define_flags() -> None:
    """The command line's flags: defined only when this module runs as a program, so importing it
    (tests, notebooks) never clashes with the main program's flags."""
    flags.DEFINE_string("workdir", None, "Output directory (games cache, tokenizer, results.json).",
                        required=True)
    flags.DEFINE_enum("domain", "alfworld", ["alfworld", "bfcl_multiturn"], "Whose transitions.")
    flags.DEFINE_list("categories", ["multi_turn_base"], "BFCL multi-turn categories (domain bfcl_multiturn).")
    flags.DEFINE_integer("train_games", 16, "Train tasks to collect from (ALFWorld: generated games).")
    flags.DEFINE_integer("heldout_games", 6, "Validation tasks held out for scoring.")
    flags.DEFINE_list("task_types", ["pick_and_place_simple", "pick_clean_then_place_in_recep",
                                     "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep"],
                      "ALFWorld task types of the games.")
    flags.DEFINE_integer("random_per_task", 2, "Random-action (BFCL: perturbed) episodes per task.")
    flags.DEFINE_integer("random_steps", 12, "Steps (agent replies) per random / perturbed episode.")
    flags.DEFINE_float("invalid_prob", 0.15, "ALFWorld: share of inadmissible commands in random episodes; "
                       "BFCL: probability that a turn's calls are perturbed.")
    flags.DEFINE_string("preset", "study-1m", "Model preset (random init).")
    flags.DEFINE_integer("vocab_size", 512, "SentencePiece vocabulary of the small tokenizer.")
    flags.DEFINE_integer("steps", 300, "SFT steps.")
    flags.DEFINE_integer("batch_size", 8, "SFT rows per step.")
    flags.DEFINE_float("learning_rate", 1e-3, "SFT learning rate.")
    flags.DEFINE_integer("top_k", 3, "Retrieved real transitions per prompt (0: no retrieval).")
    flags.DEFINE_bool("reasoning", True, "Train and ask for a reasoning before the next state.")
    flags.DEFINE_integer("max_history", 2, "Earlier steps shown in the prompt.")
    flags.DEFINE_integer("max_prompt_len", 768, "Prompt token cap (demos, then history dropped to fit).")
    flags.DEFINE_integer("max_new_tokens", 192, "Reply token cap.")
    flags.DEFINE_integer("max_heldout", 200, "Held-out transitions scored (a seeded sample).")
    flags.DEFINE_integer("seed", 0, "Seed of the collection, the init and the SFT order.", lower_bound=0)


@dataclasses.dataclass(frozen=True)
class FitSettings:
    train_games: int
    heldout_games: int
    task_types: tuple[str, ...]
    random_per_task: int
    random_steps: int
    invalid_prob: float
    preset: str
    vocab_size: int
    steps: int
    batch_size: int
    learning_rate: float
    top_k: int
    reasoning: bool
    max_history: int
    max_prompt_len: int
    max_new_tokens: int
    max_heldout: int
    seed: int
    domain: str = "alfworld"
    categories: tuple[str, ...] = ("multi_turn_base",)


def make_domain(s: FitSettings, workdir: Path):
    """The domain whose tasks are collected: `train_games` train and `heldout_games` validation tasks."""
    if s.domain == "alfworld":
        from genenv_jax.domains.alfworld.domain import ALFWorldDomain
        return ALFWorldDomain(games={"train": s.train_games, "validation": s.heldout_games, "test": 0},
                              task_types=s.task_types, admissible="first_turn", cache_dir=str(workdir / "games"))
    from genenv_jax.domains.bfcl_multiturn import BFCLMultiTurnDomain
    return BFCLMultiTurnDomain(categories=s.categories)


def collect_split(domain, split: str, s: FitSettings):
    """Real transitions of a split's first tasks (`train_games` / `heldout_games`) by the domain's
    DreamGym collector: each one's expert episode and random (ALFWorld) or perturbed (BFCL
    multi-turn) episodes."""
    from genenv_jax.dreamgym.domains import OfflineSettings, domain_support

    tasks = domain.seeds(split)[:s.train_games if split == "train" else s.heldout_games]
    return domain_support(domain).offline(domain, tasks, OfflineSettings(
        s.random_per_task, s.random_steps, s.invalid_prob, rng_key=f"{s.seed}/{split}"))


def tokenizer_texts(transitions, settings) -> list[str]:
    """Every train prompt (without demos) and reply rendered in the chat format, plus the raw states."""
    from genenv_jax.dreamgym import experience_text as experience_model
    from genenv_jax.text.small_tokenizer import TemplateOnly
    from genenv_jax.text.tokenization import IM_END, render_chat

    template = TemplateOnly()
    texts = []
    for t in transitions:
        p = experience_model.transition_prompt(t, [], settings)
        texts.append(render_chat(template, p.messages, None, add_generation_prompt=True)
                     + experience_model.target(t, settings) + IM_END + "\n")
    return texts


def run(s: FitSettings, workdir: Path) -> dict:
    import jax
    import numpy as np

    from genenv_jax.text.chat_text import ChatText
    from genenv_jax.dreamgym import experience_text as experience_model
    from genenv_jax.dreamgym.domains import domain_support
    from genenv_jax.dreamgym import sft as training
    from genenv_jax.dreamgym.model import ExperienceModel
    from genenv_jax.dreamgym.predictor import Query, accuracy, baseline_predictions
    from genenv_jax.models import init_params, preset
    from genenv_jax.workdir.pools import Pool
    from genenv_jax.rl.rwr import make_sft_step
    from genenv_jax.sampling import Sampler
    from genenv_jax.text.small_tokenizer import small_tokenizer_once

    t0 = time.time()
    domain = make_domain(s, workdir)
    train_t, heldout_t = collect_split(domain, "train", s), collect_split(domain, "validation", s)
    rng = random.Random(s.seed)
    scored = sorted(rng.sample(range(len(heldout_t)), min(s.max_heldout, len(heldout_t))))
    heldout_t = [heldout_t[i] for i in scored]
    t_collect = time.time() - t0

    prompt_settings = experience_model.PromptSettings(max_history=s.max_history, reasoning=s.reasoning,
                                                      environment=domain_support(domain).environment)
    texts = tokenizer_texts(train_t, prompt_settings)
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    tok_dir = small_tokenizer_once(lambda: texts, workdir / f"tokenizer-{s.vocab_size}-{digest}",  # once per texts
                                   vocab_size=s.vocab_size)
    text = ChatText.load(str(tok_dir))

    cfg = preset(s.preset, param_dtype="float32", dtype="float32")
    params = init_params(cfg, jax.random.key(s.seed))
    pool_root = workdir / "replay"  # rebuilt every run: embedding the train transitions takes seconds
    shutil.rmtree(pool_root, ignore_errors=True)
    model = ExperienceModel.build(text, cfg, params, train_t, Pool(pool_root, "replay"), prompt_settings,
                                  top_k=s.top_k, max_prompt_len=s.max_prompt_len)
    model.buffer.commit(0)

    rows = model.sft_rows()
    train_fn, state_of = training.bare_sft(make_sft_step(cfg, s.learning_rate, chunk_size=64))
    t1 = time.time()
    state, sft_metrics = training.train(train_fn, state_of(params), rows, steps=s.steps, batch_size=s.batch_size,
                                        rows_multiple=1, seed=s.seed, pad_id=text.pad_id, show_progress=True)
    params = state.params
    t_train = time.time() - t1

    sampler = Sampler(cfg, pad_id=text.pad_id)
    placed = sampler.prepare_params(params)

    def sample(prompts, seed):
        return sampler.generate(placed, prompts, max_new_tokens=s.max_new_tokens, temperature=0.0, seed=seed,
                                stop_tokens=text.stop_ids, slots=min(64, len(prompts)))

    predictor = model.predictor(sample)
    t2 = time.time()
    predictions, counts = predictor.predict([Query.of(t) for t in heldout_t], seed=0)
    t_eval = time.time() - t2
    results = {
        "settings": dataclasses.asdict(s),
        "data": {"train_transitions": len(train_t), "heldout_transitions": len(heldout_t),
                 "train_sources": _counts(t.source for t in train_t),
                 "heldout_sources": _counts(t.source for t in heldout_t),
                 "heldout_invalid": sum(not t.valid for t in heldout_t),
                 "heldout_reward_1": sum(t.reward >= 0.5 for t in heldout_t), "sft_rows": len(rows),
                 "prompt_tokens_mean": float(np.mean([len(r.prompt) for r in rows])),
                 "prompt_tokens_max": max(len(r.prompt) for r in rows),
                 "reply_tokens_mean": float(np.mean([len(r.response) for r in rows])),
                 "reply_tokens_max": max(len(r.response) for r in rows)},
        "experience_model": accuracy(heldout_t, predictions) | _by_kind(heldout_t, predictions, accuracy),
        "baseline_repeat": accuracy(heldout_t, baseline_predictions(heldout_t, "repeat")),
        "baseline_nothing": accuracy(heldout_t, baseline_predictions(heldout_t, "nothing")),
        "sft": sft_metrics, "prediction_failures": counts,
        "seconds": {"collect": t_collect, "train": t_train, "evaluate": t_eval, "total": time.time() - t0},
        "examples": [{"state": t.state[-200:], "action": t.action, "want": t.next_state, "got": p.next_state,
                      "reward": [t.reward, p.reward], "reasoning": p.reasoning}
                     for t, p in list(zip(heldout_t, predictions))[:12]],
    }
    return results


def _counts(values) -> dict[str, int]:
    return dict(sorted(collections.Counter(values).items()))


def _by_kind(transitions: Sequence, predictions: Sequence, score) -> dict[str, float]:
    """The same scores on the valid, invalid and reward-1 transitions alone."""
    out = {}
    for kind, keep in (("valid", lambda t: t.valid), ("invalid", lambda t: not t.valid),
                       ("reward_1", lambda t: t.reward >= 0.5)):
        pairs = [(t, p) for t, p in zip(transitions, predictions) if keep(t)]
        if pairs:
            scores = score([t for t, _ in pairs], [p for _, p in pairs])
            out |= {f"{kind}/{k}": v for k, v in scores.items() if k != "parse_rate"}
    return out


def table(results: dict) -> str:
    rows = [("experience model", results["experience_model"]), ("repeat the state", results["baseline_repeat"]),
            ("\"Nothing happens.\"", results["baseline_nothing"])]
    lines = ["| predictor | next-state exact | reward accuracy | parsed |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['next_state_exact']:.3f} | {r['reward_accuracy']:.3f} | {r['parse_rate']:.3f} |"
              for name, r in rows]
    return "\n".join(lines)


def check_settings(s: FitSettings) -> None:
    """Refuses, before any transition is collected, values the fit cannot use (a probability outside
    [0, 1], a count below its minimum, an unknown preset or task type): found only minutes into the
    fit otherwise, or never (a negative count silently collects nothing)."""
    for name, low in (("train_games", 1), ("heldout_games", 1), ("random_per_task", 0), ("random_steps", 1),
                      ("vocab_size", 64), ("steps", 1), ("batch_size", 1), ("top_k", 0), ("max_history", 0),
                      ("max_prompt_len", 1), ("max_new_tokens", 1), ("max_heldout", 1)):
        check_at_least(getattr(s, name), f"--{name}", low)
    check_within(s.invalid_prob, "--invalid_prob", 0.0, 1.0)
    if not 0 < s.learning_rate < float("inf"):
        raise CommandError(f"--learning_rate={s.learning_rate}: must be a finite number > 0")
    if s.domain == "alfworld":
        from genenv_jax.domains.alfworld import vocab

        unknown = sorted(set(s.task_types) - set(vocab.TASK_TYPES))
        if unknown:
            raise CommandError(f"--task_types: unknown {unknown[0]!r} (known: {', '.join(vocab.TASK_TYPES)})")
    from genenv_jax.models.config import PRESETS

    if s.preset not in PRESETS:
        raise CommandError(f"--preset {s.preset!r}: not a model preset ({', '.join(sorted(PRESETS))})")


def settings_from_flags() -> FitSettings:
    f = FLAGS
    return FitSettings(train_games=f.train_games, heldout_games=f.heldout_games, task_types=tuple(f.task_types),
                       random_per_task=f.random_per_task, random_steps=f.random_steps, invalid_prob=f.invalid_prob,
                       preset=f.preset, vocab_size=f.vocab_size, steps=f.steps, batch_size=f.batch_size,
                       learning_rate=f.learning_rate, top_k=f.top_k, reasoning=f.reasoning,
                       max_history=f.max_history, max_prompt_len=f.max_prompt_len, max_new_tokens=f.max_new_tokens,
                       max_heldout=f.max_heldout, seed=f.seed, domain=f.domain, categories=tuple(f.categories))


@command(PROGRAM)
def main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
        die(f"unexpected arguments: {argv[1:]} (flags are --name=value; see --help)", PROGRAM)
    workdir = Path(FLAGS.workdir)
    check_output_path(workdir, "--workdir", directory=True)
    s = settings_from_flags()
    check_settings(s)
    workdir.mkdir(parents=True, exist_ok=True)
    results = run(s, workdir)
    (workdir / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    print(table(results))
    print(f"results: {workdir / 'results.json'}")


if __name__ == "__main__":
    define_flags()
    absl_flags.run(main, PROGRAM)
