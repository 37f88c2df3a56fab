"""LoRA adapters exported for the PEFT library: `peft.PeftModel` on the HF base gives our adapted
logits, transformers loads our merged weights to the same logits, and the directory reads back."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from genenv_jax.models import forward, load_hf, save_hf  # noqa: E402
from genenv_jax.models.lora import LoRAConfig, init_adapters, merge, with_adapters  # noqa: E402
from genenv_jax.models.peft_io import load_peft_adapters, save_peft_adapters  # noqa: E402
from tests.support.hf_reference import make_hf_model, save_hf_model  # noqa: E402
from tests.support.random_params import with_random_b  # noqa: E402

LORA = LoRAConfig(rank=4, alpha=12.0)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("peft")
    base_dir = save_hf_model(make_hf_model(std=0.1), root / "base")
    cfg, params = load_hf(base_dir)
    cfg = cfg.replace(lora_scale=LORA.scale)
    adapters = with_random_b(init_adapters(cfg, LORA, jax.random.key(0)), seed=1, std=0.1)
    tokens = np.random.RandomState(0).randint(3, cfg.vocab_size, (2, 11))
    ours = np.asarray(forward(cfg, with_adapters(params, adapters), jnp.asarray(tokens)))
    return root, base_dir, cfg, params, adapters, tokens, ours


def _hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


def test_peft_on_the_hf_base_gives_our_adapted_logits(setup):
    from transformers import AutoModelForCausalLM

    root, base_dir, cfg, params, adapters, tokens, ours = setup
    adapter_dir = save_peft_adapters(root / "adapter", cfg, adapters, LORA, base_model=base_dir)
    hf = AutoModelForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).eval()
    base_logits = _hf_logits(hf, tokens)
    model = peft.PeftModel.from_pretrained(hf, str(adapter_dir)).eval()
    theirs = _hf_logits(model, tokens)
    assert np.abs(theirs - base_logits).max() > 1e-2  # the adapters change the logits
    np.testing.assert_allclose(theirs, ours, atol=1e-5, rtol=0)


def test_transformers_loads_our_merged_weights_to_the_same_logits(setup):
    from transformers import AutoModelForCausalLM

    root, _, cfg, params, adapters, tokens, ours = setup
    save_hf(cfg, merge(params, adapters, LORA.scale), root / "merged")
    hf = AutoModelForCausalLM.from_pretrained(str(root / "merged"), torch_dtype=torch.float32).eval()
    np.testing.assert_allclose(_hf_logits(hf, tokens), ours, atol=1e-5, rtol=0)


def test_the_adapter_directory_reads_back(setup, tmp_path):
    root, _, cfg, params, adapters, tokens, ours = setup
    directory = save_peft_adapters(tmp_path / "a", cfg, adapters, LORA)
    lora, back = load_peft_adapters(directory, cfg)
    assert lora == LORA
    for a, b in zip(jax.tree.leaves(adapters), jax.tree.leaves(back)):
        np.testing.assert_array_equal(np.asarray(a), b)
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        load_peft_adapters(tmp_path, cfg)
    (directory / "adapter_config.json").write_text('{"peft_type": "IA3"}')
    with pytest.raises(ValueError, match="only plain LoRA"):
        load_peft_adapters(directory, cfg)
