"""Multi-turn episodes: the batched runner, environment workers that raise or die, and the loss mask
that keeps observation tokens out of GRPO."""

import os
import re
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from genenv_jax import rl
from genenv_jax.domains.base import ChatPrompt, Domain, Environment, ScoreResult, StepOutcome, Task
from genenv_jax.episodes import (END_DONE, END_MAX_TOKENS, END_MAX_TURNS, END_TURN_TOKENS, EpisodeCaps,
                                 LocalEnvironments, WorkerEnvironments, run_episodes)
from genenv_jax.rl.packing import pack_sequences
from genenv_jax.models import init_params, preset
from genenv_jax.sampling import FINISH_LENGTH, FINISH_STOP, SampleOutput


class CountdownEnvironment(Environment):
    """Asks the agent to say the numbers n, n-1, ..., 1; done after 'n' turns; reward = all right.
    Task options: `die_at_turn` kills the worker process, `raise_at_turn` raises in step; for the
    limits (tests/episodes/test_environment_limits.py) `spin_at_turn` loops in Python, `hang_at_turn` ignores
    SIGALRM and sleeps, `hog_at_turn` allocates 4 GB, `flood_at_turn` answers with 1 MB of text."""

    def __init__(self, task):
        self.task, self.turn = task, 0

    def reset(self):
        return ChatPrompt(messages=[{"role": "user", "content": f"count down from {self.task.prompt['n']}"}])

    def step(self, agent_text):
        self.turn += 1
        if self.task.prompt.get("die_at_turn") == self.turn:
            os._exit(3)
        if self.task.prompt.get("raise_at_turn") == self.turn:
            raise KeyError("broken environment")
        if self.task.prompt.get("spin_at_turn") == self.turn:
            while True:
                pass
        if self.task.prompt.get("hang_at_turn") == self.turn:
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            time.sleep(3600)
        if self.task.prompt.get("hog_at_turn") == self.turn:
            self.hog = bytearray(4 << 30)
        if self.task.prompt.get("flood_at_turn") == self.turn:
            return StepOutcome(observation=[{"role": "tool", "content": "x" * (1 << 20)}], done=False)
        if self.turn >= self.task.prompt["n"]:
            return StepOutcome(observation=[], done=True, info={"errors": {"late": int(agent_text == "late")}})
        return StepOutcome(observation=[{"role": "tool", "content": f"now {self.task.prompt['n'] - self.turn}"}],
                           done=False)

    def score(self, transcript):
        said = [m["content"] for m in transcript if m["role"] == "assistant"]
        want = [str(self.task.prompt["n"] - i) for i in range(self.task.prompt["n"])]
        return ScoreResult(float(said == want), {"said": said})


class CountdownDomain(Domain):
    name = "countdown"
    rejection_reasons = ()

    def __init__(self):
        pass

    def seeds(self, split):
        return [_task(3), _task(1)]

    def simulator_prompt(self, seed, recent_success=(), difficulty="similar", alpha=0.5):
        return ChatPrompt(messages=[{"role": "user", "content": "x"}])

    def parse_task(self, text, seed, difficulty=None):
        return seed

    def agent_prompt(self, task):
        return CountdownEnvironment(task).reset()

    def environment(self, task):
        return CountdownEnvironment(task)

    def score_details(self, task, response):
        return ScoreResult(float(response == str(task.prompt["n"])))

    def reference_response(self, task):
        return str(task.prompt["n"])

    def reference_turns(self, task):
        return [str(task.prompt["n"] - i) for i in range(task.prompt["n"])]

    def reference_generation(self, seed, sibling=None):
        return "x"


def _task(n, **extra):
    return Task(domain="countdown", task_id=f"n{n}-{sorted(extra.items())}", category="c", prompt={"n": n, **extra},
                verifier={})


@pytest.fixture(scope="module")
def text(chat_text):
    return chat_text


