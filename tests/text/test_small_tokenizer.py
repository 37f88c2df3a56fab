"""The study's small SentencePiece tokenizer behind the tokenization interface."""

from __future__ import annotations

import pytest

from genenv_jax.text import small_tokenizer, tokenization
from genenv_jax.text.chat_text import ChatText
from genenv_jax.domains.base import ChatPrompt
from genenv_jax.domains.calc.domain import CalcDomain
from genenv_jax.models.config import preset


@pytest.fixture(scope="module")
def domain():
    return CalcDomain(per_level={"train": 6, "validation": 2, "test": 2})


@pytest.fixture(scope="module")
def trained(domain, tmp_path_factory):
    out = tmp_path_factory.mktemp("study_tok")
    texts = small_tokenizer.domain_training_texts(domain)
    tok = small_tokenizer.train_small_tokenizer(texts, out)
    return out, tok, texts


def test_size_special_ids_and_preset(trained):
    out, tok, _ = trained
    assert 300 <= len(tok) <= small_tokenizer.DEFAULT_VOCAB_SIZE
    ids = {t: tok.convert_tokens_to_ids(t) for t in small_tokenizer.RESERVED}
    assert ids == {"<|endoftext|>": 1, "<|im_start|>": 2, "<|im_end|>": 3, "<tool_call>": 4, "</tool_call>": 5}
    assert tokenization.im_end_id(tok) == 3 and tokenization.pad_id(tok) == 1
    assert tokenization.stop_ids(tok) == (3, 1)
    cfg = preset("study-3m")
    assert cfg.vocab_size >= len(tok) and cfg.vocab_size % 128 == 0
    assert (cfg.bos_token_id, cfg.eos_token_id) == (1, 3)
    assert 2_000_000 <= cfg.num_params() <= 5_000_000
    assert (out / "spm.model").exists() and (out / "tokenizer.json").exists()


UNICODE = ["héllo wörld", "数学 2+2=4 🎉", "tabs\tand  double  spaces\n\n\r\n", " leading and trailing ",
           "\x00\x7f control", "Ωμέγα ∑∫ 𝔘𝔫𝔦", "", "   ", "\n"]


def test_exact_round_trip(trained, domain):
    _, tok, texts = trained
    extra = [domain.reference_response(t) for t in domain.seeds("test")]
    for text in texts + extra + UNICODE:
        ids = tokenization.encode(tok, text)
        assert tokenization.decode(tok, ids) == text, repr(text[:80])
        assert all(0 <= i < len(tok) for i in ids)
    # Unseen characters go through byte pieces, one per UTF-8 byte.
    pieces = tok.convert_ids_to_tokens(tokenization.encode(tok, "🎉"))
    assert pieces == ["<0xF0>", "<0x9F>", "<0x8E>", "<0x89>"]


def test_same_segmentation_as_sentencepiece(trained, domain):
    import sentencepiece as spm

    out, tok, texts = trained
    sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
    samples = texts[::5] + [domain.reference_response(t) for t in domain.seeds("test")] + UNICODE
    for text in samples:
        assert sp.encode(text) == tokenization.encode(tok, text), repr(text[:80])


def test_chat_encoding_uses_single_special_ids(trained, domain):
    out, tok, _ = trained
    task = domain.seeds("validation")[0]
    prompt = domain.agent_prompt(task)
    ids = tokenization.encode_chat(tok, prompt.messages, prompt.tools)
    text = tokenization.render_chat(tok, prompt.messages, prompt.tools)
    assert tokenization.decode(tok, ids) == text
    assert ids.count(2) == text.count("<|im_start|>") == 3  # system, user, generation prompt
    assert ids.count(3) == text.count("<|im_end|>") == 2
    generation = tokenization.encode(tok, tokenization.GENERATION_PROMPT)
    assert generation[0] == 2 and ids[-len(generation):] == generation
    answer = tokenization.encode(tok, domain.reference_response(task))
    assert answer[0] == 4 and answer[-1] == 5
    # The agent's answer compresses well: a few dozen pieces.
    assert len(answer) < 40


def test_save_load_and_chat_text(trained, domain):
    out, tok, _ = trained
    loaded = tokenization.load_tokenizer(out)
    assert len(loaded) == len(tok)
    chat = ChatText.load(str(out))
    assert (chat.pad_id, chat.stop_ids, chat.end_id) == (1, (3, 1), 3)
    task = domain.seeds("test")[0]
    prompt = domain.agent_prompt(task)
    assert chat.prompt(prompt) == tokenization.encode_chat(tok, prompt.messages, prompt.tools)
    sim = domain.simulator_prompt(task, [0.2], "easier")
    assert chat.decode(chat.prompt(sim)).count("question:") >= 1
    cont = chat.continuation([{"role": "user", "content": "Compute 1 + 2."}])
    assert tokenization.decode(tok, cont) == "\n<|im_start|>user\nCompute 1 + 2.<|im_end|>\n<|im_start|>assistant\n"
    # decode(skip_special_tokens=True) drops the chat tokens but keeps the tool-call tags.
    reference = domain.reference_response(task)
    assert chat.decode(chat.encode(reference + "<|im_end|>")) == reference
    assert chat.prompt(ChatPrompt(messages=[{"role": "user", "content": "hi"}]))[0] == 2
    summary = small_tokenizer.tokenizer_summary(out)
    assert summary["vocab_size"] == len(tok) and summary["stop_ids"] == [3, 1]


def test_training_is_deterministic(domain, tmp_path):
    texts = small_tokenizer.domain_training_texts(domain)[:60]
    a = small_tokenizer.train_small_tokenizer(texts, tmp_path / "a", vocab_size=320)
    b = small_tokenizer.train_small_tokenizer(texts, tmp_path / "b", vocab_size=320)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    assert len(a) == len(b) <= 320
    with pytest.raises(ValueError):
        small_tokenizer.train_small_tokenizer([], tmp_path / "c")


def test_the_loop_tests_toy_tokenizer_is_what_training_on_the_toy_texts_gives(tmp_path):
    """tests/fixtures/toy_tokenizer (the loop tests' vocabulary, tests/support/loop_configs.py) is
    regenerated by training on `toy_tokenizer_texts()`: the same files, byte for byte."""
    from tests.support.loop_configs import TOY_PRESET, TOY_TOKENIZER, toy_tokenizer_texts

    small_tokenizer.train_small_tokenizer(toy_tokenizer_texts(), tmp_path, vocab_size=small_tokenizer.DEFAULT_VOCAB_SIZE)
    committed = sorted(p.name for p in TOY_TOKENIZER.iterdir())
    assert committed == sorted(p.name for p in tmp_path.iterdir())
    for name in committed:
        assert (tmp_path / name).read_bytes() == (TOY_TOKENIZER / name).read_bytes(), name
    assert len(ChatText.load(TOY_TOKENIZER).tokenizer) <= preset(TOY_PRESET).vocab_size
