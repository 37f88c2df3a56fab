"""mode=dreamgym end to end on ALFWorld's real engine (tiny models, two generated games): a synthetic
epoch answered by the experience model, then a real (sim-to-real) epoch; the replay buffer seeded
with offline transitions and grown with synthetic ones; a run resumed after its first epoch equals
an uninterrupted one. The experience model's sampler is scripted (a random tiny model writes no
readable reply), so synthetic steps, outcome rewards and failure states are all exercised and
checkable; its SFT, retrieval and prompts are the real ones. Skips without the optional extra."""

import hashlib
import json
import re
import shutil

import jax
import numpy as np
import pytest

pytest.importorskip("alfworld", reason="needs the optional ALFWorld extra: pip install -e '.[alfworld]'")
pytest.importorskip("fast_downward", reason="needs the optional ALFWorld extra: pip install -e '.[alfworld]'")
pytestmark = pytest.mark.alfworld  # needs the optional engine (make alfworld)

from genenv_jax.core.config_checks import ConfigError  # noqa: E402
from genenv_jax.configs import alfworld as config_module  # noqa: E402
from genenv_jax.dreamgym import experience_text as experience_model  # noqa: E402
from genenv_jax.loop.experience import ExperienceWorld  # noqa: E402
from genenv_jax.loop import CoEvolution  # noqa: E402
from genenv_jax.workdir.pools import Pool  # noqa: E402
from genenv_jax.configs.run_config import RunConfig  # noqa: E402
from genenv_jax.sampling import SampleOutput  # noqa: E402


def reply_for(action: str) -> str:
    """The scripted experience model: by a hash of the action, an unreadable reply (a failure
    state), a win (reward 1) or "Nothing happens." (reward 0)."""
    kind = int(hashlib.sha256(action.encode()).hexdigest(), 16) % 4
    if kind == 0:
        return "I am not sure what happens."
    if kind == 1:
        return "Reasoning: The goal holds.\nNext state: You put it down. Task done.\nReward: 1"
    return "Reasoning: Nothing changes.\nNext state: Nothing happens.\nReward: 0"


