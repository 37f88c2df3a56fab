"""The loop's held-out evaluation runs the evaluation command's code: for the same params, tasks
(`--max_per_category`, `--sample_seed`) and decode slots (`--batch_size`) every item's reply and
verdict equal the command's; the items are written per epoch, and a starting agent evaluated once
is reused from the warm-start cache."""

from __future__ import annotations

import json

import jax
import pytest

from genenv_jax.configs import base
from genenv_jax.configs import bfcl as bfcl_configs
from genenv_jax.configs.run_config import RunConfig
from genenv_jax.evaluation.evaluate import evaluate_params
from genenv_jax.loop import CoEvolution
from genenv_jax.loop.heldout import heldout_tasks
from genenv_jax.loop.policy import Placement


def _config(tmp_path, **overrides) -> RunConfig:
    c = bfcl_configs.get_config("tiny")
    c.domain.options.categories = ("simple_python", "irrelevance")
    c.warmstart.enabled = False
    c.evaluation.split, c.evaluation.max_per_category, c.evaluation.sample_seed = "test", 3, 0
    c.agent.sampling.max_new_tokens, c.agent.sampling.batch_size = 12, 4
    base.apply(c, overrides)
    return RunConfig.from_config_dict(c, num_devices=jax.device_count())


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("heldout")
    co = CoEvolution(_config(tmp, **{"warmstart.cache_dir": str(tmp / "cache")}), tmp / "run")
    yield co, co.fresh_state(), tmp
    co.environments.close()
    co.checkpointer.close()


def _items(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_heldout_items_equal_the_evaluation_commands(loop):
    co, state, tmp = loop
    tasks = heldout_tasks(co.ctx)
    assert [t.category for t in tasks] == ["simple_python"] * 3 + ["irrelevance"] * 3
    metrics = co.heldout.metrics(Placement(co.agent, state.agent), epoch=0)
    mine = _items(tmp / "run" / "heldout" / "epoch_0000.jsonl")
    # The command's library call, as `python -m genenv_jax.evaluation --split=test --max_per_category=3
    # --sample_seed=0 --batch_size=4 --max_new_tokens=12` runs it, on the same initial params.
    report = evaluate_params(co.agent.cfg, co.weights.initial()[0], co.ctx.domain, tasks, co.ctx.text.tokenizer,
                             max_new_tokens=12, batch_size=4, max_turns=co.config.episodes.max_turns, progress=False)
    command = [dict(task_id=it.task_id, category=it.category, reward=it.reward, response=it.response)
               for it in report.items]
    assert [{k: it[k] for k in ("task_id", "category", "reward", "response")} for it in mine] == command
    assert any(it["response"] for it in mine)  # something was decoded
    assert metrics["heldout/accuracy"] == pytest.approx(sum(it.reward for it in report.items) / 6)
    assert metrics["heldout/irrelevance"] == report.per_category["irrelevance"]["accuracy"]


def test_the_starting_evaluation_is_cached(loop):
    co, state, tmp = loop
    identity = {"trained": "same-weights"}
    first = co.heldout.cached_metrics(Placement(co.agent, state.agent), -1, str(tmp / "cache"), identity)
    again = co.heldout.cached_metrics(Placement(co.agent, state.agent), -1, str(tmp / "cache"), identity)
    assert first.pop("heldout/cached") == 0 and again.pop("heldout/cached") == 1 and first == again
    assert len(list((tmp / "cache").glob("heldout-*.json"))) == 1
    assert len(_items(tmp / "run" / "heldout" / "start.jsonl")) == 6
    co.heldout.cached_metrics(Placement(co.agent, state.agent), -1, str(tmp / "cache"), {"trained": "other-weights"})
    assert len(list((tmp / "cache").glob("heldout-*.json"))) == 2  # other weights: evaluated anew


def test_a_sample_seed_draws_the_commands_sample(tmp_path):
    from genenv_jax.domains import get_domain
    from genenv_jax.evaluation import select_tasks
    from genenv_jax.loop.context import LoopContext

    config = _config(tmp_path, **{"evaluation.max_per_category": 5, "evaluation.sample_seed": 7})
    domain = get_domain("bfcl", **config.domain.options)
    ctx = LoopContext(config, domain, None, domain.seeds("train"))
    assert [t.task_id for t in heldout_tasks(ctx)] == [t.task_id for t in select_tasks(domain.seeds("test"), 5, None, 7)]
    first = _config(tmp_path, **{"evaluation.max_per_category": 5, "evaluation.sample_seed": -1})
    ctx = LoopContext(first, domain, None, domain.seeds("train"))
    assert [t.task_id for t in heldout_tasks(ctx)] == [t.task_id for t in select_tasks(domain.seeds("test"), 5)]