def _oracle(text, cap=16, wrong_at=None):
    """A sampler that answers with the number the last message asks for (or the count-down start)."""
    def sample(prompts, turn):
        rows = []
        for p in prompts:
            last = text.tokenizer.decode(p).rsplit("<|im_start|>", 2)[-2]
            number = re.findall(r"\d+", last)[-1]
            answer = "late" if wrong_at == turn else number
            rows.append(text.encode(answer)[:cap] + [text.end_id])
        width = max(len(r) for r in rows)
        toks = np.zeros((len(rows), width), np.int32)
        for i, r in enumerate(rows):
            toks[i, :len(r)] = r
        return SampleOutput(tokens=toks, logprobs=np.full(toks.shape, -0.5, np.float32),
                            lengths=np.asarray([len(r) for r in rows]),
                            finish_reasons=tuple(FINISH_STOP for _ in rows))
    return sample


CAPS = EpisodeCaps(max_turns=8, max_total_tokens=4096, max_new_tokens=16, max_prompt_len=1024)


def test_batched_episodes_alternate_agent_turns_and_observations(text):
    groups, stats = run_episodes([_task(3), _task(1)], 2, LocalEnvironments(CountdownDomain()), text, CAPS,
                                 _oracle(text))
    assert [len(g) for g in groups] == [2, 2]
    long, short = groups[0][0], groups[1][0]
    assert [len(long.turns), len(short.turns)] == [3, 1] and long.end_reason == short.end_reason == END_DONE
    assert long.reward == short.reward == 1.0 and long.valid
    assert [m["role"] for m in long.transcript] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    decoded = text.tokenizer.decode(long.prompt + long.tokens)
    assert "3<|im_end|>\n<|im_start|>user\n<tool_response>\nnow 2\n</tool_response><|im_end|>\n<|im_start|>assistant\n2" \
        in decoded
    mask, logprobs = long.response_arrays()
    agent = [t for t, m in zip(long.tokens, mask) if m]
    assert text.tokenizer.decode(agent) == "3<|im_end|>2<|im_end|>1<|im_end|>"
    assert np.all(logprobs[mask == 1] == -0.5) and np.all(logprobs[mask == 0] == 0)
    assert mask[-1] == 1  # the sequence ends on the agent's last token
    assert stats.env_steps == 3 * 2 + 1 * 2
    m = stats.metrics([ep for g in groups for ep in g])
    assert m["episodes/turns_mean"] == 2.0 and m["episodes/end/done"] == 4 and 0 <= m["time/env_wait_share"] <= 1


def test_caps_end_episodes_with_their_reason(text):
    caps = EpisodeCaps(max_turns=2, max_total_tokens=4096, max_new_tokens=16, max_prompt_len=1024)
    groups, _ = run_episodes([_task(3)], 1, LocalEnvironments(CountdownDomain()), text, caps, _oracle(text))
    assert groups[0][0].end_reason == END_MAX_TURNS and groups[0][0].reward == 0.0
    ep = groups[0][0]
    tight = EpisodeCaps(max_turns=8, max_total_tokens=len(ep.prompt) + 20, max_new_tokens=16, max_prompt_len=1024)
    groups, _ = run_episodes([_task(3)], 1, LocalEnvironments(CountdownDomain()), text, tight, _oracle(text))
    assert groups[0][0].end_reason == END_MAX_TOKENS
    short_prompt = EpisodeCaps(max_turns=8, max_total_tokens=4096, max_new_tokens=16, max_prompt_len=5)
    groups, stats = run_episodes([_task(3)], 2, LocalEnvironments(CountdownDomain()), text, short_prompt,
                                 _oracle(text))
    assert groups == [] and stats.counts["agent_prompt_too_long"] == 1

    def truncated(prompts, turn):
        out = _oracle(text)(prompts, turn)
        return SampleOutput(out.tokens, out.logprobs, out.lengths, tuple(FINISH_LENGTH for _ in prompts))
    groups, _ = run_episodes([_task(3)], 1, LocalEnvironments(CountdownDomain()), text, CAPS, truncated)
    assert groups[0][0].end_reason == END_TURN_TOKENS and not groups[0][0].valid


