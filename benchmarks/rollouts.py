"""Rollout prefill with and without prefix reuse (`genenv_jax.sampling.prefix_cache`), side by side.

Three rollout shapes, each run twice with the same seeds, once on a sampler without a prefix pool
("before": every prompt prefilled in full, as before prefix reuse existed) and once with one
("after"):
  (a) groups:   --groups BFCL single-turn tasks x --group_size rollouts in one sampler call (a
                GRPO epoch's agent call; the tasks share BFCL's system prompt too);
  (b) bfcl_mt:  --mt_tasks BFCL multi-turn tasks x --mt_episodes episodes of up to --mt_turns turns
                on the real BFCL backends (the episode runner; each turn retains its sequences);
  (c) alfworld: --alf_episodes ALFWorld-shaped episodes of --alf_turns turns: observations of
                120-410 tokens of text (the range measured in docs/alfworld.md), from a scripted
                environment, so the shape is ALFWorld's without its engine.
Sampling at temperature 1 with per-turn seeds. Random-weight agents rarely emit a stop token, so a
reply cut at --new_tokens is closed with <|im_end|> (`SampleOutput.closed`) and the episode goes
on; with real weights the same happens only to replies that hit the cap.

Printed per shape and arm: prefill tokens requested (prompt tokens of every row of every call)
and computed (run through the model), the new tokens of the transcripts (first prompts, agent
tokens, observations: what a cache that never recomputes anything would still prefill or decode),
wall time (the first run of an arm includes compiling its programs; for the shapes named in --warm
each arm runs once beforehand and the timed run is the second), the compiled programs of the arm's sampler, and
whether both arms sampled identical tokens. Last, what copying --copy_rows cached prefixes of
--copy_tokens tokens out of the pool costs against prefilling them (why prefixes are copied into
the slots rather than referenced from a paged cache: docs/sampling.md).

Examples:
  JAX_PLATFORMS=cpu python benchmarks/rollouts.py --preset tiny --warm
  JAX_PLATFORMS=cpu python benchmarks/rollouts.py --model_dir qwen2.5-coder-0.5b-instruct --groups 8 \\
      --mt_tasks 1 --mt_turns 4 --alf_episodes 2 --alf_turns 10 --new_tokens 24
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from genenv_jax.domains import get_domain
from genenv_jax.domains.base import ChatPrompt, Environment, ScoreResult, StepOutcome, Task
from genenv_jax.episodes import EpisodeCaps, LocalEnvironments, run_episodes
from genenv_jax.models import init_params, preset
from genenv_jax.parallel import MeshConfig, make_mesh
from genenv_jax.sampling import PrefixCacheConfig, Sampler
from genenv_jax.text.chat_text import ChatText
from run_header import print_header

WORDS = ("drawer", "cabinet", "countertop", "you", "see", "a", "mug", "on", "the", "is", "open", "closed", "in",
         "nothing", "apple", "knife", "sinkbasin", "1", "2", "3", "arrive", "at", "fridge", "towel", "and")


class ShapedEnvironment(Environment):
    """An ALFWorld-shaped episode: a task text, then `turns` observations of 120-410 tokens of room
    text; done after the last turn."""

    def __init__(self, task: Task, text: ChatText):
        self.task, self.text, self.turn = task, text, 0
        self.rng = np.random.default_rng(task.prompt["seed"])

    def reset(self) -> ChatPrompt:
        return ChatPrompt(messages=[{"role": "system", "content": "You are in a household. Act with one command."},
                                    {"role": "user", "content": self._room(300)}])

    def _room(self, tokens: int) -> str:
        words = []
        while len(self.text.encode(" ".join(words))) < tokens:
            words += list(self.rng.choice(WORDS, 16))
        return " ".join(words)

    def step(self, agent_text: str) -> StepOutcome:
        self.turn += 1
        if self.turn >= self.task.prompt["turns"]:
            return StepOutcome(observation=[], done=True)
        return StepOutcome(observation=[{"role": "user", "content": self._room(int(self.rng.integers(120, 411)))}],
                           done=False)

    def score(self, transcript) -> ScoreResult:
        return ScoreResult(0.0)


class ShapedDomain:
    """The scripted episodes' environments, for `LocalEnvironments` (which needs only `environment`)."""

    name = "alfworld_shaped"

    def __init__(self, text: ChatText):
        self.text = text

    def environment(self, task: Task) -> Environment:
        return ShapedEnvironment(task, self.text)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny", help="random-weight model preset (with the Qwen2.5 vocabulary)")
    p.add_argument("--model_dir", default=None, help="real weights (any model source, docs/models.md)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--shapes", default="groups,bfcl_mt,alfworld")
    p.add_argument("--groups", type=int, default=64)
    p.add_argument("--group_size", type=int, default=8)
    p.add_argument("--mt_tasks", type=int, default=4)
    p.add_argument("--mt_turns", type=int, default=8)
    p.add_argument("--mt_episodes", type=int, default=8, help="episodes per multi-turn task")
    p.add_argument("--alf_episodes", type=int, default=16)
    p.add_argument("--alf_turns", type=int, default=30)
    p.add_argument("--new_tokens", type=int, default=32, help="cap per reply")
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--pool_tokens", type=int, default=131072, help="prefix pool of the 'after' arm")
    p.add_argument("--prefill_chunk_tokens", type=int, default=16384,
                   help="Sampler(prefill_chunk_tokens=...): bounds the [rows, heads, T, P] prefill scores (the real "
                        "model's 4.6k-token BFCL multi-turn prompts need 4096 in 24 GB)")
    p.add_argument("--copy_rows", type=int, default=8, help="rows of the copy-vs-prefill measurement (0: skip)")
    p.add_argument("--copy_tokens", type=int, default=2048, help="tokens per row of that measurement")
    p.add_argument("--warm", default="", help="shapes whose arms run once before the timed run (comma-separated)")
    return p.parse_args(argv)


