"""Prefix reuse in the sampler (`sampling/prefix_cache.py`): a call's shared prompt prefixes are
prefilled once, an episode's earlier turns are never prefilled again, and nothing sampled changes:
greedy and sampled outputs equal the sampler's without reuse, on random prompts and on real BFCL
multi-turn episodes; the counters add up; eviction keeps whole episodes and counts the rest."""

import jax
import numpy as np
import pytest

from genenv_jax.domains import get_domain
from genenv_jax.models import init_params, preset
from genenv_jax.parallel import MeshConfig, make_mesh
from genenv_jax.sampling import PrefixCacheConfig, Sampler
from genenv_jax.sampling.prefix_cache import PrefixCache, Reuse
from tests.support.reuse_episodes import run_both, transcript_new_tokens

CFG = preset("micro")
NEW = 8


def _mesh():
    return make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(1))


@pytest.fixture(scope="module")
def samplers():
    """(without reuse, with reuse): one config and mesh, so the same programs decode."""
    return Sampler(CFG, _mesh(), prefix_cache=None), Sampler(CFG, _mesh(), prefix_cache=PrefixCacheConfig(4096))


def _groups(rng, tasks, copies, shared=24, own=(5, 30)):
    """`tasks` prompts of a common `shared`-token head and their own tail, each `copies` times."""
    head = rng.integers(1, CFG.vocab_size, shared).tolist()
    prompts = []
    for _ in range(tasks):
        prompts += [head + rng.integers(1, CFG.vocab_size, int(rng.integers(*own))).tolist()] * copies
    return prompts


def _same(a, b):
    """Tokens exactly, logprobs to 1e-5. Reuse runs other programs than a full prefill (a prefix's
    keys come from a shorter prefill), whose float32 sums may run in another order on another CPU, so
    tokens agree by margin: on these normal(0.02) micro weights the smallest greedy top-1 / top-2
    logit gap is 4e-5 (measured on the shared-prefix prompts; 6e-4 and more on the others), against
    logprob differences of at most 1e-6 (two float32 ulps) measured between the two programs."""
    assert a.token_lists() == b.token_lists() and a.finish_reasons == b.finish_reasons
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.slow
def test_a_groups_shared_prompt_is_prefilled_once_and_samples_do_not_change(params, samplers, temperature):
    off, on = samplers
    prompts = _groups(np.random.default_rng(0), tasks=5, copies=8)
    kwargs = dict(max_new_tokens=NEW, temperature=temperature, seed=7, slots=16)
    plain = off.generate(off.prepare_params(params), prompts, **kwargs)
    reused = on.generate(on.prepare_params(params), prompts, **kwargs)
    _same(plain, reused)
    counts = reused.stats.prefill
    requested = sum(map(len, prompts))
    assert plain.stats.prefill.computed == plain.stats.prefill.requested == requested
    assert counts.requested == requested and counts.reused + counts.computed >= requested
    # Each distinct prompt once, the shared head once more at most, one token per row: <= 1/8 + rows.
    assert counts.computed <= requested / 8 + len(prompts)
    assert counts.created >= 5 and counts.reused_fraction > 0.85


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_retained_turns_prefill_only_what_was_added(params, samplers, temperature):
    off, on = samplers
    rng = np.random.default_rng(1)
    prompts = _groups(rng, tasks=6, copies=2)
    placed_off, placed_on = off.prepare_params(params), on.prepare_params(params)
    observation: list[list[int]] = []
    for turn in range(3):
        kwargs = dict(max_new_tokens=NEW, temperature=temperature, seed=turn, slots=4)
        plain = off.generate(placed_off, prompts, **kwargs)
        reused = on.generate(placed_on, prompts, retain=True, **kwargs)
        _same(plain, reused)
        counts = reused.stats.prefill
        assert counts.stored == len(prompts) and counts.unsaved == 0
        if turn:  # the last reply token and the observation: nothing of the earlier turns
            assert counts.computed <= sum(len(o) + 1 for o in observation)
        observation = [rng.integers(1, CFG.vocab_size, int(rng.integers(3, 12))).tolist() for _ in prompts]
        prompts = [p + r + o for p, r, o in zip(prompts, reused.token_lists(), observation)]


