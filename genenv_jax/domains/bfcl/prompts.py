"""The agent's BFCL prompt in each named format: BFCL's own Qwen handlers, written out as they write them.

BFCL's Qwen handlers do not use a chat template: each writes Qwen's chat markup itself
(`_format_prompt`) and sends the text to a completions endpoint. The formats here write the same
text, so the model sees the bytes BFCL shows it (docs/bfcl.md, "Prompt formats"):

function-calling mode (tools in the system turn, calls in `<tool_call>` blocks):
- `bfcl_fc_qwen25`: `QwenFCHandler` of gorilla commit 7dfa6747 (PR #925, registered for
  Qwen2.5-*-Instruct-FC from 2025-03-14 to 2025-05-24), which produced the published Qwen2.5 FC
  figures: Qwen2.5's persona line as the default system text, each tool as
  `"\\n" + json.dumps(tool, indent=4) + "\\n"`, a system turn even without tools.
- `bfcl_fc`: bfcl-eval 2026.3.23's `QwenFCHandler` (Qwen3's template): no persona line, each tool as
  `"\\n" + json.dumps(tool)`, no system turn without tools or a system message.
- `qwen25_template`: the tokenizer's own chat template with the docs as `tools` (this project's
  format before issue 50: Qwen2.5's template writes non-ASCII as is, where BFCL writes `\\uXXXX`).

prompting mode (BFCL's system prompt asks for `[func(a=v)]`; no chat-template tools):
- `bfcl_prompting_qwen25`: 7dfa6747's `QwenHandler` with that commit's system prompt (in force
  until the V4 release of 2025-08-25, so behind the published BFCL v3 prompt figures): the docs
  written as a Python list (`str.format` of the list).
- `bfcl_prompting`: bfcl-eval 2026.3.23's `QwenHandler` with its own system prompt, built by its own
  `system_prompt_pre_processing_chat_model` (the docs as `json.dumps(functions, indent=4)`).

The function docs passed in already carry BFCL's Python hint (domain.py), as BFCL's loader adds it.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Mapping, Sequence

from genenv_jax.domains.bfcl import official
from genenv_jax.text.chat_text import ChatPrompt, Message

MODES = ("fc", "prompting")
FORMATS = {"fc": ("bfcl_fc_qwen25", "bfcl_fc", "qwen25_template"),
           "prompting": ("bfcl_prompting_qwen25", "bfcl_prompting")}
# The formats behind the figures docs/bfcl.md compares with (BFCL v3, Qwen2.5-*-Instruct).
DEFAULT_FORMATS = {"fc": "bfcl_fc_qwen25", "prompting": "bfcl_prompting_qwen25"}

QWEN25_PERSONA = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
_TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
_TOOLS_TAIL = ('\n</tools>\n\nFor each function call, return a json object with function name and arguments '
               'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
               '<args-json-object>}\n</tool_call><|im_end|>\n')
GENERATION = "<|im_start|>assistant\n"

# 7dfa6747's prompting-mode system prompt (bfcl/model_handler/constant.py, DEFAULT_SYSTEM_PROMPT),
# verbatim; `{functions}` is filled by `str.format` with the list of docs.
QWEN25_PROMPTING_SYSTEM = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose.\n"
    "If none of the functions can be used, point it out. If the given question lacks the parameters required "
    "by the function, also point it out.\n"
    "You should only return the function calls in your response.\n\n"
    "If you decide to invoke any of the function(s), you MUST put it in the format of [func_name1(params_name1"
    "=params_value1, params_name2=params_value2...), func_name2(params)]\n"
    "You SHOULD NOT include any other text in the response.\n\n"
    "At each turn, you should try your best to complete the tasks requested by the user within the current "
    "turn. Continue to output functions to call until you have fulfilled the user's request to the best of "
    "your ability. Once you have no more functions to call, the system will consider the current turn "
    "complete and proceed to the next turn or task.\n"
    "\nHere is a list of functions in JSON format that you can invoke.\n{functions}\n\n")


def _turn(role: str, content: str) -> str:
    return f"<|im_start|>{role}\n{content}<|im_end|>\n"


def _check_roles(messages: Sequence[Mapping[str, Any]], fmt: str) -> None:
    for i, m in enumerate(messages):
        if m.get("role") not in ("system", "user", "assistant") or not isinstance(m.get("content"), str):
            raise ValueError(f"bfcl prompt_format={fmt}: message {i} is not a system, user or assistant "
                             f"message with text content (single-turn BFCL questions hold only those)")


def _qwen3_turns(messages: Sequence[Mapping[str, Any]]) -> str:
    """The turns after the system turn as bfcl-eval's current Qwen handlers write them (Qwen3's
    template: an assistant message loses its `<think>` part, unless it follows the last query)."""
    last_query = len(messages) - 1
    for idx in range(len(messages) - 1, -1, -1):
        content = messages[idx]["content"]
        if messages[idx]["role"] == "user" and not (content.startswith("<tool_response>")
                                                    and content.endswith("</tool_response>")):
            last_query = idx
            break
    out = ""
    for idx, message in enumerate(messages):
        role, content = message["role"], message["content"]
        if role == "user" or (role == "system" and idx != 0):
            out += _turn(role, content)
        elif role == "assistant":
            reasoning = message.get("reasoning_content") or ""
            if not reasoning and "</think>" in content:
                parts = content.split("</think>")
                reasoning = parts[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
                content = parts[-1].lstrip("\n")
            if idx > last_query and (idx == len(messages) - 1 or reasoning):
                out += (f"<|im_start|>{role}\n<think>\n" + reasoning.strip("\n") + "\n</think>\n\n"
                        + content.lstrip("\n"))
            else:
                out += f"<|im_start|>{role}\n{content}"
            out += "<|im_end|>\n"
    return out


def bfcl_fc(messages: Sequence[Mapping[str, Any]], functions: Sequence[Mapping[str, Any]]) -> str:
    """bfcl-eval 2026.3.23's `QwenFCHandler._format_prompt` (for system, user and assistant messages)."""
    out = ""
    if functions:
        out += "<|im_start|>system\n"
        if messages[0]["role"] == "system":
            out += messages[0]["content"] + "\n\n"
        out += _TOOLS_HEAD + "".join(f"\n{json.dumps(tool)}" for tool in functions) + _TOOLS_TAIL
    elif messages[0]["role"] == "system":
        out += _turn("system", messages[0]["content"])
    return out + _qwen3_turns(messages) + GENERATION


