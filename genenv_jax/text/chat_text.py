"""Chat prompts (messages plus tool schemas) and the tokenizer as the loop and the evaluator use it:
chat prompts and observations -> ids, ids -> text, and the special ids that end or close a turn."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from genenv_jax.text import tokenization
from genenv_jax.text.gguf_tokenizer import gguf_tokenizer, is_gguf_path

Message = dict[str, Any]  # a chat message: {"role": ..., "content": ...}


@dataclasses.dataclass(frozen=True)
class ChatPrompt:
    """Chat messages plus the tool schemas the chat template lists in the system turn.

    Turn it into token ids with `ChatText.prompt`: the tokenizer's chat template renders `messages`
    and `tools`, unless `text` is set. `text` is the prompt already written out in a benchmark's own
    format (BFCL's handlers write Qwen's chat markup themselves, not through the template: see
    docs/bfcl.md); the ids are then that text's tokens, and `messages` / `tools` only describe it.
    """

    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    text: str | None = None


@dataclasses.dataclass(frozen=True)
class ChatText:
    """The loop's tokenizer facade: a tokenizer plus the ids that pad, stop and close a turn."""

    tokenizer: object
    pad_id: int
    stop_ids: tuple[int, ...]
    end_id: int  # <|im_end|>: closes every assistant turn (and every SFT target)

    @classmethod
    def load(cls, directory: str | None) -> "ChatText":
        """From a model / tokenizer directory, a GGUF file (its own tokenizer), or the bundled Qwen2.5
        tokenizer when None."""
        tok = gguf_tokenizer(directory) if directory and is_gguf_path(directory) else tokenization.load_tokenizer(directory)
        return cls.of(tok)

    @classmethod
    def of(cls, tok) -> "ChatText":
        return cls(tok, tokenization.pad_id(tok), tokenization.stop_ids(tok), tokenization.im_end_id(tok))

    def prompt(self, prompt: ChatPrompt) -> list[int]:
        """The prompt's ids: its own `text` when it has one, else its messages through the chat template."""
        if prompt.text is not None:
            return tokenization.encode(self.tokenizer, prompt.text)
        return tokenization.encode_chat(self.tokenizer, prompt.messages, prompt.tools)

    def continuation(self, messages: Sequence[Message]) -> list[int]:
        """Ids appended after an agent turn to show `messages` and open the next agent turn."""
        return tokenization.encode_continuation(self.tokenizer, messages)

    def encode(self, text: str) -> list[int]:
        return tokenization.encode(self.tokenizer, text)

    def encode_spelled(self, text: str) -> list[int]:
        """`encode`, with added tokens spelled by ordinary ones (`tokenization.encode_spelled`)."""
        return tokenization.encode_spelled(self.tokenizer, text)

    def decode(self, tokens: Sequence[int]) -> str:
        return tokenization.decode(self.tokenizer, tokens, skip_special_tokens=True)
