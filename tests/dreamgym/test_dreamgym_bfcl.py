"""DreamGym on BFCL multi-turn: real transitions played on the backends (the expert episode, perturbed
ones, an agent transcript replayed) carry the official checker's verdict as the final reward, and
synthetic episodes (a scripted experience model) look to the agent exactly like real ones: the same
first prompt and tools, tool results as tool messages, user turns from the task, with failure states
where the paper puts them. No model: the experience model and the agent are scripted."""

import collections
import random

import pytest

from genenv_jax.core.config_checks import ConfigError
from genenv_jax.domains.bfcl.domain import BFCLDomain
from genenv_jax.domains.bfcl_multiturn import BFCLMultiTurnDomain
from genenv_jax.domains.bfcl_multiturn import transitions as tr
from genenv_jax.domains.bfcl_multiturn.checker import check_episode
from genenv_jax.domains.bfcl_multiturn.experience_text import END_TURN, ENVIRONMENT, EPISODE_OVER, result_lines
from genenv_jax.domains.bfcl_multiturn.scenario import Scenario
from genenv_jax.dreamgym.domains import domain_support
from genenv_jax.dreamgym.environments import SyntheticEnvironments
from genenv_jax.dreamgym.experience_text import Prediction
from genenv_jax.episodes import END_DONE, EpisodeCaps, LocalEnvironments, run_episodes
from genenv_jax.sampling import SampleOutput
from genenv_jax.text.tokenization import parse_tool_calls, render_tool_calls

TASKS = ("multi_turn_base_0", "multi_turn_miss_func_0", "multi_turn_miss_param_0")
CAPS = EpisodeCaps(max_turns=30, max_total_tokens=65536, max_new_tokens=1024, max_prompt_len=16384)


@pytest.fixture(scope="module")
def domain():
    return BFCLMultiTurnDomain(categories=("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"))


@pytest.fixture(scope="module")
def seeds(domain):
    return {t.task_id: t for t in domain.seeds("all")}


@pytest.fixture(scope="module")
def text(chat_text):
    return chat_text


def _agent(text, replies):
    """The scripted agent: its turn t says replies[t] (one episode at a time)."""
    def sample(prompts, turn):
        return SampleOutput.from_rows([text.encode(replies[turn]) + [text.end_id] for _ in prompts])
    return sample


class TableModel:
    """A scripted experience model answering (state, action) from real transitions; `edit` may
    change an answer. Records the queries it saw."""

    def __init__(self, transitions, edit=None):
        self.table = {(t.state, t.action): t for t in transitions}
        self.edit, self.queries = edit, []

    def predict(self, queries, seed):
        self.queries += queries
        out = []
        for q in queries:
            t = self.table[(q.state, q.action)]
            p = Prediction(ok=True, next_state=t.next_state, reward=t.reward, reasoning=t.reasoning)
            out.append(self.edit(q, p) if self.edit else p)
        return out, {}


def _run(envs, task, text, replies):
    groups, _ = run_episodes([task], 1, envs, text, CAPS, _agent(text, replies))
    return groups[0][0]


def _norm(messages):
    return [(m["role"], " ".join(str(m["content"]).split())) for m in messages]


# ------------------------------------------------------------------------ real transitions
def test_expert_transitions_are_the_real_episode_with_reward_one_at_its_end(domain, seeds):
    for task_id in TASKS:
        task = seeds[task_id]
        steps = tr.expert_transitions(domain, task)
        scenario = Scenario.of(task)
        calls = [t for t in steps if t.action != END_TURN]
        # one transition per step with calls (the ground truth's turns with calls) and the final one
        assert len(calls) == sum(bool(gt) for gt in scenario.ground_truth) and steps[-1].action == END_TURN
        assert [t.done for t in steps] == [False] * (len(steps) - 1) + [True]
        assert steps[-1].next_state == EPISODE_OVER and steps[-1].reward == 1.0
        assert "done as asked" in steps[-1].reasoning
        assert all(t.reward == 0.0 and t.valid and t.source == "expert" for t in calls)
        for t in calls:  # one result line per call, the history grows by every agent reply
            assert len(result_lines(t.next_state)) == len(t.action.split("\n"))
            assert len(t.history) == t.step
        assert steps[0].state == "User: " + scenario.question[0][0]["content"]
    # miss_func: the turn that reveals functions reads as such; its requests are in the task text
    reveal = tr.expert_transitions(domain, seeds["multi_turn_miss_func_0"])
    assert any("I have updated some more functions you can choose from: sort" in t.state for t in reveal)
    assert "(new functions become available: sort)" in reveal[0].task and "Initial backend states:" in reveal[0].task


