"""Real-weight checks on the downloaded Qwen2.5-Coder-0.5B-Instruct (`python -m genenv_jax.data.download
qwen2.5-coder-0.5b-instruct --dest DIR`): our float32 forward against HF transformers on the same HF
directory, greedy decoding against HF's greedy choice at every step, and `load_gguf(DIR/model.gguf)` against `load_hf(DIR)`.

They need the download (marker `pretrained`; `make test` fetches it first): in the model cache
(`genenv_jax.data.model_sources.model_cache_dir`) or at `$GENENV_REAL_MODEL_DIR`; without it they
skip and say where they looked. Measured figures go to stdout (-s).
"""

import os

import jax
import numpy as np
import pytest

from genenv_jax.data.model_download import MODELS, is_complete
from genenv_jax.data.model_sources import model_cache_dir

NAME = "qwen2.5-coder-0.5b-instruct"
MODEL_DIR = os.environ.get("GENENV_REAL_MODEL_DIR") or str(model_cache_dir(NAME))
LOGIT_TOLERANCE = 5e-3  # max |logit difference| ours vs HF in float32 allowed on the BFCL prompts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.pretrained,
    pytest.mark.skipif(not is_complete(MODELS[NAME], MODEL_DIR), reason=f"the real model is not downloaded to {MODEL_DIR}"),
]


@pytest.fixture(scope="module")
def bfcl_prompts():
    from genenv_jax.text.chat_text import ChatText
    from genenv_jax.domains import get_domain

    domain = get_domain("bfcl")
    text = ChatText.load(MODEL_DIR)
    categories = ("simple_python", "multiple", "parallel", "parallel_multiple")
    by_category = {c: [] for c in categories}
    for task in domain.seeds("all"):
        if task.category in by_category:
            by_category[task.category].append(text.prompt(domain.agent_prompt(task)))
    # The shortest prompt of each category (207-337 tokens: one 384-token prompt bucket; the two
    # shortest of each reach 386 tokens and a 512 bucket, 2.7x the prefill of 4 rows).
    return text, [min(by_category[c], key=len) for c in categories]


@pytest.fixture(scope="module")
def ours():
    from genenv_jax.models.loading import load_model

    return load_model(MODEL_DIR, dtype="float32")


@pytest.fixture(scope="module")
def hf_model():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()


def test_float32_logits_match_hf_on_four_bfcl_prompts(bfcl_prompts, ours, hf_model):
    """One forward of ours over the four prompts, right-padded to the longest (causal attention: a
    real position never sees the padding after it), against HF's forward of each prompt alone."""
    import jax.numpy as jnp
    import torch

    from genenv_jax.models import forward

    cfg, params = ours
    text, prompts = bfcl_prompts
    width = max(map(len, prompts))
    batch = np.array([ids + [text.pad_id] * (width - len(ids)) for ids in prompts], np.int32)
    logits = np.asarray(forward(cfg, params, jnp.asarray(batch)))  # [4, width, V]
    worst = []
    for row, ids in enumerate(prompts):
        mine = logits[row, :len(ids)]
        with torch.no_grad():
            theirs = hf_model(torch.tensor([ids])).logits[0].numpy()
        worst.append(float(np.abs(mine - theirs).max()))
        assert (mine.argmax(-1) == theirs.argmax(-1)).mean() > 0.99
    print(f"\nmax |logit difference| ours vs HF (float32), 4 BFCL prompts of {[len(p) for p in prompts]} tokens: "
          f"{[f'{w:.2e}' for w in worst]}")
    assert max(worst) < LOGIT_TOLERANCE


def test_greedy_64_tokens_are_hf_greedy_on_4_bfcl_prompts(bfcl_prompts, ours, hf_model):
    """Each of our greedy tokens is the token HF's model picks greedily after the same prefix:
    HF's logits come from one teacher-forced forward over prompt + our reply (what `generate`
    computes step by step with a KV cache, at ~1/10 of the cost on 2 cores), so every step is
    checked, stop token included, and a reply that is all argmax is HF's greedy reply. A step
    may pick another token only at a near-tie, where HF's own top two logits lie within the logit
    tolerance, which another CPU's summation order can flip (docs/reliability.md, "Float
    exactness audit"); at least 3 of the 4 rows must have none."""
    import torch

    from genenv_jax.sampling import generate

    cfg, params = ours
    text, prompts = bfcl_prompts
    out = generate(cfg, params, prompts, max_new_tokens=64, pad_id=text.pad_id, temperature=0.0,
                   stop_tokens=list(text.stop_ids), seed=0)
    whole, ties = 0, []
    for row, reason, ids in zip(out.token_lists(), out.finish_reasons, prompts):
        mine = list(row)
        assert len(mine) == 64 or (reason == "stop" and mine[-1] in text.stop_ids), (len(mine), reason)
        with torch.no_grad():
            logits = hf_model(torch.tensor([ids + mine])).logits[0, len(ids) - 1:-1].numpy()  # [len(mine), V]
        picked = logits[np.arange(len(mine)), mine]
        gaps = logits.max(-1) - picked  # 0 where our token is HF's argmax
        off = np.flatnonzero(gaps > 0)
        whole += off.size == 0
        ties.extend(float(g) for g in gaps[off])
        assert (gaps < LOGIT_TOLERANCE).all(), f"step {int(gaps.argmax())} is {gaps.max():.2e} below HF's best logit"
    print(f"\ngreedy 64 tokens are HF's greedy choice at every step on {whole}/4 BFCL prompts; near-ties: {ties}")
    assert whole >= 3  # a near-tie is rare: most rows must be HF's greedy reply whole


def test_load_gguf_of_the_file_equals_load_hf_of_the_directory(ours):
    from genenv_jax.models import load_gguf

    cfg, params = ours
    gguf_cfg, gguf_params = load_gguf(os.path.join(MODEL_DIR, "model.gguf"))
    assert gguf_cfg == cfg
    jax.tree.map(np.testing.assert_array_equal, gguf_params, params)
