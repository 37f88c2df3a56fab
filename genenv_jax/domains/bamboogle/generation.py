"""The simulator's side: the prompt for a new multi-hop question and the checks that accept one.

The simulator writes one JSON object {"question", "hops": [{"question", "answer"}, ...], "answer"}:
2-3 hops whose answers chain (each hop's answer, its bridge entity, appears in the next hop's
question; the last hop's answer is the answer). A generation becomes a task only if
- its structure holds (reason codes below), the question names neither the answer nor a bridge
  entity (else it is not multi-hop) and differs from the seed's;
- retrieval supports it: for every hop, the passages retrieved for the hop's question (top-k, the
  agent's own retriever) contain that hop's answer after SQuAD normalisation, so the last hop's
  passages contain the final answer. An agent that searches the hops can therefore find it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from genenv_jax.domains.bamboogle.metrics import normalize_answer
from genenv_jax.domains.bamboogle.passages import Passage
from genenv_jax.domains.bamboogle.retrieval import RetrievalError, Retriever
from genenv_jax.domains.generation import JSON_REASONS, extract_json_object
from genenv_jax.domains.records import Invalid

CHECK_REASONS = ("not_an_object", "missing_field", "bad_hops", "too_long", "answer_mismatch", "broken_chain",
                 "answer_in_question", "bridge_in_question", "same_as_seed", "retrieval_error",
                 "bridge_not_retrieved", "answer_not_retrieved")
MAX_HOPS, MAX_QUESTION_CHARS, MAX_ANSWER_WORDS = 3, 400, 12

SYSTEM = ("You write multi-hop questions for a question-answering agent that searches Wikipedia (2018 dump). "
          "A question composes facts: answering it needs one search per hop, the answer of each hop leading to "
          "the next. Every question is checked: each hop's answer must appear in the top Wikipedia passages "
          "retrieved for that hop's question.")
DIFFICULTY_TEXT = {
    "harder": "Make the new question HARDER than the seed: less familiar entities, or three hops instead of two.",
    "easier": "Make the new question EASIER than the seed: two hops about well-known entities and facts.",
    "similar": "Keep the difficulty about the SAME as the seed: two hops, a different topic or entity.",
}


def simulator_user_message(seed_question: str, seed_answers: Sequence[str], seed_hops: Any, difficulty: str,
                           success: str) -> str:
    shown = {"question": seed_question, "answer": seed_answers[0]}
    if seed_hops:
        shown["hops"] = list(seed_hops)
    example = {"question": "Who was the US president when the inventor of the telephone was born?",
               "hops": [{"question": "Who invented the telephone?", "answer": "Alexander Graham Bell"},
                        {"question": "Who was the US president when Alexander Graham Bell was born?",
                         "answer": "Martin Van Buren"}],
               "answer": "Martin Van Buren"}
    return "\n".join([
        "Seed question:", "```json", json.dumps(shown, ensure_ascii=False), "```", "", success,
        DIFFICULTY_TEXT[difficulty], "",
        "Write ONE new question as a JSON object with the keys question (the composed question; it must not "
        "name the answer or any intermediate answer), hops (2 or 3 objects {question, answer}: each hop's "
        "answer appears word for word in the next hop's question) and answer (a short entity, date or number: "
        "the last hop's answer). Example of the format:",
        "```json", json.dumps(example, ensure_ascii=False), "```",
        "Reply with the JSON object inside a ```json code block and nothing else."])


def _contains(haystack: str, needle: str) -> bool:
    """Whether normalised `needle` occurs in normalised `haystack` on word boundaries."""
    needle = normalize_answer(needle)
    return bool(needle) and f" {needle} " in f" {normalize_answer(haystack)} "


def read_generation(text: str, seed_question: str) -> dict[str, Any]:
    """The generation's {question, hops, answer} once its structure holds; Invalid otherwise."""
    value = extract_json_object(text)
    if not isinstance(value, dict):
        raise Invalid("not_an_object", f"expected a JSON object, got {type(value).__name__}")
    for key in ("question", "hops", "answer"):
        if key not in value:
            raise Invalid("missing_field", f"no {key!r}")
    question, answer, hops = value["question"], value["answer"], value["hops"]
    if not isinstance(question, str) or not question.strip() or not isinstance(answer, (str, int, float)) \
            or not str(answer).strip():
        raise Invalid("missing_field", "question and answer must be non-empty strings")
    question, answer = question.strip(), str(answer).strip()
    if not isinstance(hops, list) or not 2 <= len(hops) <= MAX_HOPS or not all(
            isinstance(h, dict) and isinstance(h.get("question"), str) and h["question"].strip()
            and isinstance(h.get("answer"), (str, int, float)) and str(h["answer"]).strip() for h in hops):
        raise Invalid("bad_hops", f"hops must be 2-{MAX_HOPS} objects with a non-empty question and answer")
    hops = [{"question": h["question"].strip(), "answer": str(h["answer"]).strip()} for h in hops]
    if len(question) > MAX_QUESTION_CHARS or any(len(h["question"]) > MAX_QUESTION_CHARS for h in hops) \
            or any(len(a.split()) > MAX_ANSWER_WORDS for a in [answer] + [h["answer"] for h in hops]):
        raise Invalid("too_long", f"questions are at most {MAX_QUESTION_CHARS} characters, answers "
                                  f"{MAX_ANSWER_WORDS} words")
    if normalize_answer(hops[-1]["answer"]) != normalize_answer(answer):
        raise Invalid("answer_mismatch", f"the last hop answers {hops[-1]['answer']!r}, not {answer!r}")
    for before, after in zip(hops, hops[1:]):
        if not _contains(after["question"], before["answer"]):
            raise Invalid("broken_chain", f"{before['answer']!r} does not appear in the next hop's question")
    if _contains(question, answer):
        raise Invalid("answer_in_question", "the question names its answer")
    if any(_contains(question, h["answer"]) for h in hops[:-1]):
        raise Invalid("bridge_in_question", "the question names an intermediate answer (it is not multi-hop)")
    if normalize_answer(question) == normalize_answer(seed_question):
        raise Invalid("same_as_seed", "the question is the seed's")
    return {"question": question, "hops": hops, "answer": answer}


def check_support(generation: dict[str, Any], retriever: Retriever, topk: int) -> list[list[str]]:
    """The doc ids retrieved for each hop once every hop's answer is in its passages; Invalid otherwise."""
    hops = generation["hops"]
    try:
        results: list[list[Passage]] = retriever.search([h["question"] for h in hops], topk)
    except RetrievalError as e:
        raise Invalid("retrieval_error", str(e)[:200]) from None
    for i, (hop, passages) in enumerate(zip(hops, results)):
        if not any(_contains(p.contents, hop["answer"]) for p in passages):
            last = i == len(hops) - 1
            raise Invalid("answer_not_retrieved" if last else "bridge_not_retrieved",
                          f"hop {i + 1}: {hop['answer']!r} is not in the top-{topk} passages for {hop['question']!r}")
    return [[p.doc_id for p in passages] for passages in results]


def generation_digest(generation: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(generation, sort_keys=True).encode()).hexdigest()[:12]


def fenced(generation: dict[str, Any]) -> str:
    return "```json\n" + json.dumps(generation, ensure_ascii=False) + "\n```"


__all__ = ["CHECK_REASONS", "JSON_REASONS", "SYSTEM", "check_support", "fenced", "generation_digest",
           "read_generation", "simulator_user_message"]