def test_execution_reasoning_names_failures_and_state_changes(domain, seeds):
    task = seeds["multi_turn_base_0"]
    first = tr.expert_transitions(domain, task)[0]
    assert "Changed: GorillaFileSystem.root." in first.reasoning
    bad = render_tool_calls([{"name": "cd", "arguments": {"folder": "no_such_dir"}}])
    t = tr.play(task, [bad], "random")[0]
    assert not t.valid and t.reasoning.startswith("cd fails: ") and "No backend state changes." in t.reasoning
    assert t.next_state.startswith('{"error"')


def test_perturbed_episodes_get_the_official_verdict(domain, seeds):
    rng = random.Random(0)
    tasks = [t for t in seeds.values() if t.category == "multi_turn_base"][:12]
    finals = collections.Counter()
    for task in tasks:
        texts = tr.perturbed_texts(task, rng, 0.6)
        steps = tr.play(task, texts, "random")
        # independent: the checker on the replies' calls, grouped into turns as BFCL does
        turns, current = [], []
        for reply in texts:
            calls = [c.to_json() for c in parse_tool_calls(reply).calls]
            if calls:
                current.append(calls)
            else:
                turns.append(current)
                current = []
        verdict = check_episode(Scenario.of(task), turns)
        assert steps[-1].done and steps[-1].reward == float(verdict.valid), task.task_id
        finals[verdict.valid] += 1
        if not verdict.valid:
            assert steps[-1].reasoning.startswith("Not done as asked") and verdict.error_type in steps[-1].reasoning
    assert finals[True] and finals[False]  # both outcomes occur
    assert tr.perturbed_texts(tasks[0], random.Random(1), 0.6) == tr.perturbed_texts(tasks[0], random.Random(1), 0.6)


def test_agent_transcript_replays_to_the_same_transitions(domain, seeds, text):
    task = seeds["multi_turn_miss_func_0"]
    episode = _run(LocalEnvironments(domain), task, text, domain.reference_turns(task))
    assert episode.reward == 1.0
    replayed = tr.episode_transitions(task, episode.transcript)
    expert = tr.expert_transitions(domain, task)
    assert [t.to_json() | {"source": "expert"} for t in replayed] == [t.to_json() for t in expert]


# ------------------------------------------------------------------------ synthetic episodes
def test_synthetic_episodes_look_like_real_ones(domain, seeds, text):
    support = domain_support(domain)
    assert support.environment == ENVIRONMENT
    for task_id in TASKS:
        task = seeds[task_id]
        replies = domain.reference_turns(task)
        real = _run(LocalEnvironments(domain), task, text, replies)
        model = TableModel(tr.expert_transitions(domain, task))
        envs = SyntheticEnvironments(support.adapter(domain), model, domain.name)
        synthetic = _run(envs, task, text, replies)
        assert real.reward == synthetic.reward == 1.0 and synthetic.end_reason == END_DONE
        assert _norm(synthetic.transcript) == _norm(real.transcript), task_id  # prompt, tools' results, user turns
        assert synthetic.prompt == real.prompt
        # only calls and the episode's end are predicted: the user turns come from the task
        assert [q.action == END_TURN for q in model.queries] == [False] * (len(model.queries) - 1) + [True]
        made = envs.take_transitions()
        assert [(t.state, t.action, t.next_state) for t in made] == [(t.state, t.action, t.next_state)
                                                                     for t in model.table.values()]


def test_synthetic_failure_states_and_outcome_reward(domain, seeds, text):
    task = seeds["multi_turn_base_0"]
    replies = domain.reference_turns(task)
    support = domain_support(domain)
    expert = tr.expert_transitions(domain, task)

    def run(model, agent_replies=replies):
        envs = SyntheticEnvironments(support.adapter(domain), model, domain.name)
        return _run(envs, task, text, agent_replies), envs

    # a call step's predicted reward is not an outcome: the episode goes on; the end's prediction decides
    rewarded = TableModel(expert, lambda q, p: Prediction(True, p.next_state, 1.0 if q.action != END_TURN else 0.0))
    episode, envs = run(rewarded)
    assert episode.reward == 0.0 and len(episode.turns) == len(replies)
    assert all(t.reward == 0.0 for t in envs.take_transitions())
    # a malformed tool call is an invalid action
    episode, _ = run(TableModel(expert), ["<tool_call>\n{not json}\n</tool_call>"])
    assert (episode.reward, len(episode.turns), episode.details["failure"]) == (0.0, 1, "invalid_action")
    # a prediction without one result line per call cannot be shown: a failure state
    short = TableModel(expert, lambda q, p: Prediction(True, result_lines(p.next_state)[0], 0.0)
                       if "\n" in q.action else p)
    episode, envs = run(short)
    assert episode.details["failure"] == "experience_unusable_state" and episode.reward == 0.0
    assert envs.counts == {"experience/unusable_state": 1} and envs.take_transitions() == []
    # an unreadable reply is a failure state too
    episode, _ = run(TableModel(expert, lambda q, p: Prediction(ok=False, error="unparseable")))
    assert episode.details["failure"] == "experience_unparseable" and len(episode.turns) == 1


