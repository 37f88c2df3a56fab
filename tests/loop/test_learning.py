"""The agent's update subset (`loop.learning.at_most`, `update_agent`'s draw under
`agent.train.tasks_per_epoch`): groups whose rewards differ are drawn first."""

import numpy as np

from genenv_jax.loop.learning import at_most


def test_at_most_without_a_mask_is_the_seeded_uniform_draw():
    items = list(range(48))
    want = np.sort(np.random.default_rng(7).choice(48, size=8, replace=False)).tolist()
    assert at_most(items, 8, 7) == want
    assert at_most(items, 0, 7) == items and at_most(items[:5], 8, 7) == items[:5]


def test_at_most_draws_the_marked_items_first_and_tops_up_from_the_rest():
    items = list(range(48))
    first = np.zeros(48, bool)
    first[[3, 10, 17, 30, 44]] = True
    for seed in range(20):
        got = at_most(items, 8, seed, first=first)
        assert got == sorted(got) and len(set(got)) == 8
        assert {3, 10, 17, 30, 44} <= set(got)  # every marked item, 3 others
    first[:] = False
    first[::4] = True  # 12 marked, more than wanted: only marked ones, a different draw per seed
    draws = {tuple(at_most(items, 8, seed, first=first)) for seed in range(20)}
    assert all(i % 4 == 0 for d in draws for i in d) and len(draws) > 1


def test_the_static_arms_draw_would_now_have_trained_on_its_mixed_groups():
    """The calc study's static arm, epoch 0: the group reward sums (of 4 rollouts) its 48 tasks got.
    The uniform draw picked 8 groups of all-equal rewards; the draw now picks 8 of the 13 mixed."""
    sums = [4, 0, 0, 3, 4, 3, 4, 1, 0, 4, 3, 1, 4, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 4, 4, 4, 0, 2,
            1, 0, 2, 0, 3, 4, 4, 3, 4, 0, 0, 0, 1, 1, 4]
    mixed = np.array([0 < s < 4 for s in sums])
    from genenv_jax.loop.context import STREAM_UPDATE_SUBSET, epoch_seed

    seed = epoch_seed(0, 0, STREAM_UPDATE_SUBSET)
    assert not mixed[at_most(list(range(48)), 8, seed)].any()        # the draw it had
    assert mixed[at_most(list(range(48)), 8, seed, first=mixed)].all()  # the draw it gets now
