"""export/llamacpp.py without llama.cpp: what it says when it cannot run, and how it compares tokens
(tests/export/test_export.py runs llama.cpp itself on exported files)."""

import pytest

from genenv_jax.export import llamacpp


def test_a_missing_install_is_named_with_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("GENENV_LLAMACPP_DIR", str(tmp_path))
    reason = llamacpp.unavailable_reason()
    if reason and "node (not on PATH)" in reason:
        pytest.skip(reason)
    assert reason == f"llama.cpp checks need node-llama-cpp in {tmp_path / 'node_modules'} (`make llamacpp` installs it)"
    with pytest.raises(llamacpp.LlamaCppUnavailable, match="make llamacpp"):
        llamacpp.greedy(tmp_path / "model.gguf", [[1, 2]], 4)


def test_a_kv_type_llama_cpp_does_not_offer_here_is_refused():
    with pytest.raises(ValueError, match="kv_type 'Q4_0'"):
        llamacpp.greedy("model.gguf", [[1]], 1, kv_type="Q4_0")


def test_first_difference():
    assert llamacpp.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert llamacpp.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert llamacpp.first_difference([1, 2], [1, 2, 3]) == 2


def test_second_choice_is_the_runner_up_for_the_next_token():
    """After `prompt + generated[:k]`: the runner-up and its gap in the logits row that predicts
    token k (one full forward over the whole sequence, numpy's top two)."""
    import jax.numpy as jnp
    import numpy as np

    from genenv_jax.models import forward, preset
    from tests.support.random_params import random_params

    cfg = preset("micro")
    params = random_params(cfg, 0)
    prompt, generated = [5, 9, 2], [7, 1, 4]
    logits = np.asarray(forward(cfg, params, jnp.asarray([prompt + generated])))[0]  # [T, V]
    for k in range(len(generated)):
        row = logits[len(prompt) + k - 1]
        second, first = np.argsort(row)[-2:]
        runner_up, margin = llamacpp.second_choice(cfg, params, prompt, generated[:k])
        assert runner_up == second  # the gaps here are 0.02-0.05: far above float32 rounding
        assert margin >= 0 and margin == pytest.approx(row[first] - row[second], abs=1e-5)  # float32 rounding
