"""Limits on every environment request (genenv_jax/episodes/limits.py, docs/reliability.md): nothing
a model writes stalls a batch, floods a transcript or exhausts memory.

Hosts: a request that spins in Python ends its episode as `env_timeout` and the host goes on; a
worker that ignores the alarm is killed and replaced; a worker over its memory cap answers
`env_memory`; a 1 MB observation is cut with a marker. BFCL multi-turn: the issue's doubling
sequence (`cp(a, x_i); mv(x_i, a)`) and amplification reply end within the cost rules, shared
subtrees are counted and compared once, and the shipped ground truths are unaffected (the sample
replay in tests/domains/bfcl_multiturn/test_bfcl_multiturn.py, and all 800). A loop run with a stalling
environment completes and counts the event.
"""

from __future__ import annotations

import json

import pytest
from test_episodes import CAPS, _oracle, _task

from genenv_jax.core.bounded_text import bound_text
from genenv_jax.domains import get_domain
from genenv_jax.domains.bfcl_multiturn import backend_limits, transitions
from genenv_jax.domains.bfcl_multiturn.dispatch import MAX_ERROR_CHARS, Dispatcher
from genenv_jax.episodes import END_DONE, EnvLimits, EnvTimeout, LocalEnvironments, WorkerEnvironments, run_episodes
from genenv_jax.episodes import environments
from genenv_jax.episodes.limits import time_limit
from genenv_jax.text.tokenization import render_tool_calls

@pytest.fixture(scope="module")
def text(chat_text):
    return chat_text


FAST = EnvLimits(step_timeout_s=1.0, score_timeout_s=1.0, max_observation_chars=1000, worker_memory_mb=1024)


def _ends(groups):
    return [group[0].end_reason for group in groups]


def test_a_spinning_step_ends_only_its_episode_in_process(text):
    from test_episodes import CountdownDomain

    groups, stats = run_episodes([_task(3, spin_at_turn=2), _task(2)], 1, LocalEnvironments(CountdownDomain(), FAST),
                                 text, CAPS, _oracle(text))
    assert _ends(groups) == ["env_timeout", END_DONE] and groups[1][0].reward == 1.0
    assert groups[0][0].reward == 0.0  # its environment was dropped: no score, reward 0
    assert stats.counts["score_failed/env_exception:KeyError"] == 1


def test_observations_are_cut_with_a_marker(text):
    from test_episodes import CountdownDomain

    groups, _ = run_episodes([_task(3, flood_at_turn=1)], 1, LocalEnvironments(CountdownDomain(), FAST), text, CAPS,
                             _oracle(text))
    shown = [m["content"] for m in groups[0][0].transcript if m["role"] == "tool"][0]
    assert shown.startswith("x" * 1000) and shown.endswith(
        f"[... {(1 << 20) - 1000} of {1 << 20} characters cut by this environment's limit]")
    assert bound_text("abc", 0) == "abc" and bound_text("abcdef", 3).startswith("abc\n[... 3 of 6")


@pytest.mark.slow
def test_workers_time_out_kill_and_replace_and_the_batch_completes(text, monkeypatch):
    monkeypatch.setattr(environments, "KILL_GRACE_S", 0.5)
    envs = WorkerEnvironments("test_episodes:CountdownDomain", {}, num_workers=2, limits=FAST)
    try:
        # episodes 0, 2 live in worker 0 and 1, 3 in worker 1: 0 spins (the alarm ends it, its worker
        # lives on), 1 ignores the alarm and sleeps (its worker is killed: episode 3 goes with it)
        tasks = [_task(3, spin_at_turn=2), _task(3, hang_at_turn=2), _task(3), _task(3)]
        groups, stats = run_episodes(tasks, 1, envs, text, CAPS, _oracle(text))
        assert _ends(groups) == ["env_timeout", "env_timeout", END_DONE, "worker_died"], stats.counts
        assert envs.killed == 1 and groups[2][0].reward == 1.0
        again, _ = run_episodes([_task(2), _task(2)], 1, envs, text, CAPS, _oracle(text))
        assert [g[0].reward for g in again] == [1.0, 1.0]  # the killed worker was replaced
    finally:
        envs.close()


def test_a_worker_over_its_memory_cap_answers_env_memory(text):
    envs = WorkerEnvironments("test_episodes:CountdownDomain", {}, num_workers=1, limits=FAST)
    try:
        groups, _ = run_episodes([_task(3, hog_at_turn=1), _task(2)], 1, envs, text, CAPS, _oracle(text))
        assert _ends(groups) == ["env_memory", END_DONE]  # same worker, still alive
    finally:
        envs.close()


def test_time_limit_keeps_an_outer_timer():
    import signal

    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 30.0)
    try:
        with pytest.raises(EnvTimeout), time_limit(0.05):
            while True:
                pass
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 25.0 < remaining <= 30.0 and not fired  # the outer timer is back, minus the time spent
        with time_limit(60.0) as armed:  # an outer timer that fires sooner is left alone
            assert armed is False
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------ BFCL multi-turn cost rules
@pytest.fixture(scope="module")
def file_system_task():
    domain = get_domain("bfcl_multiturn")
    task = next(t for t in domain.seeds("all") if t.prompt["involved_classes"] == ["GorillaFileSystem"])
    return domain, task


def _doubling(top: str, rounds: int) -> list[dict]:
    calls = []
    for i in range(rounds):
        calls += [{"name": "cp", "arguments": {"source": top, "destination": f"x{i}"}},
                  {"name": "mv", "arguments": {"source": f"x{i}", "destination": top}}]
    return calls


