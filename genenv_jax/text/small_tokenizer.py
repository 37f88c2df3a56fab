"""A small SentencePiece tokenizer for miniature study models (docs/reproduction.md).

`train_small_tokenizer(texts, out_dir)` trains a SentencePiece BPE model with byte fallback
in-process on the given texts (a domain's prompts, answers and chat-format strings), a few
hundred pieces, with the Qwen chat special tokens as reserved single pieces, and saves it as a
Hugging Face fast tokenizer: `tokenizer.json` + `tokenizer_config.json` (with Qwen2.5-Instruct's
chat template) next to the SentencePiece files (`spm.model`, `spm.vocab`). So
`tokenization.load_tokenizer(out_dir)` / `ChatText.load(out_dir)` read it back like any model
directory, and `encode_chat`, `encode_continuation`, `stop_ids`, `im_end_id` and `pad_id` work
on it unchanged.

Conversion: the `tokenizers` model is a BPE over the SentencePiece vocabulary (same pieces, same
ids), with merges ranked by the id of the piece they make (SentencePiece BPE's score order),
`byte_fallback=True`, a space -> "▁" normaliser and the inverse decoder. The special tokens are
added tokens at their SentencePiece ids, so they are matched in text before anything else.
Round trip is exact for any text without the character "▁" (U+2581), which decodes as a space.
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Callable, Iterable

from genenv_jax.text.tokenization import ENDOFTEXT, IM_END, IM_START, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

UNK = "<unk>"
# Ids 1..5 in this order (id 0 is <unk>); special tokens are skipped by decode(skip_special_tokens).
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
TOOL_TOKENS = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)  # added tokens that are not special (as in Qwen)
RESERVED = SPECIAL_TOKENS + TOOL_TOKENS
SPACE = "\u2581"
DEFAULT_VOCAB_SIZE = 512
SPM_MODEL_FILE = "spm.model"


def _bpe_merges(vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Merges that rebuild every multi-character piece, ranked by the id of the piece they make."""
    merges = []
    for piece, pid in sorted(vocab.items(), key=lambda kv: kv[1]):
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            if left in vocab and right in vocab:
                merges.append((pid, vocab[left], vocab[right], left, right))
    merges.sort()
    return [(left, right) for _, _, _, left, right in merges]


def small_tokenizer_once(texts: Callable[[], Iterable[str]], out_dir: str | os.PathLike,
                         vocab_size: int = DEFAULT_VOCAB_SIZE) -> Path:
    """`out_dir`, trained on `texts()` unless it already holds a tokenizer; atomic (a staging
    directory beside it, renamed), so a killed run never leaves half a tokenizer behind."""
    out = Path(out_dir)
    if (out / "tokenizer.json").is_file():
        return out
    staging = out.parent / f".{out.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    train_small_tokenizer(texts(), staging, vocab_size=vocab_size)
    staging.rename(out)
    return out


def train_small_tokenizer(texts: Iterable[str], out_dir: str | os.PathLike, vocab_size: int = DEFAULT_VOCAB_SIZE,
                          model_type: str = "bpe"):
    """Trains on `texts`, saves to `out_dir` and returns the loaded HF tokenizer.

    vocab_size counts every piece (the 256 byte pieces and the reserved tokens included); it is
    an upper bound (`hard_vocab_limit=False`): a small corpus may give fewer pieces.
    """
    import sentencepiece as spm

    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("train_small_tokenizer: no training texts")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    # Identity normalisation, no dummy prefix and no whitespace folding: the pieces see the text as
    # it is (newlines included), which is what makes the round trip exact.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=buffer, vocab_size=vocab_size, model_type=model_type,
        byte_fallback=True, character_coverage=1.0, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
        user_defined_symbols=list(RESERVED), normalization_rule_name="identity", add_dummy_prefix=False,
        remove_extra_whitespaces=False, split_digits=True, allow_whitespace_only_pieces=True,
        hard_vocab_limit=False, max_sentence_length=1 << 16, num_threads=1, minloglevel=2)
    (out / SPM_MODEL_FILE).write_bytes(buffer.getvalue())
    processor = spm.SentencePieceProcessor(model_proto=buffer.getvalue())
    vocab = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
    for i, token in enumerate(RESERVED, start=1):
        if vocab.get(token) != i:
            raise RuntimeError(f"SentencePiece put {token!r} at id {vocab.get(token)}, expected {i}")
    (out / "spm.vocab").write_text("".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i)}\n"
                                           for i in range(processor.get_piece_size())), encoding="utf-8")
    tokenizer = _hf_tokenizer(vocab, model_type)
    tokenizer.save_pretrained(out)
    from genenv_jax.text.tokenization import load_tokenizer

    return load_tokenizer(out)


