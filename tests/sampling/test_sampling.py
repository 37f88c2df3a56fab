"""KV-cache sampler: HF generate parity, cached vs full-forward logits, logprobs, sampling modes,
stop tokens, seeds, buckets, slot refill (continuous batching), and sharded sampling on 8 CPU
devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from tests.support.decode_reference import teacher_forced_logits
from genenv_jax.models import forward, load_hf, param_shardings, shard_params
from genenv_jax.parallel import MeshConfig, make_mesh
from genenv_jax.sampling import Buckets, Sampler, generate, params_mesh, select_tokens
from genenv_jax.sampling.scheduler import choose_window, shrink_fit
from tests.support.hf_reference import make_hf_model, save_hf_model

# Different lengths, so the batch is left-padded; 4 rows, all in the (4, 16, 16) buckets.
PROMPTS = [[5, 9, 13], [7, 8, 9, 10, 11, 12, 13, 40, 41, 42, 43], [20], [3, 4, 5, 6, 7]]
NEW = 12
# Tokens are compared exactly between different programs (HF's generate, refills, chunked prefills,
# compaction, sharded meshes), whose float32 sums may run in another order on another CPU. That is
# safe by margin, not by bit-identity: the std-0.3 weights of `make_hf_model` give logits of std ~2
# and a smallest top-1 / top-2 logit gap of 1.8e-3 along every greedy path of these tests
# (measured), against cross-program logit and logprob differences of at most 8e-6 (measured: HF,
# refills, an fsdp4 x tensor2 mesh); logprobs are compared to 1e-5.


def _single_device_mesh():
    return make_mesh(MeshConfig(data=1, fsdp=1, tensor=1), devices=jax.devices()[:1])


@pytest.fixture(scope="module")
def hf_model():
    return make_hf_model(std=0.3, tied=False)


@pytest.fixture(scope="module")
def model(hf_model, tmp_path_factory):
    return load_hf(save_hf_model(hf_model, tmp_path_factory.mktemp("hf")))


@pytest.fixture(scope="module")
def sampler(model):
    return Sampler(model[0], _single_device_mesh())


def _left_padded(prompts):
    width = max(map(len, prompts))
    ids = np.zeros((len(prompts), width), np.int64)
    mask = np.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = p
        mask[i, width - len(p):] = 1
    return ids, mask


def _hf_greedy(hf_model, prompts, new_tokens, eos=None):
    ids, mask = _left_padded(prompts)
    with torch.no_grad():
        out = hf_model.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                                max_new_tokens=new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=0)
    return out[:, ids.shape[1]:].numpy()


def _forward_logits(cfg, params, prompt, continuation):
    """Full-forward logits [len(continuation), V] predicting each continuation token."""
    full = np.asarray(prompt + list(continuation))[None]
    logits = np.asarray(forward(cfg, params, full))[0]
    return logits[len(prompt) - 1:len(prompt) - 1 + len(continuation)]


def test_greedy_matches_hf_generate(hf_model, model, sampler):
    cfg, params = model
    ref = _hf_greedy(hf_model, PROMPTS, NEW)
    out = sampler.generate(params, PROMPTS, max_new_tokens=NEW)
    np.testing.assert_array_equal(out.tokens, ref)
    assert out.finish_reasons == ("length",) * 4 and (out.lengths == NEW).all()

    # With an EOS that rows reach at different steps: HF pads after it, as we do.
    eos = int(ref[0, 4])
    ref_eos = _hf_greedy(hf_model, PROMPTS, NEW, eos=eos)
    out_eos = sampler.generate(params, PROMPTS, max_new_tokens=NEW, stop_tokens=[eos])
    np.testing.assert_array_equal(out_eos.tokens[:, :ref_eos.shape[1]], ref_eos)
    assert (out_eos.tokens[:, ref_eos.shape[1]:] == 0).all()
    assert out_eos.finish_reasons[0] == "stop"
    assert out_eos.finish_reasons == tuple("stop" if eos in row else "length" for row in ref[:, :NEW])


def test_greedy_matches_hf_generate_tied_embeddings_one_kv_head(tmp_path):
    hf = make_hf_model(std=0.3, tied=True, heads=4, kv_heads=1, layers=3, seed=1)
    cfg, params = load_hf(save_hf_model(hf, tmp_path / "hf"))
    assert cfg.tie_word_embeddings and cfg.num_kv_heads == 1
    out = Sampler(cfg, _single_device_mesh()).generate(params, PROMPTS, max_new_tokens=NEW)
    np.testing.assert_array_equal(out.tokens, _hf_greedy(hf, PROMPTS, NEW))


def test_cached_decode_logits_equal_full_forward(model, sampler):
    cfg, params = model
    rng = np.random.RandomState(0)
    continuations = [rng.randint(0, cfg.vocab_size, n).tolist() for n in (9, 3, 16, 1)]
    cached = teacher_forced_logits(sampler, params, PROMPTS, continuations)
    for prompt, cont, got in zip(PROMPTS, continuations, cached):
        np.testing.assert_allclose(got, _forward_logits(cfg, params, prompt, cont), atol=1e-4, rtol=0)


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 8, 0.8)])
def test_logprobs_equal_recomputed_from_forward(model, sampler, temperature, top_k, top_p):
    cfg, params = model
    out = sampler.generate(params, PROMPTS, max_new_tokens=NEW, temperature=temperature, top_k=top_k,
                           top_p=top_p, seed=3)
    for prompt, toks, lps in zip(PROMPTS, out.token_lists(), out.logprob_lists()):
        logits = _forward_logits(cfg, params, prompt, toks) / (temperature or 1.0)
        expected = np.asarray(jax.nn.log_softmax(logits, axis=-1))[np.arange(len(toks)), toks]
        np.testing.assert_allclose(lps, expected, atol=1e-4, rtol=0)
        if temperature == 0:
            assert toks == np.argmax(logits, -1).tolist()
        if top_k:  # every sampled token lies in the top-k, and inside the top-p nucleus of those
            for logit_row, tok in zip(logits, toks):
                cand = np.sort(logit_row)[::-1][:top_k]
                rank = int(np.sum(cand > logit_row[tok]))
                probs = np.exp(cand - cand.max()) / np.exp(cand - cand.max()).sum()
                assert rank < top_k and probs[:rank].sum() < top_p


def test_top_k_one_equals_greedy(model, sampler):
    _, params = model
    greedy = sampler.generate(params, PROMPTS, max_new_tokens=NEW)
    top1 = sampler.generate(params, PROMPTS, max_new_tokens=NEW, temperature=1.5, top_k=1, seed=7)
    np.testing.assert_array_equal(top1.tokens, greedy.tokens)


def test_stop_tokens_end_rows_independently(model, sampler):
    _, params = model
    free = sampler.generate(params, PROMPTS, max_new_tokens=NEW).token_lists()
    stops = [free[0][2], free[3][6]]  # two stop ids, reached by rows at different steps
    out = sampler.generate(params, PROMPTS, max_new_tokens=NEW, stop_tokens=stops)
    cut = sampler.generate(params, PROMPTS, max_new_tokens=NEW, stop_tokens=stops, include_stop_token=False)
    assert "length" in out.finish_reasons or len({*out.lengths}) > 1  # rows end at different steps
    for row, toks in enumerate(free):
        hits = [j for j, t in enumerate(toks) if t in stops]
        length = hits[0] + 1 if hits else NEW
        assert out.lengths[row] == length
        assert out.finish_reasons[row] == ("stop" if hits else "length")
        assert out.token_lists()[row] == toks[:length]
        assert (out.tokens[row, length:] == 0).all() and (out.logprobs[row, length:] == 0).all()
        assert cut.token_lists()[row] == (toks[:length - 1] if hits else toks)
        assert cut.finish_reasons[row] == out.finish_reasons[row]
        np.testing.assert_array_equal(cut.logprobs[row, :cut.lengths[row]], out.logprobs[row, :cut.lengths[row]])
        assert (cut.logprobs[row, cut.lengths[row]:] == 0).all()
    assert out.finish_reasons[0] == "stop" and out.lengths[0] <= 3


def test_same_seed_same_samples_different_seed_differs(model, sampler):
    _, params = model
    kwargs = dict(max_new_tokens=NEW, temperature=1.0)
    a = sampler.generate(params, PROMPTS, seed=11, **kwargs)
    b = sampler.generate(params, PROMPTS, seed=11, **kwargs)
    c = sampler.generate(params, PROMPTS, seed=12, **kwargs)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.logprobs, b.logprobs)
    assert (a.tokens != c.tokens).any()
    big = sampler.generate(params, PROMPTS, seed=2 ** 40 + 11, **kwargs)  # 64-bit seeds use the high bits too
    assert (big.tokens != a.tokens).any()


def test_chunked_prefill_and_steps_per_sync_match_defaults(model, sampler):
    """Prefill in row chunks, and the GPU default of checking the loop exit every few steps,
    must not change results, with or without refills."""
    cfg, params = model
    free = sampler.generate(params, PROMPTS, max_new_tokens=NEW).token_lists()
    stops = [free[1][3]]
    ref = sampler.generate(params, PROMPTS, max_new_tokens=NEW - 1, stop_tokens=stops)
    other = Sampler(cfg, _single_device_mesh(), steps_per_sync=5, prefill_chunk_tokens=32)
    for slots in (None, 2):
        got = other.generate(params, PROMPTS, max_new_tokens=NEW - 1, stop_tokens=stops, slots=slots)
        np.testing.assert_array_equal(got.tokens, ref.tokens)
        np.testing.assert_array_equal(got.lengths, ref.lengths)
        assert got.finish_reasons == ref.finish_reasons
    # ("refill", R, B, P, W, N, G, rows per chunk, ...): 2 rows per chunk for 4 rows of 16 tokens.
    assert ("refill", 4, 4, 16, 16, 4, 16, 2) in {k[:8] for k in other.compiled_programs}


def test_buckets_reuse_compiled_programs(model):
    cfg, params = model
    s = Sampler(cfg, _single_device_mesh(), buckets=Buckets(prompt=(8, 32), new_tokens=(4, 8)))
    s.generate(params, [[1, 2, 3], [4, 5]], max_new_tokens=6)
    programs = s.compiled_programs
    kinds = [k[0] for k in programs]
    # Windows follow the new-token buckets: start at 4 cache slots, grow to 8 for the 6th token
    # (token i is predicted by feeding token i - 1, at generated slot i - 1).
    assert sorted(kinds) == ["decode", "decode", "refill", "resize", "start"]
    assert {k[3] for k in programs if k[0] == "decode"} == {4, 8}
    # Other prompt lengths, batch size and max_new_tokens inside the same buckets: nothing new compiles.
    s.generate(params, [[9] * 8, [3]], max_new_tokens=8)
    s.generate(params, [[1], [2, 3, 4, 5, 6, 7]], max_new_tokens=6, stop_tokens=[3, 4])
    assert s.compiled_programs == programs
    s.generate(params, [[1] * 20, [2]], max_new_tokens=3)  # a longer prompt: the 32 bucket, window 4 only
    new = s.compiled_programs[len(programs):]
    assert [k[:5] for k in new] == [("start", 2, 32, 4, 2), ("refill", 2, 2, 32, 4), ("decode", 2, 32, 4, 2)]
    with pytest.raises(ValueError, match="exceeds the largest bucket 32"):
        s.generate(params, [[1] * 33], max_new_tokens=3)


# More prompts than slots, of different lengths (the 20-token one puts the call in the 32 prompt
# bucket, while alone each short prompt is in the 16 bucket).
REFILL_PROMPTS = PROMPTS + [[1, 2], [60, 61, 62, 63, 64, 65], [99] * 20, [42], [8, 8, 8]]
REFILL_CAPS = [NEW, 3, NEW, 7, NEW, 1, NEW, 5, NEW]  # per-prompt caps: some rows end early


# Logprobs of one row from two programs (another batch layout, bucket or mesh) in float32: measured
# differences up to 8e-6 with XLA's default codegen and 1.3e-5 with the suite's level-0 codegen
# (compaction, 12 steps); 5e-5 leaves room for other CPUs, while tokens must still be equal.
ROW_LOGPROB_TOLERANCE = 5e-5


def _assert_same_row(got, i, ref, j):
    """Row i of `got` equals row j of `ref`: tokens, length, finish reason; logprobs within
    ROW_LOGPROB_TOLERANCE."""
    assert got.token_lists()[i] == ref.token_lists()[j], (i, j)
    assert got.lengths[i] == ref.lengths[j] and got.finish_reasons[i] == ref.finish_reasons[j]
    np.testing.assert_allclose(got.logprob_lists()[i], ref.logprob_lists()[j], atol=ROW_LOGPROB_TOLERANCE, rtol=0)


def _assert_same_rows(got, ref):
    assert len(got.lengths) == len(ref.lengths)
    for i in range(len(got.lengths)):
        _assert_same_row(got, i, ref, i)


@pytest.mark.slow
def test_refill_equals_per_prompt_generation(model, sampler):
    """Greedy decoding on 2 slots refilled from a queue of 9 prompts gives each prompt exactly what
    generating it alone gives: with stop tokens, with and without them in the output, and with
    per-prompt caps."""
    _, params = model
    free = sampler.generate(params, REFILL_PROMPTS, max_new_tokens=NEW).token_lists()
    stops = [free[0][2], free[3][5], free[6][8]]
    for include in (True, False):
        kwargs = dict(stop_tokens=stops, include_stop_token=include)
        got = sampler.generate(params, REFILL_PROMPTS, max_new_tokens=REFILL_CAPS, slots=2, **kwargs)
        assert got.stats.slots == 2 and got.stats.refills >= 4 and got.stats.refilled_rows == len(REFILL_PROMPTS)
        assert set(got.finish_reasons) == {"stop", "length"}
        assert got.tokens.shape == (len(REFILL_PROMPTS), NEW)
        for i, (prompt, cap) in enumerate(zip(REFILL_PROMPTS, REFILL_CAPS)):
            alone = sampler.generate(params, [prompt], max_new_tokens=cap, **kwargs)
            _assert_same_row(got, i, alone, 0)
            assert got.lengths[i] <= cap and (got.tokens[i, got.lengths[i]:] == 0).all()
        # One slot per prompt (no refill) gives the same rows too.
        _assert_same_rows(got, sampler.generate(params, REFILL_PROMPTS, max_new_tokens=REFILL_CAPS, **kwargs))


def test_sampled_streams_do_not_depend_on_slots(model, sampler):
    """A prompt draws from its own stream (seed, prompt index, step), so sampling gives the same
    tokens whether the prompts share one batch or are refilled into 2 slots."""
    _, params = model
    free = sampler.generate(params, REFILL_PROMPTS, max_new_tokens=NEW).token_lists()
    kwargs = dict(max_new_tokens=NEW, temperature=1.0, top_k=20, top_p=0.9, seed=4, stop_tokens=[free[2][1]])
    ref = sampler.generate(params, REFILL_PROMPTS, **kwargs)
    assert len(set(ref.lengths.tolist())) > 1  # rows end at different steps, so slots refill at different times
    _assert_same_rows(sampler.generate(params, REFILL_PROMPTS, slots=2, **kwargs), ref)
    other_seed = sampler.generate(params, REFILL_PROMPTS, slots=2, **{**kwargs, "seed": 5})
    assert other_seed.token_lists() != ref.token_lists()


def test_refill_keeps_slots_busy(model, sampler):
    """One long prompt and 15 short ones on 2 slots: the short ones cycle through one slot while the
    long one runs, so every decode step makes 2 tokens; without refill (batches of 2, each until its
    longest row) 7 extra steps run."""
    _, params = model
    prompts = [[i + 1, i + 2] for i in range(16)]
    caps = [16] + [2] * 15  # 15 decode steps for the first, 1 for each other (token 0 comes from the prefill)
    out = sampler.generate(params, prompts, max_new_tokens=caps, slots=2)
    assert out.lengths.tolist() == caps and out.finish_reasons == ("length",) * 16
    stats = out.stats
    assert (stats.decode_steps, stats.useful_tokens, stats.refills) == (15, 30, 15)
    assert stats.slot_use == 1.0
    batched = [sampler.generate(params, prompts[i:i + 2], max_new_tokens=caps[i:i + 2]).stats
               for i in range(0, 16, 2)]
    assert sum(s.decode_steps for s in batched) == 15 + 7 and sum(s.useful_tokens for s in batched) == 30


@pytest.mark.slow
def test_drain_compacts_live_rows_into_fewer_slots(model, sampler):
    """1 long prompt and 7 short ones on 8 slots: once the short rows end, the long row is gathered
    into 1 slot, its tokens and logprobs unchanged (greedy and sampled), and the drain computes
    fewer row-steps than 8 slots x steps; without compaction every step computes all 8."""
    cfg, params = model
    prompts = [[i + 1, i + 2, i + 3] for i in range(8)]
    caps = [NEW] + [2, 3, 2, 4, 2, 3, 2]
    for mode in ({}, dict(temperature=1.0, top_k=20, seed=3)):
        out = sampler.generate(params, prompts, max_new_tokens=caps, slots=8, **mode)
        stats = out.stats
        assert stats.compactions >= 2 and stats.slot_counts[0] == 8 and stats.slot_counts[-1] == 1
        assert stats.decode_steps == NEW - 1 and stats.useful_tokens == sum(c - 1 for c in caps)
        assert stats.computed_row_steps < 8 * stats.decode_steps and stats.slot_use > stats.fixed_slot_use
        if not mode:  # greedy: each row equals generating its prompt alone
            for i, (prompt, cap) in enumerate(zip(prompts, caps)):
                _assert_same_row(out, i, sampler.generate(params, [prompt], max_new_tokens=cap), 0)
        else:  # sampled: each prompt keeps its own stream (prompt index, step) whatever its slot
            fixed = Sampler(cfg, _single_device_mesh(), compact=False)
            ref = fixed.generate(params, prompts, max_new_tokens=caps, slots=8, **mode)
            _assert_same_rows(out, ref)
            assert ref.stats.compactions == 0 and ref.stats.computed_row_steps == 8 * ref.stats.decode_steps
    assert any(k[:3] == ("compact", 8, 4) for k in sampler.compiled_programs)


def test_shrink_fit():
    pow2 = lambda n: 1 << (n - 1).bit_length()  # noqa: E731
    assert shrink_fit(256, pow2) == 128 and shrink_fit(2, pow2) == 1 and shrink_fit(1, pow2) == 0
    by4 = lambda n: min(8, -(-pow2(n) // 4) * 4)  # noqa: E731 - never below 4 rows (data x fsdp = 4)
    assert shrink_fit(8, by4) == 4 and shrink_fit(4, by4) == 0


def test_choose_window_grows_to_need_and_shrinks_with_hysteresis():
    bucket = lambda n: max(16, 1 << (n - 1).bit_length())  # noqa: E731 - powers of two, at least 16
    assert choose_window(None, 3, bucket) == 16
    assert choose_window(16, 17, bucket) == 32
    assert choose_window(64, 40, bucket) == 64  # fits: keep
    assert choose_window(64, 20, bucket) == 64  # bucket(40) = 64 would not halve it
    assert choose_window(128, 20, bucket) == 64  # halves: shrink, keeping 2x headroom
    assert choose_window(256, 2, bucket) == 16


def test_generate_convenience_and_input_errors(model, sampler):
    cfg, params = model
    assert params_mesh(params).devices.size == 1  # load_hf without a mesh: one device; sampled there
    out = generate(cfg, params, PROMPTS, max_new_tokens=NEW)
    np.testing.assert_array_equal(out.tokens, sampler.generate(params, PROMPTS, max_new_tokens=NEW).tokens)
    with pytest.raises(ValueError, match="prompts is empty"):
        sampler.generate(params, [], max_new_tokens=4)
    with pytest.raises(ValueError, match=r"prompt 1 has token ids outside \[0, 101\)"):
        sampler.generate(params, [[1], [2, 101]], max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt 0 must be a non-empty"):
        sampler.generate(params, [[]], max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens must be an int >= 1"):
        sampler.generate(params, PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="max_new_tokens has 2 caps for 4 prompts"):
        sampler.generate(params, PROMPTS, max_new_tokens=[3, 4])
    with pytest.raises(ValueError, match=r"max_new_tokens\[1\] must be an int >= 1"):
        sampler.generate(params, PROMPTS, max_new_tokens=[3, 0, 2, 2])
    with pytest.raises(ValueError, match="slots must be an int >= 1"):
        sampler.generate(params, PROMPTS, max_new_tokens=4, slots=0)
    with pytest.raises(ValueError, match="temperature must be"):
        sampler.generate(params, PROMPTS, max_new_tokens=4, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p must be in"):
        sampler.generate(params, PROMPTS, max_new_tokens=4, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match=r"stop_tokens \[500\] are outside"):
        sampler.generate(params, PROMPTS, max_new_tokens=4, stop_tokens=[500])
    with pytest.raises(ValueError, match=r"param \['lm_head'\] has shape \(48, 5\)"):
        sampler.generate({**params, "lm_head": params["lm_head"][:, :5]}, PROMPTS, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"missing \[\"\['final_norm'\]\['scale'\]\"\]"):
        sampler.generate({k: v for k, v in params.items() if k != "final_norm"}, PROMPTS, max_new_tokens=4)


def test_token_selection_follows_the_tempered_distribution():
    logits = jnp.log(jnp.array([0.4, 0.3, 0.15, 0.1, 0.05]))[None].repeat(8192, 0)
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(jax.random.key(0), jnp.arange(8192))

    def freqs(temperature, top_k=0, top_p=1.0):
        toks, lps = jax.jit(select_tokens, static_argnames=("greedy", "top_k", "use_top_p"))(
            logits, keys, jnp.int32(0), jnp.float32(temperature), jnp.float32(top_p),
            greedy=False, top_k=top_k, use_top_p=top_p < 1.0)
        tempered = jax.nn.log_softmax(logits[0] / temperature)
        np.testing.assert_allclose(lps, tempered[toks], atol=1e-6)
        return np.bincount(np.asarray(toks), minlength=5) / 8192

    def close(f, p):
        assert 0.5 * np.abs(f - p).sum() < 0.02, (f, p)

    base = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    close(freqs(1.0), base)
    tempered = base ** 2 / (base ** 2).sum()
    close(freqs(0.5), tempered)
    close(freqs(1.0, top_k=2), np.array([4, 3, 0, 0, 0]) / 7)
    close(freqs(1.0, top_p=0.8), np.array([0.4, 0.3, 0.15, 0, 0]) / 0.85)  # 0.4 + 0.3 < 0.8: third stays
    close(freqs(1.0, top_k=3, top_p=0.5), np.array([0.4, 0.3, 0, 0, 0]) / 0.7)


@pytest.mark.slow
@pytest.mark.parametrize("mesh_shape", [dict(fsdp=4, tensor=2), dict(data=2, fsdp=4, tensor=1)],
                         ids=lambda m: "x".join(f"{k}{v}" for k, v in m.items()))
def test_sharded_sampling_equals_single_device(model, sampler, mesh_shape):
    cfg, params = model
    prompts = PROMPTS + [[1, 2], [60, 61, 62, 63, 64, 65], [99] * 9, [42]]  # 8 rows: one per data x fsdp shard
    modes = [{}, {"temperature": 1.0}]
    single = [sampler.generate(params, prompts, max_new_tokens=NEW, seed=5, **mode) for mode in modes]
    # Params sharded for a training mesh (fsdp over all 8 devices), sampled on another mesh.
    train_mesh = make_mesh(MeshConfig(data=1, fsdp=8, tensor=1))
    train_params = shard_params(params, param_shardings(cfg, train_mesh))
    sampling_mesh = make_mesh(MeshConfig(**mesh_shape))
    sharded_sampler = Sampler(cfg, sampling_mesh, prefill_chunk_tokens=16)  # fsdp4: 2 chunks of 4 rows
    placed = sharded_sampler.prepare_params(train_params)
    q = placed.tree["layers"][0]["attn"]["q_kernel"]
    assert q.sharding.mesh == sampling_mesh and len(q.sharding.device_set) == 8
    stops = [single[0].tokens[1][4]]  # rows end at different steps, so refills happen mid-run
    for mode, ref in zip(modes, single):
        got = sharded_sampler.generate(placed, prompts, max_new_tokens=NEW, seed=5, **mode)
        np.testing.assert_array_equal(got.tokens, ref.tokens)
        # another mesh is another program: measured 1.05e-5 on an AMD EPYC (the row tolerance's case)
        np.testing.assert_allclose(got.logprobs, ref.logprobs, atol=ROW_LOGPROB_TOLERANCE, rtol=0)
        assert got.finish_reasons == ref.finish_reasons
        # 12 prompts on 8 slots (one per data x fsdp shard): refilled slots on every shard.
        more = prompts + [[7, 7], [50, 51, 52], [3] * 12, [90]]
        ref_more = sampler.generate(params, more, max_new_tokens=NEW, seed=5, stop_tokens=stops, **mode)
        got_more = sharded_sampler.generate(placed, more, max_new_tokens=NEW, seed=5, stop_tokens=stops, slots=8,
                                            **mode)
        assert got_more.stats.refills >= 2
        _assert_same_rows(got_more, ref_more)
