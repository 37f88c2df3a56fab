"""Real episodes run twice on a random tiny agent, with and without the sampler's prefix pool, for
the tests that check the transcripts are token-identical (BFCL multi-turn, ALFWorld)."""

from __future__ import annotations


import jax

from genenv_jax.episodes import EpisodeCaps, LocalEnvironments, run_episodes
from genenv_jax.models import init_params, preset
from genenv_jax.parallel import MeshConfig, make_mesh
from genenv_jax.sampling import PrefixCacheConfig, Sampler

CAPS = EpisodeCaps(max_turns=6, max_total_tokens=8192, max_new_tokens=7, max_prompt_len=6144)


def run_both(domain, tasks, text, *, rollouts=2, temperature=0.0, caps=CAPS):
    """{"off": (episodes, stats), "on": (episodes, stats)}: `rollouts` episodes per task, greedy
    (or sampled with per-turn seeds), replies of up to caps.max_new_tokens - 1 tokens closed with
    <|im_end|> when cut (random weights rarely stop), so episodes run several turns."""
    cfg = preset("tiny")
    params = init_params(cfg, jax.random.key(0))
    mesh = make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])
    runs = {}
    for name, pool in (("off", None), ("on", PrefixCacheConfig(tokens=65536))):
        sampler = Sampler(cfg, mesh, pad_id=text.pad_id, prefix_cache=pool)
        placed = sampler.prepare_params(params)

        def sample(prompts, turn, sampler=sampler, placed=placed):
            out = sampler.generate(placed, prompts, max_new_tokens=caps.max_new_tokens - 1, temperature=temperature,
                                   seed=turn, stop_tokens=text.stop_ids, slots=8, retain=True)
            return out.closed(text.end_id)

        groups, stats = run_episodes(tasks, rollouts, LocalEnvironments(domain), text, caps, sample)
        runs[name] = ([ep for g in groups for ep in g], stats)
    return runs


def transcript_new_tokens(episodes, rollouts) -> int:
    """Tokens a cache that never recomputes would still prefill or decode: each task's first prompt
    once, then every agent and observation token."""
    return sum(len(e.prompt) for e in episodes[::rollouts]) + sum(len(e.tokens) for e in episodes)
