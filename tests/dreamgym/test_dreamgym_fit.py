"""`python -m genenv_jax.dreamgym.fit_experience` end to end on two small generated ALFWorld games
(the optional extra; skips without it): collection, tokenizer, replay buffer, SFT, held-out scoring.
The baselines are checked against what the engine says about the held-out steps: the engine answers
"Nothing happens." exactly to inadmissible commands, and rewards only winning steps."""

import json

import pytest

EXTRA = "needs the optional ALFWorld extra (make alfworld)"
pytest.importorskip("alfworld", reason=EXTRA)
pytest.importorskip("textworld", reason=EXTRA)
pytest.importorskip("fast_downward", reason=EXTRA)
pytestmark = pytest.mark.alfworld  # needs the optional engine (make alfworld)

from genenv_jax.dreamgym import fit_experience  # noqa: E402




@pytest.mark.slow
def test_fit_and_score_on_held_out_games(tmp_path):
    s = fit_experience.FitSettings(
        train_games=2, heldout_games=1, task_types=("pick_and_place_simple",), random_per_task=1, random_steps=4,
        invalid_prob=0.3, preset="study-1m", vocab_size=512, steps=2, batch_size=2, learning_rate=1e-3, top_k=2,
        reasoning=True, max_history=1, max_prompt_len=512, max_new_tokens=16, max_heldout=6, seed=0)
    results = fit_experience.run(s, tmp_path)
    json.dumps(results)  # what main writes to results.json
    data = results["data"]
    n = data["heldout_transitions"]
    assert 0 < n <= 6 and data["train_transitions"] == data["sft_rows"] and data["prompt_tokens_max"] <= 512
    assert results["baseline_nothing"]["next_state_exact"] == pytest.approx(data["heldout_invalid"] / n)
    for name in ("baseline_nothing", "baseline_repeat"):
        assert results[name]["reward_accuracy"] == pytest.approx(1 - data["heldout_reward_1"] / n)
    model = results["experience_model"]
    assert 0 <= model["parse_rate"] <= 1 and 0 <= model["next_state_exact"] <= model["parse_rate"]
    assert sum(results["prediction_failures"].values()) == round((1 - model["parse_rate"]) * n)
    assert results["sft"]["experience/sft_rows"] == data["sft_rows"]
    assert "| experience model |" in fit_experience.table(results)


def test_importing_the_command_leaves_the_main_programs_flags_alone():
    """fit_experience defines its flags only when run as a program (else importing it beside
    genenv_jax.main, as pytest workers do, fails with DuplicateFlagError on --workdir)."""
    import importlib

    from absl import flags
    importlib.import_module("genenv_jax.main")  # defines --workdir and --config
    assert "train_games" not in flags.FLAGS and "workdir" in flags.FLAGS
