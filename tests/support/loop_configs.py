"""The toy-domain run config the loop tests share (small random models, 2 rollouts, 2 epochs).

The models are the `tiny-512` preset (`tiny`'s body over a 512-piece vocabulary) reading the toy
tokenizer in tests/fixtures/toy_tokenizer (437 SentencePiece pieces trained on the toy domain's
texts by `toy_tokenizer_texts`; tests/text/test_small_tokenizer.py checks the files are what that
training gives). With Qwen's 151,936-token vocabulary instead, the vocabulary is nearly all of a
tiny model's work (its LM head, sampling and loss over 152k logits a token): a warm toy run took
33.5 s, against 5.3 s with this vocabulary (both beside a study run) (docs/benchmarks.md, "Test suite")."""

from genenv_jax.configs import base
from genenv_jax.configs.run_config import RunConfig
from tests.support import FIXTURES

TOY_TOKENIZER = FIXTURES / "toy_tokenizer"
TOY_PRESET = "tiny-512"


def toy_tokenizer_texts() -> list[str]:
    """What the toy tokenizer was trained on: the toy domain's chat-format texts over 10 seeds."""
    from genenv_jax.text.small_tokenizer import domain_training_texts
    from tests.support.toy_domain import ToyDomain

    return domain_training_texts(ToyDomain(num_seeds=10))


def toy_config_dict(**overrides):
    """The toy run's ConfigDict; `overrides` are dotted keys (`configs.base.apply`: an unknown key is
    a KeyError naming it)."""
    c = base.get_config()
    c.domain.name = "toy"
    c.domain.options = {"num_seeds": 4}
    c.tokenizer_dir = str(TOY_TOKENIZER)
    for model in (c.agent, c.simulator):
        model.update(preset=TOY_PRESET, param_dtype="float32", dtype="float32", remat_policy="none")
        model.sampling.update(max_new_tokens=8, temperature=1.0, batch_size=16)
        model.train.loss.chunk_size = 16
        model.optimizer.learning_rate = 1e-3
        model.train.tasks_per_step = 4
    c.update(epochs=2, seeds_per_epoch=4, variants_per_seed=1, rollouts_per_task=2)
    c.curriculum.k_min = 0.5  # with 2 rollouts p_hat is 0, 0.5 or 1: let every task into the band
    c.replay.tasks_per_epoch = 2
    c.log.progress_bars = False
    return base.apply(c, overrides)


def toy_config(num_devices=None, **overrides) -> RunConfig:
    return RunConfig.from_config_dict(toy_config_dict(**overrides), num_devices=num_devices)
