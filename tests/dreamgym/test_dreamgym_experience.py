"""The experience model's SFT rows and steps on a tiny random Qwen2: each row's prompt carries the
demos retrieval finds for it but never the transition itself, the target is the reply format, and a
few SFT steps lower the loss; then the model's greedy replies go through the predictor."""

import jax
import pytest

from genenv_jax.text.chat_text import ChatText
from genenv_jax.dreamgym import experience_text as experience_model
from genenv_jax.dreamgym import sft as training
from genenv_jax.dreamgym.embedding import Embedder, transition_key_text
from genenv_jax.dreamgym.experience_text import PromptSettings
from genenv_jax.dreamgym.predictor import Predictor, Query, Retrieval
from genenv_jax.dreamgym.replay import ReplayBuffer
from genenv_jax.domains.experience import Transition
from genenv_jax.models import init_params, preset
from genenv_jax.workdir.pools import Pool
from genenv_jax.rl import OptimizerConfig, RWRConfig, make_optimizer, make_rwr_step
from genenv_jax.sampling import Sampler


def _t(i, state, action, next_state, reward=0.0):
    return Transition(domain="toy", task_id=f"game{i % 2}", task="put a mug on the desk", history=[], state=state,
                      action=action, next_state=next_state, reward=reward, done=reward >= 0.5, valid=True,
                      reasoning=f"because {action}", source="expert", step=i)


TRANSITIONS = [_t(0, "You are in a room.", "go to desk 1", "You arrive at desk 1."),
               _t(1, "You arrive at desk 1.", "take mug 1 from desk 1", "You pick up the mug 1."),
               _t(2, "You are in a room.", "go to shelf 1", "You arrive at shelf 1."),
               _t(3, "You pick up the mug 1.", "move mug 1 to desk 1", "You move the mug 1 to the desk 1.", 1.0)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    text = ChatText.load(None)
    cfg = preset("tiny", param_dtype="float32", dtype="float32")
    params = init_params(cfg, jax.random.key(0))
    embedder = Embedder(cfg, jax.tree.map(lambda x: x.copy(), params), text)  # SFT steps donate `params`
    buffer = ReplayBuffer(Pool(tmp_path_factory.mktemp("replay"), "replay"))
    buffer.add(TRANSITIONS, embedder([transition_key_text(t) for t in TRANSITIONS]))
    return text, cfg, params, Retrieval(buffer, embedder, top_k=2)


def test_sft_rows_show_retrieved_demos_but_never_the_row_itself(setup):
    text, _, _, retrieval = setup
    rows = training.sft_rows(text, TRANSITIONS, retrieval, PromptSettings(), max_prompt_len=2048)
    assert len(rows) == len(TRANSITIONS)
    for t, row in zip(TRANSITIONS, rows):
        prompt = text.tokenizer.decode(row.prompt)
        assert prompt.count("Example ") == 2
        own = f"State: {t.state}\nAction: {t.action}\nNext state: {t.next_state}"
        assert own not in prompt, t.step   # its own (task, step) is excluded from its demos
        assert text.decode(row.response) == experience_model.target(t, PromptSettings())
        assert row.response[-1] == text.end_id


@pytest.mark.slow
def test_a_few_sft_steps_lower_the_loss_and_replies_go_through_the_predictor(setup):
    text, cfg, params, retrieval = setup
    settings = PromptSettings(reasoning=False)
    rows = training.sft_rows(text, TRANSITIONS, retrieval, settings, max_prompt_len=2048)
    step = make_rwr_step(cfg, make_optimizer(OptimizerConfig(learning_rate=1e-2, weight_decay=0.0)),
                         RWRConfig(reward_lambda=0.0, weight_norm="none", kl_coef=0.0, chunk_size=64))
    train_fn, state_of = training.bare_sft(step)
    state, metrics = training.train(train_fn, state_of(params), rows, steps=8, batch_size=4, rows_multiple=1, seed=0,
                                    pad_id=text.pad_id)
    assert metrics["experience/sft_loss_last"] < 0.7 * metrics["experience/sft_loss_first"]
    sampler = Sampler(cfg, pad_id=text.pad_id)
    placed = sampler.prepare_params(state.params)
    calls = []

    def sample(prompts, seed):
        calls.append(len(prompts))
        return sampler.generate(placed, prompts, max_new_tokens=24, temperature=0.0, seed=seed,
                                stop_tokens=text.stop_ids)

    predictor = Predictor(text, sample, settings, retrieval, max_prompt_len=2048)
    predictions, counts = predictor.predict([Query.of(t, exclude_self=True) for t in TRANSITIONS], seed=0)
    assert calls == [4] and len(predictions) == 4   # one batched sampler call
    # whatever 8 steps taught it, every reply is either parsed or counted as a failure
    assert sum(not p.ok for p in predictions) == sum(counts.values())
    with pytest.raises(ValueError, match="no rows"):
        training.train(train_fn, state, [], steps=1, batch_size=1, rows_multiple=1, seed=0, pad_id=0)