def test_environment_errors_and_info_are_counted(text):
    _, stats = run_episodes([_task(1)], 1, LocalEnvironments(CountdownDomain()), text, CAPS, _oracle(text, wrong_at=0))
    assert stats.counts["env_errors/late"] == 1
    groups, stats = run_episodes([_task(3, raise_at_turn=2), _task(1)], 1, LocalEnvironments(CountdownDomain()), text,
                                 CAPS, _oracle(text))
    assert groups[0][0].end_reason == "env_exception:KeyError" and groups[0][0].reward == 0.0
    assert stats.counts["score_failed/env_exception:KeyError"] == 1  # its environment is gone: no score
    assert groups[1][0].end_reason == END_DONE and groups[1][0].reward == 1.0


def test_a_worker_that_dies_ends_only_its_episodes(text):
    envs = WorkerEnvironments("test_episodes:CountdownDomain", {}, num_workers=2)
    try:
        # episodes 0 and 1 (task 0) live in workers 0 and 1; task 0 kills its worker at turn 2
        tasks = [_task(3, die_at_turn=2), _task(3), _task(2)]
        groups, _ = run_episodes(tasks, 1, envs, text, CAPS, _oracle(text))
        ends = [g[0].end_reason for g in groups]
        assert ends[0] == "worker_died" and groups[0][0].reward == 0.0
        assert ends[1] == END_DONE and groups[1][0].reward == 1.0  # another worker
        assert ends[2] == "worker_died"  # episode 2 shared worker 0 with episode 0 and died with it
        again, _ = run_episodes([_task(2), _task(1)], 1, envs, text, CAPS, _oracle(text))
        assert [g[0].reward for g in again] == [1.0, 1.0]  # the dead worker was replaced
    finally:
        envs.close()


def test_workers_and_local_environments_give_the_same_episodes(text):
    tasks = [_task(3), _task(2), _task(1)]
    local, _ = run_episodes(tasks, 2, LocalEnvironments(CountdownDomain()), text, CAPS, _oracle(text))
    envs = WorkerEnvironments("test_episodes:CountdownDomain", {}, num_workers=2)
    try:
        workers, _ = run_episodes(tasks, 2, envs, text, CAPS, _oracle(text))
    finally:
        envs.close()
    flat = lambda groups: [(e.tokens, e.loss_mask, e.transcript, e.reward) for g in groups for e in g]  # noqa: E731
    assert flat(local) == flat(workers)


@pytest.mark.slow
def test_observation_tokens_contribute_nothing_to_the_grpo_loss_or_gradient(text):
    """Old logprobs at observation positions are garbage here: with the loss mask they change
    nothing; with every response token in the loss they do."""
    groups, _ = run_episodes([_task(3)], 2, LocalEnvironments(CountdownDomain()), text, CAPS, _oracle(text))
    cfg = preset("tiny")
    params = init_params(cfg, jax.random.key(0))
    step = rl.make_grpo_step(cfg, rl.make_optimizer(rl.OptimizerConfig(learning_rate=1e-3)),
                             rl.GRPOConfig(kl_coef=0.0, chunk_size=32), donate=False)
    eps = [ep for g in groups for ep in g]
    masks = [ep.response_arrays()[0] for ep in eps]

    def batch(logprob_rows, mask_rows):
        b = pack_sequences([ep.prompt for ep in eps], [ep.tokens for ep in eps], text.pad_id,
                           response_logprobs=logprob_rows, response_masks=mask_rows)
        b["advantages"] = np.asarray([1.0, -1.0], np.float32)
        return {k: jnp.asarray(v) for k, v in b.items()}

    clean = [ep.response_arrays()[1] for ep in eps]
    garbage = [np.where(m == 1, lp, np.float32(-7.0)) for m, lp in zip(masks, clean)]
    opt = step.init_opt_state(params)
    p1, _, m1 = step(params, opt, batch(clean, masks))
    p2, _, m2 = step(params, opt, batch(garbage, masks))
    assert float(m1["loss"]) == float(m2["loss"])
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2)))
    _, _, m3 = step(params, opt, batch(garbage, None))  # observations in the loss: the loss moves
    assert float(m3["loss"]) != float(m1["loss"])