def bfcl_fc_qwen25(messages: Sequence[Mapping[str, Any]], functions: Sequence[Mapping[str, Any]]) -> str:
    """7dfa6747's `QwenFCHandler._format_prompt` (for system, user and assistant messages without tool calls)."""
    system = messages[0]["content"] if messages[0]["role"] == "system" else QWEN25_PERSONA
    if functions:
        out = ("<|im_start|>system\n" + system + "\n\n" + _TOOLS_HEAD
               + "".join(f"\n{json.dumps(tool, indent=4)}\n" for tool in functions) + _TOOLS_TAIL)
    else:
        out = _turn("system", system)
    for idx, message in enumerate(messages):
        if message["role"] != "system" or idx != 0:
            out += _turn(message["role"], message["content"])
    return out + GENERATION


def prompting_messages(fmt: str, messages: Sequence[Mapping[str, Any]], functions: Sequence[Mapping[str, Any]],
                       entry_id: str) -> list[Message]:
    """The question with BFCL's prompting system prompt in front (merged into a leading system message,
    as `system_prompt_pre_processing_chat_model` does). `entry_id` picks BFCL's prompt variant; ids of
    this project's tasks hold no ':' and get the default one."""
    messages = copy.deepcopy([dict(m) for m in messages])
    if fmt == "bfcl_prompting":
        return official.handler_utils().system_prompt_pre_processing_chat_model(
            messages, copy.deepcopy(list(functions)), entry_id.replace(":", "_"))
    system = QWEN25_PROMPTING_SYSTEM.format(functions=list(functions))
    if messages[0]["role"] == "system":
        messages[0]["content"] = system + "\n\n" + messages[0]["content"]
    else:
        messages.insert(0, {"role": "system", "content": system})
    return messages


def agent_prompt(fmt: str, messages: Sequence[Mapping[str, Any]], functions: Sequence[Mapping[str, Any]],
                 entry_id: str) -> ChatPrompt:
    """The agent's prompt in format `fmt` for a question and its (hinted) function docs."""
    messages = [dict(m) for m in messages]
    functions = copy.deepcopy(list(functions))
    if fmt == "qwen25_template":
        return ChatPrompt(messages=messages, tools=functions or None)
    _check_roles(messages, fmt)
    if fmt == "bfcl_fc":
        return ChatPrompt(messages=messages, tools=functions or None, text=bfcl_fc(messages, functions))
    if fmt == "bfcl_fc_qwen25":
        return ChatPrompt(messages=messages, tools=functions or None, text=bfcl_fc_qwen25(messages, functions))
    if fmt not in FORMATS["prompting"]:
        raise ValueError(f"bfcl prompt_format {fmt!r}: not one of {sorted(FORMATS['fc'] + FORMATS['prompting'])}")
    shown = prompting_messages(fmt, messages, functions, entry_id)
    # Both QwenHandlers write a single-turn question (system, user, assistant turns) turn by turn;
    # the current one also drops an earlier assistant turn's <think> part, as Qwen3's template does.
    text = (_turn("system", shown[0]["content"]) + _qwen3_turns(shown) + GENERATION if fmt == "bfcl_prompting"
            else "".join(_turn(m["role"], m["content"]) for m in shown) + GENERATION)
    return ChatPrompt(messages=shown, text=text)
