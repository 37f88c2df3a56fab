"""DreamGym's experience-model text interface and its synthetic environments, driven through the
real episode runner with scripted samplers (no model): the reply format round-trips, prompts fit,
accuracy and the trivial baselines are computed right, and synthetic episodes end as the paper
says (outcome reward, failure state with reward 0 on an invalid action or an unreadable reply)."""

import re

import pytest

from genenv_jax.domains.base import ChatPrompt, Task
from genenv_jax.dreamgym import experience_text as experience_model
from genenv_jax.dreamgym.environments import Move, SyntheticEnvironments
from genenv_jax.dreamgym.experience_text import Prediction, PromptSettings
from genenv_jax.dreamgym.predictor import Predictor, Query, accuracy, baseline_predictions
from genenv_jax.domains.experience import Transition
from genenv_jax.episodes import END_DONE, EpisodeCaps, run_episodes
from genenv_jax.sampling import SampleOutput


@pytest.fixture(scope="module")
def text(chat_text):
    return chat_text


def _transition(state="You are in a room.", action="go to desk 1", next_state="You arrive at desk 1.", reward=0.0,
                history=(), reasoning="You move to desk 1.", source="expert", step=0, task_id="t"):
    return Transition(domain="toy", task_id=task_id, task="put a mug on the desk", history=[list(h) for h in history],
                      state=state, action=action, next_state=next_state, reward=reward, done=reward >= 0.5,
                      valid=True, reasoning=reasoning, source=source, step=step)


def _sampler(text, reply_of, calls=None):
    """A sampler whose reply to each prompt is `reply_of(decoded prompt)`; records (count, seed)."""
    def sample(prompts, seed):
        if calls is not None:
            calls.append((len(prompts), seed))
        return SampleOutput.from_rows([text.encode(reply_of(text.tokenizer.decode(p))) + [text.end_id]
                                       for p in prompts])
    return sample


# ---------------------------------------------------------------- reply format and prompt
@pytest.mark.parametrize("reasoning", [True, False])
def test_targets_parse_back_to_the_transition(reasoning):
    settings = PromptSettings(reasoning=reasoning)
    t = _transition(next_state="You open the fridge 1.\nIn it, you see an apple 2.", reward=1.0,
                    reasoning="The fridge\nwas closed; now it is open.")
    reply = experience_model.target(t, settings)
    assert reply.startswith("Reasoning: The fridge was closed;") == reasoning
    p = experience_model.parse(reply)
    assert p == Prediction(ok=True, next_state=t.next_state, reward=1.0,
                           reasoning="The fridge was closed; now it is open." if reasoning else "")


@pytest.mark.parametrize("reply", ["", "Next state: x", "Next state: x\nReward: 2", "Reward: 1\nNext state: x",
                                   "Next state: \nReward: 0", "Reasoning: r\nNext state: x\nReward: 1\nmore"])
def test_malformed_replies_are_failures(reply):
    p = experience_model.parse(reply)
    assert not p.ok and p.error in ("unparseable", "empty_state")


def test_prompt_shows_task_demos_latest_history_and_the_action():
    history = [(f"state {i}", f"action {i}") for i in range(6)]
    demo = _transition(state="demo state", action="demo action", next_state="demo next", reward=1.0)
    msgs = experience_model.prompt("the task", history, "now", "take mug 1", [demo],
                                   PromptSettings(max_history=2)).messages
    user = msgs[1]["content"]
    assert msgs[0]["content"] == experience_model.SYSTEM
    assert "Task: the task" in user and "Example 1:\nState: demo state\nAction: demo action\nNext state: demo next\n" \
        "Reward: 1" in user
    assert "(4 earlier steps not shown)" in user and "state 4" in user and "state 3" not in user
    assert user.endswith("Current state: now\nAction: take mug 1")
    assert experience_model.prompt("t", [], "s", "", [], PromptSettings(reasoning=False)).messages[0]["content"] \
        == experience_model.SYSTEM_NO_REASONING


def test_prompts_drop_demos_then_history_until_they_fit(text):
    demos = [_transition(state="a long demo state " * 20, task_id=f"d{i}") for i in range(3)]

    class Retrieval:
        def demos(self, queries):
            return [list(demos) for _ in queries]

    query = Query("task", (("old state " * 10, "old action"),), "now", "look")
    full = len(text.prompt(experience_model.prompt(query.task, query.history, query.state, query.action, demos)))
    bare = len(text.prompt(experience_model.prompt(query.task, (), query.state, query.action, [])))
    for limit, demos_kept, history_kept in [(full, 3, True), (full - 1, 2, True), (bare + 30, 0, False)]:
        predictor = Predictor(text, _sampler(text, lambda p: ""), PromptSettings(), Retrieval(), limit)
        shown = text.tokenizer.decode(predictor.prompts([query])[0])
        assert shown.count("Example ") == demos_kept and ("old action" in shown) == history_kept, limit
    predictor = Predictor(text, _sampler(text, lambda p: ""), PromptSettings(), Retrieval(), bare - 1)
    predictions, counts = predictor.predict([query], seed=0)
    assert predictions == [Prediction(ok=False, error="prompt_too_long")] and counts == {"experience/prompt_too_long": 1}


