"""GiGPO's step-level advantages and DAPO's overlong shaping (`rl.advantages`), the loop's credit
for episodes (`loop.credit`), per-token values through the update batches, and p_hat from the
first k rollouts (`curriculum.p_hat_samples`)."""

import dataclasses

import numpy as np
import pytest

from genenv_jax import rl
from genenv_jax.core.config_checks import ConfigError
from genenv_jax.domains.base import Task
from genenv_jax.episodes import Episode
from genenv_jax.loop.credit import credit_metrics, group_credits
from genenv_jax.loop.epoch_tasks import RolloutGroup
from genenv_jax.rl import curriculum
from genenv_jax.rl.advantages import discounted_returns, gigpo_step_advantages, overlong_penalty
from genenv_jax.rl.batches import TrainRow, train_steps
from genenv_jax.rl.packing import pack_sequences
from tests.support.loop_configs import toy_config

# A hand-built group of 4 episodes (gamma 0.5). Every episode starts in S0; e0 and e1 both reach A
# after their first turn, e0 and e2 both reach B, only e1 reaches C.
#   e0: S0 -> A -> B, reward 1: returns 0.25, 0.5, 1
#   e1: S0 -> A -> C, reward 0: returns 0, 0, 0
#   e2: S0 -> B,      reward 1: returns 0.5, 1
#   e3: S0,           reward 0: returns 0
STATES = [["S0", "A", "B"], ["S0", "A", "C"], ["S0", "B"], ["S0"]]
REWARDS = [1.0, 0.0, 1.0, 0.0]
# Step groups: S0 {0.25, 0, 0.5, 0} mean 0.1875; A {0.5, 0} mean 0.25; B {1, 1} equal; C alone.
BY_HAND_MEAN_NORM = [[0.0625, 0.25, 0.0], [-0.1875, -0.25, 0.0], [0.3125, 0.0], [-0.1875]]
S0_STD = np.sqrt((0.0625 ** 2 + 0.1875 ** 2 + 0.3125 ** 2 + 0.1875 ** 2) / 3)  # ddof 1: 0.2393568
A_STD = np.sqrt(2 * 0.25 ** 2 / 1)                                             # 0.3535534


def test_gigpo_step_advantages_equal_the_hand_worked_group():
    got = gigpo_step_advantages(REWARDS, STATES, 4, gamma=0.5, normalize_by_std=False)
    for g, want in zip(got, BY_HAND_MEAN_NORM):
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-12)
    eps = 1e-6
    got = gigpo_step_advantages(REWARDS, STATES, 4, gamma=0.5, normalize_by_std=True, eps=eps, ddof=1)
    want = [[0.0625 / (S0_STD + eps), 0.25 / (A_STD + eps), 0.0], [-0.1875 / (S0_STD + eps), -0.25 / (A_STD + eps), 0.0],
            [0.3125 / (S0_STD + eps), 0.0], [-0.1875 / (S0_STD + eps)]]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert discounted_returns(1.0, 3, 0.5).tolist() == [0.25, 0.5, 1.0]


def test_gigpo_step_groups_never_cross_task_groups():
    """Two groups of 2 whose episodes share a state key: each group compares only its own turns."""
    got = gigpo_step_advantages([1.0, 0.0, 1.0, 1.0], [["S"], ["S"], ["S"], ["S"]], 2, gamma=0.9,
                                normalize_by_std=False)
    assert [g.tolist() for g in got] == [[0.5], [-0.5], [0.0], [0.0]]
    with pytest.raises(ValueError, match="whole number of groups"):
        gigpo_step_advantages([1.0, 0.0, 1.0], [["S"]] * 3, 2, gamma=0.9)


def test_overlong_penalty_is_dapos_soft_punishment():
    """L_max 20, L_cache 8: no penalty up to 12 tokens, then linear to -factor at the cap."""
    assert overlong_penalty([12], 20, 8) == 0.0
    assert overlong_penalty([16], 20, 8) == pytest.approx(-0.5)
    assert overlong_penalty([20], 20, 8, factor=0.5) == pytest.approx(-0.5)
    assert overlong_penalty([3, 18, 10], 20, 8) == pytest.approx(-0.75)  # the longest turn counts
    assert overlong_penalty([20], 20, 0) == 0.0                          # off
    with pytest.raises(ValueError, match="exceeds the reply cap"):
        overlong_penalty([1], 4, 8)