def _hf_tokenizer(vocab: dict[str, int], model_type: str):
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers
    from transformers import PreTrainedTokenizerFast

    from genenv_jax.text.tokenization import qwen25_chat_template

    if model_type != "bpe":
        raise ValueError(f"model_type {model_type!r}: only 'bpe' converts to a tokenizers model here")
    model = models.BPE(vocab=vocab, merges=_bpe_merges(vocab), unk_token=UNK, byte_fallback=True, fuse_unk=True)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Replace(" ", SPACE)
    tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (UNK,) + SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=UNK, eos_token=IM_END, pad_token=ENDOFTEXT,
                                   chat_template=qwen25_chat_template())


def domain_training_texts(domain, tokenizer_for_chat=None, splits=("train",)) -> list[str]:
    """Texts to train a study tokenizer on: each seed's agent prompt and simulator prompt rendered
    in the chat format with its reference reply, plus the question, reference answer and reference
    generation alone. Rendering uses `tokenizer_for_chat`'s chat template (default: Qwen2.5-Instruct's
    template rendered directly, no tokenizer needed)."""
    from genenv_jax.text.tokenization import render_chat

    tasks = [t for split in splits for t in domain.seeds(split)]
    raw = []
    for t in tasks:
        raw += [t.prompt.get("question", ""), domain.reference_response(t), domain.reference_generation(t)]
    if tokenizer_for_chat is None:
        tokenizer_for_chat = TemplateOnly()
    texts = list(raw)
    for t in tasks:
        ap = domain.agent_prompt(t)
        sp = domain.simulator_prompt(t)
        shown = ap.text if ap.text is not None else render_chat(tokenizer_for_chat, ap.messages, ap.tools,
                                                                 add_generation_prompt=True)
        texts.append(shown + domain.reference_response(t) + IM_END + "\n")
        texts.append(render_chat(tokenizer_for_chat, sp.messages, sp.tools, add_generation_prompt=True)
                     + domain.reference_generation(t) + IM_END + "\n")
    return texts


class TemplateOnly:
    """Just enough of a tokenizer for `render_chat`: Qwen2.5-Instruct's template, rendered by jinja
    the way transformers does it."""

    def __init__(self):
        from genenv_jax.text.tokenization import qwen25_chat_template

        self.chat_template = qwen25_chat_template()

    def apply_chat_template(self, messages, tools=None, tokenize=False, add_generation_prompt=True):
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=self.chat_template,
                                            add_generation_prompt=add_generation_prompt)
        return rendered[0]


def tokenizer_summary(out_dir: str | os.PathLike) -> dict:
    """Piece count and special ids of a saved study tokenizer (for run metadata)."""
    from genenv_jax.text import tokenization

    tok = tokenization.load_tokenizer(out_dir)
    return {"vocab_size": len(tok), "pad_id": tokenization.pad_id(tok), "stop_ids": list(tokenization.stop_ids(tok)),
            "im_end_id": tokenization.im_end_id(tok),
            "special_ids": {t: int(tok.convert_tokens_to_ids(t)) for t in RESERVED}}


__all__ = ["DEFAULT_VOCAB_SIZE", "RESERVED", "SPECIAL_TOKENS", "TOOL_TOKENS", "domain_training_texts",
           "tokenizer_summary", "train_small_tokenizer"]