def test_only_supported_domains_run_dreamgym():
    with pytest.raises(ConfigError, match="needs a domain with DreamGym support.*'bfcl'"):
        domain_support(BFCLDomain())


def test_the_dreamgym_preset_validates_and_its_offline_data_has_both_outcomes():
    from genenv_jax.configs import bfcl_multiturn as config_module
    from genenv_jax.domains import get_domain
    from genenv_jax.dreamgym.domains import OfflineSettings, run_rng_key
    from genenv_jax.configs.run_config import RunConfig

    config = RunConfig.from_config_dict(config_module.get_config("dreamgym"))
    assert config.mode == "dreamgym" and config.dreamgym.synthetic_epochs == 1
    domain = get_domain("bfcl_multiturn", categories=("multi_turn_base",))
    tasks = [t for t in domain.seeds("train")][:6]
    d = config.dreamgym
    offline = domain_support(domain).offline(domain, tasks, OfflineSettings(
        d.offline_random_per_task, d.offline_random_steps, d.offline_invalid_prob, run_rng_key(config.seed)))
    assert collections.Counter(t.source for t in offline if t.done) == {"expert": 6, "random": 12}
    assert {t.reward for t in offline if t.done and t.source == "random"} == {0.0, 1.0}
    assert offline == domain_support(domain).offline(domain, tasks, OfflineSettings(
        d.offline_random_per_task, d.offline_random_steps, d.offline_invalid_prob, run_rng_key(config.seed)))  # deterministic


def test_fit_experience_collects_bfcl_train_and_held_out_tasks_apart():
    from pathlib import Path

    from genenv_jax.dreamgym import fit_experience

    s = fit_experience.FitSettings(
        train_games=4, heldout_games=2, task_types=(), random_per_task=1, random_steps=32, invalid_prob=0.5,
        preset="study-1m", vocab_size=512, steps=1, batch_size=1, learning_rate=1e-3, top_k=1, reasoning=True,
        max_history=1, max_prompt_len=2048, max_new_tokens=16, max_heldout=4, seed=0, domain="bfcl_multiturn")
    domain = fit_experience.make_domain(s, Path("/nonexistent"))
    train = fit_experience.collect_split(domain, "train", s)
    heldout = fit_experience.collect_split(domain, "validation", s)
    assert len({t.task_id for t in train}) == 4 and len({t.task_id for t in heldout}) == 2
    scenario = {t.task_id: t.metadata["scenario"] for t in domain.seeds("all")}
    assert not {scenario[t.task_id] for t in train} & {scenario[t.task_id] for t in heldout}
    assert {t.source for t in train} == {"expert", "random"}


def test_a_real_epochs_episodes_become_agent_transitions_and_a_broken_one_is_counted(domain, seeds, text):
    """ExperienceWorld's replay growth on a real epoch (the loop test covers it on ALFWorld)."""
    from types import SimpleNamespace

    from genenv_jax.loop.experience import ExperienceWorld

    task = seeds["multi_turn_base_0"]
    episode = _run(LocalEnvironments(domain), task, text, domain.reference_turns(task))
    world = object.__new__(ExperienceWorld)
    limits = SimpleNamespace(episodes=SimpleNamespace(score_timeout_s=300.0))
    world.support, world.ctx = domain_support(domain), SimpleNamespace(domain=domain, config=limits)
    groups = [SimpleNamespace(task=task, episodes=[episode, SimpleNamespace(transcript=[None])])]
    added, failed = world._agent_transitions(groups)
    assert failed == 1 and [t.to_json() for t in added] == [
        t.to_json() | {"source": "agent"} for t in tr.expert_transitions(domain, task)]
