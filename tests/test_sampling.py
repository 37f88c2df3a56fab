"""KV-cache sampler: HF generate parity, cached vs full-forward logits, logprobs, sampling modes,
stop tokens, seeds, buckets, and sharded sampling on 8 CPU devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from decode_reference import teacher_forced_logits
from genenv_jax.models import forward, load_hf, param_shardings, shard_params
from genenv_jax.parallel import MeshConfig, make_mesh
from genenv_jax.sampling import Buckets, Sampler, generate, params_mesh, select_tokens
from hf_reference import make_hf_model, save_hf_model

# Different lengths, so the batch is left-padded; 4 rows, all in the (4, 16, 16) buckets.
PROMPTS = [[5, 9, 13], [7, 8, 9, 10, 11, 12, 13, 40, 41, 42, 43], [20], [3, 4, 5, 6, 7]]
NEW = 12


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
    must not change results."""
    cfg, params = model
    free = sampler.generate(params, PROMPTS, max_new_tokens=NEW).token_lists()
    stops = [free[1][3]]
    ref = sampler.generate(params, PROMPTS, max_new_tokens=NEW - 1, stop_tokens=stops)
    other = Sampler(cfg, _single_device_mesh(), steps_per_sync=5, prefill_chunk_tokens=32)
    got = other.generate(params, PROMPTS, max_new_tokens=NEW - 1, stop_tokens=stops)
    assert ("prefill", 4, 16, 32, 2) in other.compiled_programs  # 2 rows per chunk: 2 chunks
    np.testing.assert_array_equal(got.tokens, ref.tokens)
    np.testing.assert_array_equal(got.lengths, ref.lengths)
    assert got.finish_reasons == ref.finish_reasons


def test_buckets_reuse_compiled_programs(model):
    cfg, params = model
    s = Sampler(cfg, _single_device_mesh(), buckets=Buckets(prompt=(8, 32), new_tokens=(4, 8)))
    s.generate(params, [[1, 2, 3], [4, 5]], max_new_tokens=5)
    programs = s.compiled_programs
    assert len(programs) == 2  # one prefill, one decode
    # Other prompt lengths, batch size and max_new_tokens inside the same buckets: nothing new compiles.
    s.generate(params, [[9] * 8, [3]], max_new_tokens=8)
    s.generate(params, [[1], [2, 3, 4, 5, 6, 7]], max_new_tokens=6, stop_tokens=[3, 4])
    assert s.compiled_programs == programs
    s.generate(params, [[1] * 20, [2]], max_new_tokens=3)  # a longer prompt: the 32 bucket
    assert len(s.compiled_programs) == 4 and ("prefill", 2, 32, 36, 2) in s.compiled_programs
    with pytest.raises(ValueError, match="exceeds the largest bucket 32"):
        s.generate(params, [[1] * 33], max_new_tokens=3)


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
    for mode, ref in zip(modes, single):
        got = sharded_sampler.generate(placed, prompts, max_new_tokens=NEW, seed=5, **mode)
        np.testing.assert_array_equal(got.tokens, ref.tokens)
        np.testing.assert_allclose(got.logprobs, ref.logprobs, atol=1e-5)
        assert got.finish_reasons == ref.finish_reasons