def test_a_rerendered_history_is_reused_up_to_its_first_differing_token(params, samplers):
    off, on = samplers
    rng = np.random.default_rng(2)
    prompts = [rng.integers(1, CFG.vocab_size, 40).tolist() for _ in range(3)]
    placed = on.prepare_params(params)
    first = on.generate(placed, prompts, max_new_tokens=NEW, retain=True)
    edited = [p[:20] + [7] + p[21:] + r for p, r in zip(prompts, first.token_lists())]  # token 20 re-rendered
    again = on.generate(placed, edited, max_new_tokens=NEW, retain=True)
    _same(off.generate(off.prepare_params(params), edited, max_new_tokens=NEW), again)
    assert again.stats.prefill.reused == 3 * 20


@pytest.mark.slow
def test_with_more_episodes_than_fit_whole_episodes_keep_their_entries(params):
    off, small = Sampler(CFG, _mesh(), prefix_cache=None), Sampler(CFG, _mesh(), prefix_cache=PrefixCacheConfig(256))
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, CFG.vocab_size, 40).tolist() for _ in range(8)]  # 8 x (40..70) tokens > 256
    placed_off, placed = off.prepare_params(params), small.prepare_params(params)
    kept = None
    for turn in range(3):
        plain = off.generate(placed_off, prompts, max_new_tokens=NEW, seed=turn)
        reused = small.generate(placed, prompts, max_new_tokens=NEW, seed=turn, retain=True)
        _same(plain, reused)
        counts = reused.stats.prefill
        assert counts.stored + counts.unsaved == len(prompts) and counts.unsaved > 0
        if kept is not None:  # the episodes stored last turn reuse their whole history
            assert counts.reused >= sum(len(p) - 4 - NEW for p in prompts[:kept]) and counts.evicted == 0
        kept = counts.stored
        prompts = [p + r + [3, 4, 5] for p, r in zip(prompts, reused.token_lists())]


def test_the_pool_belongs_to_one_placement_of_the_weights(params, samplers):
    _, on = samplers
    prompts = [list(range(1, 30))]
    first = on.prepare_params(params)
    on.generate(first, prompts, max_new_tokens=NEW, retain=True)
    again = on.generate(first, [prompts[0] + [5]], max_new_tokens=NEW)
    assert again.stats.prefill.reused == 29
    fresh = on.generate(on.prepare_params(params), [prompts[0] + [5]], max_new_tokens=NEW)  # other weights, maybe
    assert fresh.stats.prefill.reused == 0


def test_pool_index_matches_longest_runs_and_nests_shared_prefixes():
    cache = PrefixCache(PrefixCacheConfig(tokens=1024, page_tokens=16, min_shared_tokens=8))
    cache.begin_call()
    head = np.arange(1, 41, dtype=np.int32)
    a, b = np.concatenate([head, [100, 101, 102]]), np.concatenate([head, np.arange(200, 230)])
    planned = cache.plan_shared([a, a, b, b, b])
    runs = sorted((len(x.tokens), x.source.length, x.wave) for x in planned)
    # The 40-token head first; b's own run (69 of its 70 tokens) extends it in a second wave; a's
    # run (42 tokens) would save its one other prompt 2 tokens only, so it reuses the head.
    assert runs == [(40, 0, 0), (69, 40, 1)]
    assert cache.reuse(a) == Reuse(planned[0].entry, 40)
    assert cache.reuse(b).length == 69
    assert cache.counts.computed == 40 + 29 + (43 - 40) + 1


def test_entries_share_the_whole_pages_of_the_prefix_they_reused():
    cache = PrefixCache(PrefixCacheConfig(tokens=1024, page_tokens=16, min_shared_tokens=8))
    cache.begin_call()
    prompt = np.arange(1, 42, dtype=np.int32)  # 41 tokens, twice: its first 40 become one entry
    (run,) = cache.plan_shared([prompt, prompt])
    reuses = [cache.reuse(prompt), cache.reuse(prompt)]
    for r in reuses:
        cache.unpin(r)
    assert cache.store_target(0, prompt, reuses[0], 5) == (run.entry, 40)  # the first row grows it in place
    other, first = cache.store_target(1, prompt, reuses[1], 5)  # the second shares its two whole pages
    assert first == 32 and cache.entries[other].pages[:2] == cache.entries[run.entry].pages[:2]
    assert len(cache.free_pages) == 64 - 3 - 1  # 45 tokens fit the entry's 3 pages; the copy takes 1 more
    assert cache.page_refs[cache.entries[other].pages[0]] == 2
    np.testing.assert_array_equal(cache.token_index(other, 0, 32), cache.token_index(run.entry, 0, 32))