def test_accuracy_and_the_trivial_baselines():
    ts = [_transition(state="s", next_state="Nothing happens."), _transition(state="s", next_state="s"),
          _transition(next_state="won", reward=1.0), _transition(next_state="x")]
    assert accuracy(ts, baseline_predictions(ts, "nothing")) == {"next_state_exact": 0.25, "reward_accuracy": 0.75,
                                                                 "parse_rate": 1.0}
    assert accuracy(ts, baseline_predictions(ts, "repeat"))["next_state_exact"] == 0.25
    mixed = [Prediction(ok=True, next_state="Nothing  happens. ", reward=0.0), Prediction(ok=False),
             Prediction(ok=True, next_state="won", reward=1.0), Prediction(ok=True, next_state="y", reward=1.0)]
    assert accuracy(ts, mixed) == {"next_state_exact": 0.5, "reward_accuracy": 0.75, "parse_rate": 0.75}
    with pytest.raises(ValueError, match="3 predictions"):
        accuracy(ts, mixed[:3])


# ---------------------------------------------------------------- synthetic episodes
class ToyEpisode:
    """A room with a mug: the agent's command is its `Action:` line."""

    max_steps = 3

    def __init__(self, task):
        self.state = f"You are in a room. {task.prompt['start']}"
        self.first = ChatPrompt(messages=[{"role": "user", "content": self.state}])
        self.task_text = task.prompt["goal"]

    def move(self, agent_text):
        found = re.findall(r"Action: (.+)", agent_text)
        return Move(action=found[-1].strip() if found else None)

    def observation(self, next_state):
        return [{"role": "user", "content": next_state}]


class ToyAdapter:
    def start(self, task):
        return ToyEpisode(task)


def _world(prompt):
    """The scripted experience model: a 2-step world, 'garble' gives an unreadable reply."""
    current = prompt.split("Current state:")[-1].split("<|im_end|>")[0]
    action = re.findall(r"Action: (.*)", current)[0].strip()
    if action == "garble":
        return "I am not sure."
    if action == "take mug":
        return "Reasoning: You pick it up.\nNext state: You hold the mug.\nReward: 0"
    if action == "place mug" and "You hold the mug." in current:
        return "Reasoning: The mug is on the desk.\nNext state: You put the mug on the desk.\nReward: 1"
    return "Reasoning: Nothing changes.\nNext state: Nothing happens.\nReward: 0"


def _agent(text, script):
    """The scripted agent: turn t of an episode whose task id is k says script[k][t]."""
    def sample(prompts, turn):
        replies = []
        for p in prompts:
            start = re.search(r"You are in a room\. (\w+)", text.tokenizer.decode(p)).group(1)
            replies.append(script[start][turn])
        return _sampler(text, lambda _: replies.pop(0))(prompts, 0)
    return sample


def _task(name):
    return Task(domain="toy", task_id=name, category="c", prompt={"start": name, "goal": "put the mug on the desk"},
                verifier={})


def test_synthetic_episodes_run_batched_with_outcome_rewards_and_failure_states(text):
    calls = []
    envs = SyntheticEnvironments(ToyAdapter(), Predictor(text, _sampler(text, _world, calls), PromptSettings(), None,
                                                         4096), domain_name="toy")
    envs.seed(7)
    script = {"solves": ["Action: take mug", "Action: place mug"],
              "mute": ["I will think about it."],
              "garbles": ["Action: look", "Action: garble"],
              "wanders": ["Action: look", "Action: look", "Action: look", "Action: look"]}
    caps = EpisodeCaps(max_turns=8, max_total_tokens=4096, max_new_tokens=32, max_prompt_len=1024)
    groups, stats = run_episodes([_task(k) for k in script], 1, envs, text, caps, _agent(text, script))
    by = {g[0].task.task_id: g[0] for g in groups}
    assert {k: (len(e.turns), e.end_reason, e.reward) for k, e in by.items()} == {
        "solves": (2, END_DONE, 1.0), "mute": (1, END_DONE, 0.0), "garbles": (2, END_DONE, 0.0),
        "wanders": (3, END_DONE, 0.0)}   # wanders: the adapter's 3-step cap
    assert by["mute"].details["failure"] == "invalid_action" and stats.counts["env_errors/invalid_action"] == 1
    assert by["garbles"].details["failure"] == "experience_unparseable"
    assert stats.counts["env_errors/experience_unparseable"] == 1 and envs.counts == {"experience/unparseable": 1}
    assert by["solves"].transcript[-2] == {"role": "user", "content": "You hold the mug."}
    # one experience-model call per turn, batched over the live episodes that named an action
    assert calls == [(3, 7 * 1_000_003), (3, 7 * 1_000_003 + 1), (1, 7 * 1_000_003 + 2)]
    synthetic = envs.take_transitions()
    assert envs.transitions == [] and all(t.source == "synthetic" for t in synthetic)
    solved = [t for t in synthetic if t.task_id == "solves"]
    assert [(t.step, t.action, t.next_state, t.reward, t.done) for t in solved] == [
        (0, "take mug", "You hold the mug.", 0.0, False), (1, "place mug", "You put the mug on the desk.", 1.0, True)]
    assert solved[1].history == [["You are in a room. solves", "take mug"]]
    assert solved[1].reasoning == "The mug is on the desk."