def _episode(k, states, reward, turn_tokens, observation_tokens):
    """An episode of len(states) turns: turn t has turn_tokens[t] agent tokens, then (except after the
    last) observation_tokens of the environment's."""
    task = Task(domain="toy", task_id="t", category="c", prompt={}, verifier={})
    ep = Episode(task, k, [1, 2], [], states=list(states), reward=reward)
    for t, n in enumerate(turn_tokens):
        ep.tokens += [5] * n
        ep.loss_mask += [1.0] * n
        ep.turns.append({"agent_tokens": n, "finish": "stop", "calls_ok": True})
        if t < len(turn_tokens) - 1:
            ep.tokens += [6] * observation_tokens
            ep.loss_mask += [0.0] * observation_tokens
            ep.turns[-1]["observation_tokens"] = observation_tokens
    return ep


def test_loop_credit_puts_each_turns_gigpo_advantage_on_its_tokens():
    episodes = [_episode(k, s, r, [2] * len(s), 3) for k, (s, r) in enumerate(zip(STATES, REWARDS))]
    group = RolloutGroup(episodes[0].task, episodes)
    loss = rl.GRPOConfig(advantage="gigpo", gigpo_gamma=0.5, gigpo_omega=2.0, normalize_by_std=False)
    (credit,), metrics = group_credits([group], 4, loss, max_new_tokens=16)
    episode_adv = [0.5, -0.5, 0.5, -0.5]
    np.testing.assert_allclose(credit.advantages, episode_adv)
    for ep, values, a_e, steps in zip(episodes, credit.token_advantages, episode_adv, BY_HAND_MEAN_NORM):
        assert values.shape == (len(ep.tokens),)
        want = np.zeros(len(ep.tokens))
        for (start, end), a_s in zip(ep.turn_spans(), steps):
            want[start:end] = a_e + 2.0 * a_s
        np.testing.assert_allclose(values, want, atol=1e-6)
        assert not values[np.asarray(ep.loss_mask) == 0].any()  # observation tokens carry nothing
    assert credit.informative and metrics["agent/gigpo_step_adv_nonzero"] == pytest.approx(6 / 9)


def _groups(rng, count):
    """`count` GiGPO groups of 4 episodes: random anchor paths, 0/1 rewards and reply lengths."""
    groups = []
    for g in range(count):
        episodes = []
        for k in range(4):
            turns = int(rng.integers(1, 4))
            states = [f"g{g}s{int(rng.integers(0, 2))}t{t}" for t in range(turns)]
            episodes.append(_episode(k, states, float(rng.integers(0, 2)),
                                     [int(rng.integers(2, 17)) for _ in range(turns)], 2))
        groups.append(RolloutGroup(episodes[0].task, episodes))
    return groups