def test_eviction_spares_entries_of_the_current_call():
    cache = PrefixCache(PrefixCacheConfig(tokens=64, page_tokens=16, min_shared_tokens=8))
    cache.begin_call()
    old = cache.store_target(0, np.arange(30), Reuse(None, 0), 3)  # 32 tokens: 2 pages
    cache.finish([np.arange(30)], np.arange(10)[None])
    cache.begin_call()
    mine = cache.store_target(0, np.arange(100, 130), Reuse(None, 0), 3)  # 2 pages: all that is left
    assert old is not None and mine is not None and len(cache.free_pages) == 0
    third = cache.store_target(1, np.arange(200, 230), Reuse(None, 0), 3)  # evicts the older call's entry
    assert third is not None and cache.counts.evicted == 1
    assert cache.store_target(2, np.arange(300, 330), Reuse(None, 0), 3) is None  # both belong to this call
    assert cache.counts.unsaved == 1


# ------------------------------------------------------------------ real episodes
@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_bfcl_multiturn_transcripts_are_token_identical_with_reuse(chat_text, temperature):
    domain = get_domain("bfcl_multiturn")
    # The two tasks with the shortest first prompts (~3.1k tokens: one 4096 prompt bucket, where the
    # first three of the file reach 5.3k and a 6144 bucket, ~2.5x the full prefills' attention).
    tasks = sorted(domain.seeds("train"), key=lambda t: len(chat_text.prompt(domain.agent_prompt(t))))[:2]
    runs = run_both(domain, tasks, chat_text, temperature=temperature)
    (plain, plain_stats), (reused, stats) = runs["off"], runs["on"]
    assert [e.tokens for e in plain] == [e.tokens for e in reused]
    assert [e.transcript for e in plain] == [e.transcript for e in reused]
    assert max(len(e.turns) for e in reused) >= 3
    # Computed: each distinct first prompt once, then per turn the closing token and the observation.
    assert stats.prefill.computed <= 1.1 * transcript_new_tokens(reused, 2)
    assert plain_stats.prefill.computed == plain_stats.prefill.requested > 3 * stats.prefill.computed


@pytest.mark.slow
def test_reuse_on_a_sharded_mesh_equals_one_device(params, samplers):
    """Slots over data x fsdp, kv heads over tensor; the pool replicated over the batch axes."""
    off, _ = samplers
    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2), devices=jax.devices()[:8])
    sharded = Sampler(CFG, mesh, prefix_cache=PrefixCacheConfig(4096))
    rng = np.random.default_rng(4)
    prompts = _groups(rng, tasks=3, copies=4)
    placed_off, placed = off.prepare_params(params), sharded.prepare_params(params)
    for turn in range(2):
        plain = off.generate(placed_off, prompts, max_new_tokens=NEW, temperature=1.0, seed=turn, slots=8)
        reused = sharded.generate(placed, prompts, max_new_tokens=NEW, temperature=1.0, seed=turn, slots=8,
                                  retain=True)
        _same(plain, reused)
        assert reused.stats.prefill.reused_fraction > 0.5
        prompts = [p + r + [9, 9] for p, r in zip(prompts, reused.token_lists())]


def test_closed_ends_cut_rows_with_the_end_token():
    from genenv_jax.sampling import FINISH_LENGTH, FINISH_STOP, SampleOutput

    out = SampleOutput(tokens=np.array([[5, 6, 0], [7, 8, 9]], np.int32),
                       logprobs=np.array([[-1, -2, 0], [-1, -1, -1]], np.float32), lengths=np.array([2, 3]),
                       finish_reasons=(FINISH_STOP, FINISH_LENGTH))
    closed = out.closed(end_id=99)
    assert closed.token_lists() == [[5, 6], [7, 8, 9, 99]] and closed.finish_reasons == (FINISH_STOP,) * 2
    assert closed.logprob_lists()[1].tolist() == [-1, -1, -1, 0]
