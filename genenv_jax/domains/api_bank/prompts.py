"""The agent's prompts for API-Bank items, in the official text format or as a tool-calling chat.

official: one user message holding the test file's `instruction` and `input` as API-Bank writes
  them (the model answers "API-Request: [Name(k='v')]" or with the AI's reply).
structured: the dialogue as a chat (User -> user, AI -> assistant, an earlier call -> an assistant
  `<tool_call>` and a tool message with its result), the shown API descriptions as tools; the
  model answers with a `<tool_call>` block or the reply text.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from genenv_jax.domains.api_bank.calls import official_text, render_call, result_text, tool_schema
from genenv_jax.domains.base import ChatPrompt, Message

STRUCTURED_SYSTEM = (
    "You are an AI assistant that helps the user by calling APIs. The current year is 2023. Continue the "
    "dialogue: when the next step is an API call, reply with exactly one call in a <tool_call> block; when "
    "the next step is a reply to the user, answer in plain text.")
LEVEL3_SYSTEM = (
    "You are an AI assistant that fulfils the user's requirement by calling APIs. The current year is 2023. "
    "Only the ToolSearcher API is described to you: call it with keywords to find the API you need (it "
    "returns that API's description), then call that API. Make one call per reply and wait for its "
    "result. When the requirement is fulfilled, reply to the user in plain text without a call.")
LEVEL3_OFFICIAL_FORMAT = (
    "Make one call per reply, written as API-Request: [ApiName(key1='value1', key2='value2', ...)]; its result "
    "comes back as API-Request: [...]->result. When the requirement is fulfilled, reply to the user as "
    "AI: ... without a call.")


def official_prompt(item: Mapping[str, Any]) -> ChatPrompt:
    """The official instruction and input as one user message (no tools)."""
    return ChatPrompt(messages=[{"role": "user", "content": item["instruction"].strip() + "\n\n" + item["input"]}])


def dialogue_messages(history: Sequence[Mapping[str, Any]]) -> list[Message]:
    """A dialogue prefix as chat messages (earlier calls as tool calls with their results)."""
    messages: list[Message] = []
    for turn in history:
        if turn["role"] == "User":
            messages.append({"role": "user", "content": turn["text"]})
        elif turn["role"] == "AI":
            messages.append({"role": "assistant", "content": turn["text"]})
        else:
            result = turn.get("result") or {}
            messages.append({"role": "assistant",
                             "content": render_call(turn["api_name"], turn["param_dict"], "structured")})
            messages.append({"role": "tool", "content": result_text(result.get("output"), result.get("exception"))})
    return messages


def structured_prompt(item: Mapping[str, Any]) -> ChatPrompt:
    """The dialogue so far as a chat with the shown API descriptions as tools."""
    messages = [{"role": "system", "content": STRUCTURED_SYSTEM}] + dialogue_messages(item["history"])
    return ChatPrompt(messages=messages, tools=[tool_schema(a) for a in item["apis"]] or None)


def item_prompt(item: Mapping[str, Any], call_format: str) -> ChatPrompt:
    """The first prompt of a level-1/2 item in `call_format`."""
    return official_prompt(item) if call_format == "official" else structured_prompt(item)


def level3_prompt(requirement: str, searcher: Mapping[str, Any], call_format: str) -> ChatPrompt:
    """A level-3 dialogue's first prompt: the requirement, with only the tool searcher described."""
    if call_format == "official":
        content = "\n".join([LEVEL3_SYSTEM, LEVEL3_OFFICIAL_FORMAT, "", "API descriptions:",
                             json.dumps(dict(searcher), ensure_ascii=False), "", f"User: {requirement}"])
        return ChatPrompt(messages=[{"role": "user", "content": content}])
    return ChatPrompt(messages=[{"role": "system", "content": LEVEL3_SYSTEM}, {"role": "user", "content": requirement}],
                      tools=[tool_schema(searcher)])


def observation(name: str, params: Mapping[str, Any], output: Any, exception: Any, call_format: str) -> str:
    """The result of an executed call as the agent sees it next."""
    if call_format == "official":
        shown = f"Exception: {exception}" if exception else (output if isinstance(output, str) else str(output))
        return official_text(name, params) + "->" + shown
    return result_text(output, exception)


__all__ = ["dialogue_messages", "item_prompt", "level3_prompt", "observation", "official_prompt",
           "structured_prompt"]