def test_a_records_credit_is_computed_once_and_a_subsets_metrics_are_its_own(monkeypatch):
    """Dynamic sampling credits every rolled-out group; the update trains on a draw of them and
    reuses those credits: the advantages and the metrics over the draw equal crediting the draw alone."""
    from genenv_jax.loop import epoch_tasks
    from genenv_jax.loop.credit import credit_records
    from genenv_jax.rl.registry import ADVANTAGE_ESTIMATORS

    loss = rl.GRPOConfig(advantage="gigpo", gigpo_gamma=0.9, overlong_buffer=6)
    groups = _groups(np.random.default_rng(0), 6)
    records = [epoch_tasks.EpochTask(epoch_tasks.GENERATED, g.task, rollouts=g) for g in groups]
    calls = []
    estimator = ADVANTAGE_ESTIMATORS.get("gigpo")
    counting = dataclasses.replace(estimator, fn=lambda batch, cfg: calls.append(len(batch.rewards)) or
                                   estimator.fn(batch, cfg))
    monkeypatch.setitem(ADVANTAGE_ESTIMATORS._entries, "gigpo", counting)
    everything = credit_records(records, 4, loss, 16)
    draw = [records[i] for i in (1, 2, 4)]
    again = credit_records(draw, 4, loss, 16)
    assert calls == [24] and all(a is records[i].credit for a, i in zip(again, (1, 2, 4)))
    alone, alone_metrics = group_credits([r.rollouts for r in draw], 4, loss, 16)
    # The advantages come from a JAX program over 6 groups against one over 3: another shape, so
    # float32 ulps may differ by machine; the step advantages and shaping behind the metrics are
    # per-group numpy, so those compare exactly.
    for reused, fresh in zip(again, alone):
        np.testing.assert_allclose(reused.advantages, fresh.advantages, rtol=1e-6, atol=1e-7)
        for a, b in zip(reused.token_advantages, fresh.token_advantages):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert credit_metrics(again, loss) == alone_metrics
    assert set(alone_metrics) == {"agent/overlong_penalty_mean", "agent/gigpo_step_adv_nonzero",
                                  "agent/gigpo_step_adv_abs_mean"}
    assert credit_metrics(everything, loss) != alone_metrics  # the draw's own, not the epoch's


def test_equal_rewards_carry_step_credit_under_gigpo_only():
    """All four episodes succeed, two in fewer turns: GRPO sees nothing, GiGPO prefers the short path."""
    episodes = [_episode(0, ["S0", "A"], 1.0, [2, 2], 1), _episode(1, ["S0", "A"], 1.0, [2, 2], 1),
                _episode(2, ["S0"], 1.0, [2], 1), _episode(3, ["S0"], 1.0, [2], 1)]
    group = [RolloutGroup(episodes[0].task, episodes)]
    (plain,), _ = group_credits(group, 4, rl.GRPOConfig(), 16)
    (gigpo,), _ = group_credits(group, 4, rl.GRPOConfig(advantage="gigpo", gigpo_gamma=0.5), 16)
    assert not plain.informative and gigpo.informative
    assert gigpo.token_advantages[2][0] > 0 > gigpo.token_advantages[0][0]  # S0: return 1 beats 0.5


def test_overlong_shaping_enters_grpo_advantages_but_not_rewards():
    episodes = [_episode(k, ["S0"], 1.0, [n], 0) for k, n in enumerate([4, 4, 14, 16])]
    group = RolloutGroup(episodes[0].task, episodes)
    loss = rl.GRPOConfig(overlong_buffer=8, normalize_by_std=False)
    (credit,), metrics = group_credits([group], 4, loss, max_new_tokens=16)
    shaped = np.array([1.0, 1.0, 0.25, 0.0])  # 14 tokens: (8 - 14) / 8 = -0.75; 16: -1
    np.testing.assert_allclose(credit.advantages, shaped - shaped.mean(), atol=1e-6)
    assert [ep.reward for ep in episodes] == [1.0] * 4
    assert metrics["agent/overlong_penalty_mean"] == pytest.approx(-1.75 / 4)


def test_per_token_values_are_packed_like_the_response():
    batch = pack_sequences([[1, 2], [3]], [[4, 5, 6], [7]], 0, response_values={"advantages": [[0.1, 0.2, 0.3], [9.0]]},
                           prompt_len=4, response_len=4)
    assert batch["advantages"].shape == batch["tokens"].shape == (2, 8)
    np.testing.assert_allclose(batch["advantages"][0], [0, 0, 0, 0, 0.1, 0.2, 0.3, 0], atol=1e-7)
    np.testing.assert_allclose(batch["advantages"][1], [0, 0, 0, 0, 9.0, 0, 0, 0])
    seen = []

    def train(state, batch):
        seen.append(batch)
        return state, {"loss": 0.0}

    rows = [TrainRow([1], [4, 5], 0.5), TrainRow([1], [4], 0.0, token_scalars=np.array([2.0], np.float32))]
    train_steps(train, None, [rows], rows=2, prompt_len=2, response_len=2, pad_id=0, scalar_key="advantages",
                desc="", show_progress=False)
    np.testing.assert_allclose(seen[0]["advantages"], [[0, 0, 0.5, 0.5], [0, 0, 2.0, 0]])


