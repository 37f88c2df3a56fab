"""The co-evolution loop end to end on a toy domain: resume equality, modes, failures, HF model dirs."""

import collections
import json

import jax
import numpy as np
import pytest

from genenv_jax.rl import curriculum
from genenv_jax import domains
from genenv_jax.loop import CoEvolution, NonFiniteLossError, SeedStats
from genenv_jax.loop.tasks import choose_seeds
from genenv_jax.evaluation import load_run_agent
from tests.support.loop_configs import TOY_PRESET, TOY_TOKENIZER, toy_config


pytestmark = pytest.mark.usefixtures("toy_domain")  # conftest.py registers the toy domain


def _params_equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted_run(tmp_path):
    full = CoEvolution(toy_config(), tmp_path / "full")
    rows = full.run()
    assert [r["epoch"] for r in rows] == [0, 1]
    assert rows[0]["generated"] == 4 and rows[0]["tasks"] + sum(
        v for k, v in rows[0].items() if k.startswith("rejected/")) == 4
    assert "agent/loss" in rows[0] and np.isfinite(rows[0]["agent/loss"])
    assert 0 <= rows[0]["agent/groups_constant"] <= rows[0]["tasks"] + rows[0]["replayed_tasks"]
    assert (tmp_path / "full" / "curves.png").exists() and (tmp_path / "full" / "summary.md").exists()

    CoEvolution(toy_config(epochs=1), tmp_path / "split").run()  # stopped after epoch 0
    resumed = CoEvolution(toy_config(), tmp_path / "split")
    resumed.run()                                                 # restarts at epoch 1
    assert _params_equal(full.final_state.agent.params, resumed.final_state.agent.params)
    assert _params_equal(full.final_state.simulator.params, resumed.final_state.simulator.params)
    for name in ("d_train", "d_env"):
        assert full.pools[name].records() == resumed.pools[name].records(), name
    metrics = [json.loads(line) for line in (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [0, 1]
    assert any(r.get("simulator/steps", 0) > 0 for r in rows)  # RWR ran on in-band tasks

    # The evaluator reads the run's checkpointed agent (`--run_dir`).
    cfg, params, epoch = load_run_agent(tmp_path / "full")
    assert epoch == 1 and cfg == full.agent.cfg
    assert _params_equal(params, full.final_state.agent.params)


def test_random_mode_never_updates_the_simulator_and_rejections_are_counted(tmp_path):
    loop = CoEvolution(toy_config(mode="random", epochs=1, **{"domain.options": {"reject_all": True}}),
                       tmp_path / "run")
    before = jax.tree.map(np.asarray, loop.fresh_state().simulator.params)
    rows = loop.run()
    assert rows[0]["tasks"] == 0 and rows[0]["rejected/no_number"] == 4  # an all-rejected epoch completes
    assert rows[0]["replayed_tasks"] == 2 and "agent/loss" in rows[0]     # replayed seeds still train the agent
    assert _params_equal(before, loop.final_state.simulator.params)
    assert loop.pools["d_env"].epochs == [0] and loop.pools["d_env"].num_records() == 0


def test_non_finite_loss_stops_before_saving(tmp_path, monkeypatch):
    loop = CoEvolution(toy_config(epochs=1), tmp_path / "run")
    real_update = loop.agent.update

    class PoisonedStep:  # the real step, with its loss replaced by NaN
        def __getattr__(self, name):
            return getattr(real_update, name)

        def __call__(self, params, opt_state, batch, frozen=None):
            params, opt_state, metrics = real_update(params, opt_state, batch, frozen)
            return params, opt_state, {**metrics, "loss": float("nan")}

    monkeypatch.setattr(loop.agent, "update", PoisonedStep())
    with pytest.raises(NonFiniteLossError, match="agent update: non-finite loss nan"):
        loop.run()
    assert loop.checkpointer.latest_epoch() is None


@pytest.mark.slow
def test_loop_runs_from_hf_model_dirs(tmp_path):
    """The paper's setup: agent and simulator weights from (different) HF dirs, tokenizer from the agent's."""
    from genenv_jax.text import tokenization
    from genenv_jax.models import init_params, preset, save_hf

    cfg = preset(TOY_PRESET)
    dirs = {}
    for name, seed in (("agent", 0), ("simulator", 1)):
        dirs[name] = tmp_path / name
        save_hf(cfg, init_params(cfg, jax.random.key(seed)), dirs[name])
    tokenization.load_tokenizer(TOY_TOKENIZER).save_pretrained(dirs["agent"])
    c = toy_config(epochs=1, **{"agent.model_dir": str(dirs["agent"]), "simulator.model_dir": str(dirs["simulator"]),
                                "simulator.share_agent_init": False, "tokenizer_dir": ""})
    loop = CoEvolution(c, tmp_path / "run")
    assert tokenization.has_tokenizer_files(dirs["agent"]) and loop.ctx.text.tokenizer.name_or_path == str(dirs["agent"])
    initial_agent, initial_env = loop.weights.initial()
    assert _params_equal(initial_agent, init_params(cfg, jax.random.key(0)))
    assert _params_equal(initial_env, init_params(cfg, jax.random.key(1)))
    rows = loop.run()
    assert rows[0]["tasks"] > 0 and np.isfinite(rows[0]["agent/loss"])


def _fake_ctx(config, seed_ids):
    """A context with bare seeds, enough for seed choice."""
    from genenv_jax.domains.base import Task
    from genenv_jax.loop.context import LoopContext

    seeds = [Task(domain="toy", task_id=s, category="say", prompt={"question": s}, verifier={"answer": s})
             for s in seed_ids]
    return LoopContext(config, domain=None, text=None, train_seeds=seeds)


def test_seed_selection_uses_rollout_reward_variance_after_the_first_epoch():
    """A seed whose variants' rollouts split between success and failure is picked by variance
    right after its first measured epoch (its success-rate history has a single entry then)."""
    ctx = _fake_ctx(toy_config(**{"seed_selection.explore_fraction": 0.0}), ["a", "b", "c", "d"])
    records = [{"task_id": "a/1", "seed_id": "a", "rewards": [1.0, 0.0]},
               {"task_id": "b/1", "seed_id": "b", "rewards": [1.0, 1.0]},
               {"task_id": "c/1", "seed_id": "c", "rewards": [0.0, 0.0]}]
    scores = curriculum.score_tasks(records, ctx.config.curriculum)
    state = CoEvolution.__new__(CoEvolution)  # only the seed-stats bookkeeping is exercised
    from genenv_jax.loop.state import LoopState
    loop_state = LoopState(epoch=0, agent=None, simulator=None)
    state._update_seed_stats(loop_state, scores, curriculum.seed_variances(records))
    assert loop_state.seeds["a"] == SeedStats(recent_success=[0.5], reward_variance=0.25)
    assert loop_state.seeds["b"].reward_variance == 0.0 and len(loop_state.seeds["b"].recent_success) == 1
    picks = [s.task_id for s in choose_seeds(ctx, 1, loop_state.seeds, 1)]
    assert picks == ["a"]
    counts = collections.Counter(s.task_id for e in range(1, 6) for s in choose_seeds(ctx, e, loop_state.seeds, 2))
    assert counts["a"] == 5  # always first by variance; the second slot is a refill / explore draw


def test_curriculum_alpha_and_band_steer_the_simulator_prompt():
    """The domain is given alpha and the band from `curriculum`, never copies of them."""
    from genenv_jax.loop.tasks import simulator_request
    from genenv_jax.configs import bfcl

    bfcl_domain = domains.get_domain("bfcl", categories=("simple_python",))
    seed = bfcl_domain.seeds("train")[0]
    stats = {seed.task_id: SeedStats(recent_success=[0.4])}

    def request(**overrides):
        c = bfcl.get_config("tiny")
        for key, value in overrides.items():
            section, name = key.split(".")
            c[section][name] = value
        from genenv_jax.configs.run_config import RunConfig
        ctx = _fake_ctx(RunConfig.from_config_dict(c), [seed.task_id])
        ctx.domain = bfcl_domain
        return simulator_request(ctx, seed, stats)

    prompt, direction = request(**{"curriculum.alpha": 0.3, "curriculum.k_min": 0.05})
    assert direction == "harder" and "30%" in prompt.messages[-1]["content"]
    prompt, direction = request(**{"curriculum.alpha": 0.7, "curriculum.k_min": 0.05})
    assert direction == "easier" and "70%" in prompt.messages[-1]["content"]
    _, direction = request(**{"curriculum.alpha": 0.5, "curriculum.k_min": 0.1})
    assert direction == "similar"  # |0.4 - 0.5| <= 0.1


def test_exceptions_in_parsing_and_scoring_are_counted_and_the_run_goes_on(tmp_path, monkeypatch):
    from tests.support.toy_domain import ToyDomain

    def parse_task(self, text, seed, difficulty=None):
        raise RecursionError("maximum recursion depth exceeded")

    def score_details(self, task, response):
        raise KeyError("ground_truth")

    monkeypatch.setattr(ToyDomain, "parse_task", parse_task)
    monkeypatch.setattr(ToyDomain, "score_details", score_details)
    rows = CoEvolution(toy_config(epochs=1), tmp_path / "run").run()
    assert rows[0]["tasks"] == 0 and rows[0]["rejected/parser_exception:RecursionError"] == 4
    assert rows[0]["score_failed/env_exception:KeyError"] == 2 * 2  # the 2 replayed seeds x 2 rollouts
    assert rows[0]["success_rate"] is None and "agent/loss" in rows[0]