def _sample_fn(sampler, placed, text, args, retain, calls):
    def sample(prompts, turn):
        out = sampler.generate(placed, prompts, max_new_tokens=args.new_tokens, temperature=1.0, seed=1000 + turn,
                               stop_tokens=text.stop_ids, slots=args.slots, retain=retain)
        calls.append(out.token_lists())
        return out.closed(text.end_id)
    return sample


def run_shape(shape, sampler, params, text, args):
    """One arm of one shape: (prefill counts, transcript new tokens, seconds, sampled tokens)."""
    placed = sampler.prepare_params(params)  # a fresh placement: an empty pool
    calls: list = []
    t0 = time.perf_counter()
    if shape == "groups":
        domain = get_domain("bfcl")
        tasks = domain.seeds("train")[:args.groups]
        prompts = [text.prompt(domain.agent_prompt(t)) for t in tasks for _ in range(args.group_size)]
        out = _sample_fn(sampler, placed, text, args, False, calls)(prompts, 0)
        new = sum(len(p) for p in prompts[::args.group_size]) + int(out.lengths.sum())  # distinct prompts + replies
        return out.stats.prefill, new, time.perf_counter() - t0, calls
    if shape == "bfcl_mt":
        domain, turns, n = get_domain("bfcl_multiturn"), args.mt_turns, args.mt_episodes
        tasks = domain.seeds("train")[:args.mt_tasks]
    else:
        domain, turns, n = ShapedDomain(text), args.alf_turns, 1
        tasks = [Task(domain="alfworld_shaped", task_id=f"shaped-{i}", category="shaped",
                      prompt={"seed": i, "turns": turns}, verifier={}) for i in range(args.alf_episodes)]
    caps = EpisodeCaps(max_turns=turns, max_total_tokens=1 << 20, max_new_tokens=args.new_tokens + 1,
                       max_prompt_len=1 << 20)
    groups, stats = run_episodes(tasks, n, LocalEnvironments(domain), text, caps,
                                 _sample_fn(sampler, placed, text, args, True, calls))
    episodes = [ep for g in groups for ep in g]
    first = {tuple(ep.prompt) for ep in episodes}
    new = sum(map(len, first)) + sum(len(ep.tokens) for ep in episodes)
    return stats.prefill, new, time.perf_counter() - t0, calls