def test_p_hat_from_the_first_k_rollouts():
    records = [{"task_id": "a", "seed_id": "s", "rewards": [1, 1, 0, 0, 0, 0, 0, 0]},
               {"task_id": "b", "seed_id": "s", "rewards": [0, 0, 0, 1, 1, 1, 1, 1]}]
    (a, b) = curriculum.score_tasks(records, curriculum.CurriculumConfig(p_hat_samples=4))
    assert (a.p_hat, b.p_hat, a.num_rollouts) == (0.5, 0.25, 4)
    (a, b) = curriculum.score_tasks(records, curriculum.CurriculumConfig())
    assert (a.p_hat, b.p_hat) == (0.25, 0.625)
    (a, b) = curriculum.score_tasks(records, curriculum.CurriculumConfig(p_hat_samples=4, granularity="seed_batch"))
    assert a.p_hat == b.p_hat == 0.375


@pytest.mark.usefixtures("toy_domain")
@pytest.mark.parametrize("overrides, message", [
    ({"curriculum.p_hat_samples": 3}, "curriculum.p_hat_samples"),
    ({"agent.train.loss.overlong_buffer": 9}, "agent.train.loss.overlong_buffer"),
    ({"agent.train.loss.advantage": "gigpo", "agent.train.loss.importance_sampling_level": "sequence",
      "agent.train.loss.aggregation": "seq_mean_token_mean"}, "sequence_token"),
    ({"agent.train.loss.advantage": "gae"}, "advantage"),
    ({"dynamic_sampling.filter": "acc"}, "dynamic_sampling.filter"),
])
def test_new_keys_are_checked_in_one_line(overrides, message):
    with pytest.raises((ConfigError, ValueError), match=message) as err:
        toy_config(**overrides)  # rollouts_per_task 2, max_new_tokens 8
    assert "\n" not in str(err.value)


def test_pad_per_step_pads_each_step_to_its_own_bucket_and_keeps_the_update():
    """`pad_per_step`: a step of short prompts is packed to its own length bucket, not the longest of
    the epoch, and the update (an SFT/RWR step on a micro model) is the same up to float rounding."""
    import jax

    from genenv_jax.models import init_params, preset
    from genenv_jax.rl.batches import PolicyState, step_trainer

    cfg = preset("micro")
    step = rl.make_rwr_step(cfg, rl.make_optimizer(rl.OptimizerConfig(learning_rate=1e-2)), rl.RWRConfig(kl_coef=0.0))
    rng = np.random.RandomState(0)
    short = [TrainRow(rng.randint(3, 200, 5).tolist(), rng.randint(3, 200, 4).tolist(), 1.0) for _ in range(2)]
    results = {}
    for per_step in (False, True):
        seen = []
        train = step_trainer(step, "test")

        def recording(state, batch, train=train, seen=seen):
            seen.append(batch["tokens"].shape)
            return train(state, batch)

        params = init_params(cfg, jax.random.key(0))
        state = PolicyState(params, step.init_opt_state(params), None)
        _, history = train_steps(recording, state, [short], rows=2, prompt_len=64, response_len=48, pad_id=0,
                                 scalar_key="rewards", desc="", show_progress=False, pad_per_step=per_step)
        results[per_step] = (seen[0], history[0]["loss"], history[0]["tokens_computed"], history[0]["tokens_real"])
    # prompts of 5 and responses of 4 tokens: both buckets shrink to 16
    assert results[False][0] == (2, 64 + 48) and results[True][0] == (2, 16 + 16)
    assert results[True][1] == pytest.approx(results[False][1], rel=1e-5)
    assert (results[False][2], results[True][2]) == (2 * 112, 2 * 32) and results[True][3] == results[False][3] == 18
