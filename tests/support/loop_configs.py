"""The toy-domain run config the loop tests share (tiny random models, 2 rollouts, 2 epochs)."""

from genenv_jax.configs import base
from genenv_jax.configs.run_config import RunConfig


def toy_config_dict(**overrides):
    c = base.get_config()
    c.domain.name = "toy"
    c.domain.options = {"num_seeds": 4}
    for model in (c.agent, c.simulator):
        model.update(preset="tiny", param_dtype="float32", dtype="float32", remat_policy="none")
        model.sampling.update(max_new_tokens=8, temperature=1.0, batch_size=16)
        model.train.loss.chunk_size = 16
        model.optimizer.learning_rate = 1e-3
        model.train.tasks_per_step = 4
    c.update(epochs=2, seeds_per_epoch=4, variants_per_seed=1, rollouts_per_task=2)
    c.curriculum.k_min = 0.5  # with 2 rollouts p_hat is 0, 0.5 or 1: let every task into the band
    c.replay.tasks_per_epoch = 2
    c.log.progress_bars = False
    for key, value in overrides.items():
        node = c
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value
    return c


def toy_config(num_devices=None, **overrides) -> RunConfig:
    return RunConfig.from_config_dict(toy_config_dict(**overrides), num_devices=num_devices)
