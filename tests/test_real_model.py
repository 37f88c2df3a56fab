"""Real-weight checks on the downloaded Qwen2.5-Coder-0.5B-Instruct (`python -m genenv_jax.data.download
qwen2.5-coder-0.5b-instruct --dest DIR`): our float32 forward against HF transformers on the same HF
directory, greedy decoding against HF `generate`, and `load_gguf(DIR/model.gguf)` against `load_hf(DIR)`.

They run in `make test-full` (marker `full`; `pretrained`: they need the real weights) whenever the download is present: in the model
cache (`genenv_jax.data.model_sources.model_cache_dir`) or at `$GENENV_REAL_MODEL_DIR`. About 2.5
minutes on 2 cores, so not in `make test`'s 20-minute budget. Measured figures go to stdout (-s).
"""

import os

import jax
import numpy as np
import pytest

from genenv_jax.data.model_download import MODELS, is_complete
from genenv_jax.data.model_sources import model_cache_dir

NAME = "qwen2.5-coder-0.5b-instruct"
MODEL_DIR = os.environ.get("GENENV_REAL_MODEL_DIR") or str(model_cache_dir(NAME))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.full(reason="real-weight checks run in make test-full"),
    pytest.mark.pretrained,
    pytest.mark.skipif(not is_complete(MODELS[NAME], MODEL_DIR), reason=f"the real model is not downloaded to {MODEL_DIR}"),
]


@pytest.fixture(scope="module")
def bfcl_prompts():
    from genenv_jax.text.chat_text import ChatText
    from genenv_jax.domains import get_domain

    domain = get_domain("bfcl")
    text = ChatText.load(MODEL_DIR)
    seeds = domain.seeds("all")
    by_category = {}
    for task in seeds:
        by_category.setdefault(task.category, []).append(task)
    chosen = [by_category[c][i] for c in ("simple_python", "multiple", "parallel", "parallel_multiple") for i in (0, 1)]
    return text, [text.prompt(domain.agent_prompt(t)) for t in chosen]


@pytest.fixture(scope="module")
def ours():
    from genenv_jax.models.loading import load_model

    return load_model(MODEL_DIR, dtype="float32")


@pytest.fixture(scope="module")
def hf_model():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()


def test_float32_logits_match_hf_on_three_bfcl_prompts(bfcl_prompts, ours, hf_model):
    import jax.numpy as jnp
    import torch

    from genenv_jax.models import forward

    cfg, params = ours
    _, prompts = bfcl_prompts
    worst = []
    for ids in prompts[:3]:
        mine = np.asarray(forward(cfg, params, jnp.asarray([ids], jnp.int32))[0])
        with torch.no_grad():
            theirs = hf_model(torch.tensor([ids])).logits[0].numpy()
        worst.append(float(np.abs(mine - theirs).max()))
        assert (mine.argmax(-1) == theirs.argmax(-1)).mean() > 0.99
    print(f"\nmax |logit difference| ours vs HF (float32), 3 BFCL prompts of {[len(p) for p in prompts[:3]]} tokens: "
          f"{[f'{w:.2e}' for w in worst]}")
    assert max(worst) < 5e-3


def test_greedy_64_tokens_equal_hf_generate_on_8_bfcl_prompts(bfcl_prompts, ours, hf_model):
    import torch

    from genenv_jax.sampling import generate

    cfg, params = ours
    text, prompts = bfcl_prompts
    out = generate(cfg, params, prompts, max_new_tokens=64, pad_id=text.pad_id, temperature=0.0,
                   stop_tokens=list(text.stop_ids), seed=0)
    same = 0
    for row, ids in zip(out.token_lists(), prompts):
        with torch.no_grad():
            hf = hf_model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False, eos_token_id=list(text.stop_ids),
                                   pad_token_id=text.pad_id, temperature=None, top_p=None, top_k=None)
        same += list(row) == hf[0, len(ids):].tolist()
    print(f"\ngreedy 64 tokens equal to HF generate on {same}/8 BFCL prompts")
    assert same == 8


def test_load_gguf_of_the_file_equals_load_hf_of_the_directory(ours):
    from genenv_jax.models import load_gguf

    cfg, params = ours
    gguf_cfg, gguf_params = load_gguf(os.path.join(MODEL_DIR, "model.gguf"))
    assert gguf_cfg == cfg
    jax.tree.map(np.testing.assert_array_equal, gguf_params, params)