def copy_against_prefill(sampler: Sampler, params, rows: int = 8, length: int = 2048) -> tuple[float, float]:
    """Seconds to copy `rows` cached prefixes of `length` tokens out of a pool into prompt caches
    (what a reused prefix costs) against prefilling them (what it saves): the choice between copying
    a shared prefix into each slot and referencing it from a paged cache."""
    from genenv_jax.models.decode import prefill
    from genenv_jax.sampling.refill import gather_prefix

    cfg = sampler.cfg
    placed = sampler.prepare_params(params).tree
    pool = sampler.new_pool(rows * length)
    index = jnp.arange(rows * length, dtype=jnp.int32).reshape(rows, length)
    tokens = jnp.ones((rows, length), jnp.int32)
    copy = jax.jit(gather_prefix)
    full = jax.jit(lambda p, t: prefill(cfg, p, t, jnp.ones(t.shape, bool), length, rows_per_chunk=1))
    timings = []
    for fn, fn_args in ((copy, (pool, index)), (full, (placed, tokens))):
        jax.block_until_ready(fn(*fn_args))
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*fn_args))
        timings.append(time.perf_counter() - t0)
    return timings[0], timings[1]


def main(argv=None) -> None:
    args = parse_args(argv)
    print_header()
    text = ChatText.load(None)
    if args.model_dir:
        from genenv_jax.data.model_sources import resolve_model_source
        from genenv_jax.models.loading import load_model

        cfg, params = load_model(resolve_model_source(args.model_dir).path, dtype=args.dtype)
        name = args.model_dir
    else:
        cfg = preset(args.preset).replace(param_dtype=args.dtype, dtype=args.dtype)
        params, name = init_params(cfg, jax.random.key(0)), args.preset
    mesh = make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])
    print(f"model:   {name} ({cfg.num_params() / 1e9:.3f}B params, {args.dtype}); slots {args.slots}, reply cap "
          f"{args.new_tokens}, temperature 1")
    print(f"{'shape':<10} {'arm':<7} {'requested':>10} {'computed':>9} {'new tok':>8} {'comp/new':>8} "
          f"{'unsaved':>7} {'wall s':>8} {'programs':>8}")
    for shape in args.shapes.split(","):
        results = {}
        for arm, pool in (("before", None), ("after", PrefixCacheConfig(tokens=args.pool_tokens))):
            sampler = Sampler(cfg, mesh, pad_id=text.pad_id, prefix_cache=pool,
                              prefill_chunk_tokens=args.prefill_chunk_tokens)
            if shape in args.warm.split(","):
                run_shape(shape, sampler, params, text, args)
            counts, new, seconds, calls = run_shape(shape, sampler, params, text, args)
            results[arm] = (seconds, calls)
            print(f"{shape:<10} {arm:<7} {counts.requested:>10} {counts.computed:>9} {new:>8} "
                  f"{counts.computed / new:>8.2f} {counts.unsaved:>7} {seconds:>8.1f} "
                  f"{len(sampler.compiled_programs):>8}", flush=True)
        (t_before, before), (t_after, after) = results["before"], results["after"]
        print(f"{shape:<10} wall-time ratio before/after {t_before / t_after:.2f}; identical samples: "
              f"{before == after}", flush=True)
    if args.copy_rows:
        copy_s, prefill_s = copy_against_prefill(Sampler(cfg, mesh), params, args.copy_rows, args.copy_tokens)
        print(f"copy {args.copy_rows} x {args.copy_tokens} cached tokens into prompt caches: {copy_s * 1e3:.1f} ms; "
              f"prefill them: {prefill_s * 1e3:.1f} ms ({prefill_s / copy_s:.0f}x)")


if __name__ == "__main__":
    main()