def test_the_doubling_sequence_is_refused_at_the_path_bound(file_system_task):
    domain, task = file_system_task
    env = domain.environment(task)
    first = env.reset()
    fs = env.dispatcher.backends.instances["GorillaFileSystem"]
    top = next(k for k, v in fs._current_dir.contents.items() if hasattr(v, "contents"))
    replies = [render_tool_calls(_doubling(top, 20)), render_tool_calls([{"name": "du", "arguments": {}},
                                                                         {"name": "find", "arguments": {}}])]
    transcript = [*first.messages]
    with time_limit(60.0):  # unbounded, this is 2^20 paths per walk and never ends
        for reply in replies:
            outcome = env.step(reply)
            transcript += [{"role": "assistant", "content": reply}, *outcome.observation]
        paths = backend_limits.reachable_paths(fs.root)
        refused = [m["content"] for m in transcript if "would hold more than" in str(m.get("content"))]
        assert paths <= backend_limits.MAX_FILE_SYSTEM_PATHS and refused
        assert json.loads(refused[0]) == {"error": f"cp: the file system would hold more than "
                                                   f"{backend_limits.MAX_FILE_SYSTEM_PATHS} paths (copies of copies); "
                                                   "nothing was changed"}
        score = env.score(transcript)  # the checker re-executes every call under the same rules
        replayed = transitions.episode_transitions(task, transcript)  # DreamGym's replay of the episode
    assert score.reward == 0.0 and replayed


def test_paths_are_counted_and_states_compared_once_per_shared_subtree(file_system_task):
    domain, task = file_system_task
    backends = domain.environment(task)
    backends.reset()
    dispatcher: Dispatcher = backends.dispatcher
    fs = dispatcher.backends.instances["GorillaFileSystem"]
    top = next(k for k, v in fs._current_dir.contents.items() if hasattr(v, "contents"))
    for call in _doubling(top, 9):  # 2^9 x the subtree's paths, built from a handful of objects
        dispatcher.call(call["name"], call["arguments"])
    count = backend_limits.reachable_paths(fs.root)
    assert 1000 < count <= backend_limits.MAX_FILE_SYSTEM_PATHS
    assert backend_limits.reachable_paths(fs.root, bound=100) == 101  # stops once past its bound
    before, after = dispatcher.backends.public_state(), dispatcher.backends.public_state()
    assert backend_limits.same_state(before, after) and before == after
    dispatcher.call("touch", {"file_name": "new.txt"})
    assert not backend_limits.same_state(before, dispatcher.backends.public_state())


def test_the_amplification_reply_and_long_error_texts_are_bounded():
    domain = get_domain("bfcl_multiturn")
    task = next(t for t in domain.seeds("all") if "TravelAPI" in t.prompt["involved_classes"])
    dispatcher = domain.environment(task).dispatcher
    outcome = dispatcher.call("compute_exchange_rate", {"base_currency": "USD", "target_currency": "JPY",
                                                        "value": "9" * 50_000})
    assert outcome.error == "bad_arguments" and "value must be a number" in outcome.observation

    def raises(**_):
        raise ValueError("y" * 100_000)

    failed = Dispatcher._run("f", raises, {})
    assert failed.error == "backend_exception" and len(failed.result) < MAX_ERROR_CHARS + 100
    assert "characters cut by this environment's limit" in failed.result


# ------------------------------------------------------------------------ a loop run
@pytest.mark.slow
def test_a_loop_with_a_stalling_and_a_memory_hungry_environment_completes_and_counts_them(tmp_path, toy_domain, monkeypatch):
    from tests.support.loop_configs import toy_config

    from genenv_jax.loop import CoEvolution

    monkeypatch.setattr(environments, "KILL_GRACE_S", 0.5)
    config = toy_config(epochs=1, **{"domain.options": {"num_seeds": 4, "hang_answer": "0", "hog_answer": "*"},
                                     "episodes.env_workers": 1, "episodes.score_timeout_s": 1.0,
                                     "episodes.env_memory_mb": 2048})
    rows = CoEvolution(config, tmp_path / "run").run()
    assert rows[-1]["epoch"] == 0 and "agent/loss" in rows[-1]
    assert rows[-1]["score_failed/env_timeout"] >= 1  # killed and replaced: the epoch went on
    assert rows[-1]["score_failed/env_memory"] >= 1   # 64 GB asked for under a 2 GB cap: refused, not OOM-killed


@pytest.mark.slow
def test_a_run_with_stalls_resumes_bit_equal(tmp_path, toy_domain, monkeypatch):
    import jax
    import numpy as np
    from tests.support.loop_configs import toy_config

    from genenv_jax.loop import CoEvolution

    monkeypatch.setattr(environments, "KILL_GRACE_S", 0.5)
    options = {"domain.options": {"num_seeds": 4, "hang_answer": "0"}, "episodes.env_workers": 1,
               "episodes.score_timeout_s": 1.0}
    full = CoEvolution(toy_config(**options), tmp_path / "full")
    full.run()
    CoEvolution(toy_config(epochs=1, **options), tmp_path / "split").run()
    resumed = CoEvolution(toy_config(**options), tmp_path / "split")
    resumed.run()
    for a, b in zip(jax.tree.leaves(full.final_state.agent.params), jax.tree.leaves(resumed.final_state.agent.params)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    for name in ("d_train", "d_env"):
        assert full.pools[name].records() == resumed.pools[name].records(), name