@pytest.fixture(scope="module")
def scripted_experience_model():
    """ExperienceWorld's sampler scripted by `reply_for` for the module; yields the actions it was asked."""
    actions = []

    def sample(self, prompts, seed):
        text = self.ctx.text
        rows = []
        for p in prompts:
            action = re.findall(r"Action: (.*)", text.tokenizer.decode(p))[-1]
            actions.append(action)
            rows.append(text.encode(reply_for(action)) + [text.end_id])
        return SampleOutput.from_rows(rows)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ExperienceWorld, "_sample", sample)
        yield actions


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Generated games and warm-started weights, made once for the module."""
    return tmp_path_factory.mktemp("dreamgym-shared")


def dreamgym_config(shared, epochs=2, **dreamgym):
    c = config_module.get_config("dreamgym")
    c.domain.options.update(games={"train": 2, "validation": 0, "test": 1}, task_types=("pick_and_place_simple",),
                            cache_dir=str(shared / "games"), build_workers=1, max_steps=6)
    c.epochs = epochs
    c.seeds_per_epoch = 2
    c.agent.train.tasks_per_step = 2
    c.agent.sampling.update(max_new_tokens=6)
    c.simulator.sampling.update(max_new_tokens=16)  # variants are requested; a random model's never parse
    c.episodes.update(max_turns=3, max_total_tokens=2048, env_workers=0)
    c.warmstart.update(enabled=False, cache_dir=str(shared / "weights"))  # the experience model's weights
    c.evaluation.update(split="test", max_per_category=1)
    c.dreamgym.update(sft_steps=2, sft_batch_size=2, offline_random_per_task=1, offline_random_steps=3, **dreamgym)
    c.log.progress_bars = False
    return RunConfig.from_config_dict(c)


def _arrays(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def _stable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in ("tokens_per_s", "env_steps_per_s")
             and "cached" not in k} for r in rows]


@pytest.fixture(scope="module")
def uninterrupted(shared, scripted_experience_model, tmp_path_factory):
    """A synthetic then a real epoch, run once for the module: (workdir, rows, loop, actions asked)."""
    workdir = tmp_path_factory.mktemp("dreamgym-run") / "a"
    loop = CoEvolution(dreamgym_config(shared), workdir)
    rows = loop.run()
    return workdir, rows, loop, list(scripted_experience_model)


@pytest.mark.slow
def test_a_synthetic_then_a_real_epoch(uninterrupted):
    workdir, rows, _, actions = uninterrupted
    synthetic, real = rows
    assert synthetic["dreamgym/synthetic_epoch"] == 1 and real["dreamgym/synthetic_epoch"] == 0
    # Synthetic episodes: every answered step the scripted model made readable became a synthetic
    # transition in the buffer; unreadable replies and reply-less agent turns ended episodes as failures.
    readable = [a for a in actions if experience_model.parse(reply_for(a)).ok]
    assert actions and synthetic["replay/added_synthetic"] == len(readable) == synthetic["replay/synthetic"]
    assert synthetic.get("experience/unparseable", 0) == len(actions) - len(readable)
    offline = synthetic["replay/expert"] + synthetic["replay/random"]
    assert offline > 0 and synthetic["replay/size"] == offline + len(readable)
    # The real epoch: no experience-model calls, the real engine's episodes, held-out on the engine;
    # every agent reply replayed on the engine into a real transition (one per turn; none failed).
    assert "replay/added_synthetic" not in real and "heldout/accuracy" in real and real["agent/episodes"] == 4
    turns = round(real["episodes/turns_mean"] * real["agent/episodes"])
    assert real["replay/added_agent"] == real["replay/agent"] == turns > 0 and "replay/agent_replay_failed" not in real
    assert real["replay/size"] == synthetic["replay/size"] + turns
    # The replay pool: offline + synthetic transitions committed with epoch 0, the agent's with epoch 1.
    pool = Pool(workdir / "pools", "replay", writable=False)
    assert [s.epoch for s in pool.shards] == [0, 1] and pool.num_records() == real["replay/size"]
    assert pool.num_records(epochs=(0,)) == synthetic["replay/size"]
    sources = [r["transition"]["source"] for r in pool.records()]
    assert sources.count("synthetic") == len(readable) and sources.count("agent") == turns
    assert {r["transition"]["source"] for r in pool.records(epochs=(1,))} == {"agent"}
    rewarded = [r["transition"] for r in pool.records() if r["transition"]["source"] == "synthetic"
                and r["transition"]["reward"] == 1.0]
    assert all(t["done"] and t["next_state"] == "You put it down. Task done." for t in rewarded)
    metrics = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["epoch"] == -1 and metrics[0]["experience/offline_transitions"] == offline
    assert metrics[0]["warmstart/experience_cached"] == 0

    assert synthetic["dreamgym/generation_requests"] == 0  # no reward variance measured yet
    # Epoch 0 gave some seed mixed rewards: epoch 1 asked the simulator for a variant of it (the cap:
    # half of 2 tasks); a random tiny simulator's spec never parses, so the seed itself stayed.
    assert real["dreamgym/generation_requests"] == 1 and real["dreamgym/generated_tasks"] == 0


@pytest.mark.slow
def test_a_run_resumed_after_its_synthetic_epoch_equals_the_uninterrupted_one(uninterrupted, shared, tmp_path):
    workdir, rows, loop, _ = uninterrupted
    # Killed after epoch 0's checkpoint, before epoch 1's: the files as they were then (epoch 1's
    # pool shards and metrics row are ahead of the newest checkpoint and are rolled back).
    shutil.copytree(workdir, tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "1")
    resumed = CoEvolution(dreamgym_config(shared), tmp_path / "b")
    rows_b = resumed.run()
    assert resumed.warmstart_metrics["warmstart/experience_cached"] == 1  # reloaded, not refitted
    assert _stable(rows_b) == _stable(rows)
    for x, y in zip(_arrays(loop.final_state.agent.params), _arrays(resumed.final_state.agent.params)):
        np.testing.assert_array_equal(x, y)
    pool = Pool(workdir / "pools", "replay", writable=False)
    pool_b = Pool(tmp_path / "b" / "pools", "replay", writable=False)
    assert [s.epoch for s in pool_b.shards] == [0, 1] and pool_b.records() == pool.records()


def test_dreamgym_needs_first_turn_commands_and_a_supported_domain(tmp_path, shared):
    c = config_module.get_config("dreamgym")
    c.domain.options.update(games={"train": 2, "validation": 0, "test": 1}, task_types=("pick_and_place_simple",),
                            cache_dir=str(shared / "games"), build_workers=1, admissible="every_turn")
    with pytest.raises(ConfigError, match="admissible='every_turn'.*first_turn"):
        CoEvolution(RunConfig.from_config_dict(c), tmp_path / "run")
    c.dreamgym.sft_steps = 0
    with pytest.raises(ConfigError, match=r"config\.dreamgym\.sft_steps=0: must be >= 1"):
        RunConfig.from_config_dict(c)
    c.dreamgym.sft_steps = 2
    c.domain.name = "bfcl"
    c.domain.options = {}
    with pytest.raises(ConfigError, match="needs a domain with DreamGym support"):
        CoEvolution(RunConfig.from_config_dict(c), tmp_path / "run")
