"""Bamboogle (Press et al., 2023): 125 two-hop questions, answered by searching Wikipedia.

Seeds are the questions of the user's download (`data.py`, prepared once through
`genenv_jax.data.prepared`), split for the loop by a hash of their ids. The agent plays Search-R1's
protocol (`episode.py`) against a retriever (`retrieval.py`: BM25 over a wiki-18-format corpus, or
a Search-R1 /retrieve server) and is rewarded with the exact match of its answer. The simulator
writes new multi-hop questions with their hops, accepted only when retrieval supports every hop
(`generation.py`).
"""

from __future__ import annotations

import functools
from typing import Mapping, Sequence

from genenv_jax.data.prepared import load_records
from genenv_jax.domains.bamboogle import data, generation
from genenv_jax.domains.bamboogle.episode import BamboogleEnvironment, score_responses
from genenv_jax.domains.bamboogle.retrieval import Retriever, corpus_path, make_retriever
from genenv_jax.domains.base import (ChatPrompt, Domain, Invalid, Rejection, ScoreResult, Task, curriculum_line,
                                     next_sibling)

DOMAIN_NAME = "bamboogle"
CATEGORIES = {2: "two_hop", 3: "three_hop"}
REJECTION_REASONS = generation.JSON_REASONS + generation.CHECK_REASONS


class BamboogleDomain(Domain):
    """Bamboogle with search (see the module docstring).

    Args:
      data_dir: the Bamboogle download (test.jsonl or bamboogle.csv; optional hops.jsonl, wiki-18.jsonl[.gz]).
        Required: "" raises a one-line error naming the download command (when seeds are read).
      A retriever is required once data_dir is set: without retrieval_url, a corpus file must exist
      (checked here, one-line RetrieverMissing; the BM25 index itself is built on first search).
      retrieval_url: a Search-R1-compatible /retrieve endpoint; "" -> local BM25 over `corpus`.
      corpus: a wiki-18-format JSONL(.gz); "" -> data_dir/wiki-18.jsonl[.gz].
      topk: passages per search (Search-R1: 3). max_searches: searches per episode.
      max_turns: agent turns per episode (searches + the answer + slack for malformed replies).
      split_mode: 'hash' (60/20/20 train/validation/test by id) or 'all_test' (all 125 in 'test').
      cache_dir: BM25 index cache ("" -> $GENENV_CACHE/bamboogle); tfds_cache_dir: prepared data.
    """

    name = DOMAIN_NAME
    rejection_reasons = REJECTION_REASONS

    def __init__(self, data_dir: str = "", retrieval_url: str = "", corpus: str = "", topk: int = 3,
                 max_searches: int = 4, max_turns: int = 6, split_mode: str = "hash", split_salt: str = "bamboogle",
                 cache_dir: str = "", tfds_cache_dir: str = ""):
        if split_mode not in data.SPLIT_MODES:
            raise ValueError(f"bamboogle split_mode {split_mode!r}; expected one of {data.SPLIT_MODES}")
        if topk < 1 or max_searches < 1 or max_turns < 2:
            raise ValueError("bamboogle: topk and max_searches must be >= 1 and max_turns >= 2")
        self.data_dir, self.retrieval_url, self.corpus = data_dir, retrieval_url, corpus
        self.topk, self.max_searches, self.max_turns = topk, max_searches, max_turns
        self.split_mode, self.split_salt = split_mode, split_salt
        self.cache_dir, self.tfds_cache_dir = cache_dir, tfds_cache_dir
        if not retrieval_url and (corpus or data_dir):
            corpus_path(corpus, data_dir)  # fail at startup, not at the first search

    # ------------------------------------------------------------------ seeds
    def questions(self) -> list[data.Question]:
        """The download's questions in file order (prepared once, then read through Grain)."""
        if not self.data_dir:
            raise data.DataMissing(f"bamboogle: domain.options.data_dir is empty ({data.DOWNLOAD})")
        data.question_file(self.data_dir)  # a one-line error before TFDS prepares anything
        records = load_records(data.SOURCE, self.data_dir, "test", cache_dir=self.tfds_cache_dir or None)
        return [data.Question.from_json(r) for r in records]

    def load_seeds(self) -> list[Task]:
        """Every question as a seed, in file order."""
        return [self._task_of(q) for q in self.questions()]

    def _task_of(self, q: data.Question) -> Task:
        return Task(domain=DOMAIN_NAME, task_id=q.qid, category="two_hop", prompt={"question": q.question},
                    verifier={"answers": list(q.answers), "hops": None if q.hops is None else list(q.hops)},
                    metadata={"split": data.split_of_id(q.qid, self.split_mode, self.split_salt), "source": "bamboogle"})

    # ------------------------------------------------------------------ agent side
    @functools.cached_property
    def retriever(self) -> Retriever:
        """The configured retriever, built on first use in each process (BM25: loads or builds the index)."""
        return make_retriever(self.retrieval_url, self.corpus, self.data_dir, self.cache_dir)

    def environment(self, task: Task) -> BamboogleEnvironment:
        return _LazyRetrieverEnvironment(self, task)

    def prepare_environments(self) -> None:
        """Loads (or builds) the retriever before the first episode: at full size a BM25 index takes
        minutes, which must not count against the first search's step limit."""
        _ = self.retriever

    def agent_prompt(self, task: Task) -> ChatPrompt:
        return BamboogleEnvironment(task, None, self.topk, self.max_searches, self.max_turns).reset()

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """A single reply scored as a whole episode: EM of its answer (0 when it only searches)."""
        return BamboogleEnvironment(task, None, self.topk, self.max_searches, self.max_turns).score(
            [{"role": "assistant", "content": response}])

    def reference_turns(self, task: Task) -> list[str]:
        """An ideal episode: one search per hop (the question itself when no hops are known), then the answer."""
        hops = task.verifier.get("hops") or [{"question": task.prompt["question"]}]
        turns = [f"<think>I need to find: {h['question']}</think>\n<search> {h['question']} </search>" for h in hops]
        return turns + [self.reference_response(task)]

    def reference_response(self, task: Task) -> str:
        return f"<answer> {task.verifier['answers'][0]} </answer>"

    def summary(self, per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
        """bamboogle: exact match over every evaluated question (the reward is EM), per category too;
        with the evaluator's `metric/*` means in the rows, cover EM and F1 over every question as well."""
        rows = {c: r for c, r in per_category.items() if r["n"]}
        if not rows:
            return {}
        n = sum(r["n"] for r in rows.values())
        out = {"bamboogle": sum(r["correct"] for r in rows.values()) / n}
        for name in ("cover_em", "f1"):
            if all(f"metric/{name}" in r for r in rows.values()):
                out[f"bamboogle_{name}"] = sum(r[f"metric/{name}"] * r["n"] for r in rows.values()) / n
        out.update({f"bamboogle/{c}": r["accuracy"] for c, r in rows.items()})
        return out

    def answer_scores(self, responses: Mapping[str, str]) -> dict[str, float]:
        """{"em", "cover_em", "f1", "n"} of final agent texts by task id (e.g. an evaluation's items.jsonl)."""
        return score_responses({t.task_id: t.verifier["answers"] for t in self.seeds("all")}, responses)

    # ------------------------------------------------------------------ simulator side
    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        success = curriculum_line(recent_success, alpha, difficulty, doing="answers questions")
        user = generation.simulator_user_message(seed.prompt["question"], seed.verifier["answers"],
                                                 seed.verifier.get("hops"), difficulty, success)
        return ChatPrompt(messages=[{"role": "system", "content": generation.SYSTEM}, {"role": "user", "content": user}])

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """The simulator's question as a Task once its structure holds and retrieval supports every hop."""
        try:
            generated = generation.read_generation(text, seed.prompt["question"])
            support = generation.check_support(generated, self.retriever, self.topk)
        except Invalid as e:
            return self.reject(e, seed, text)
        return Task(domain=DOMAIN_NAME, task_id=f"{seed.task_id}~{generation.generation_digest(generated)}",
                    category=CATEGORIES[len(generated["hops"])], prompt={"question": generated["question"]},
                    verifier={"answers": [generated["answer"]], "hops": generated["hops"], "support": support},
                    parent_id=seed.task_id, difficulty=difficulty, metadata={"source": "simulator"})

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        """Another question of the seed's split with its hops, as the simulator writes one; needs hop
        decompositions (hops.jsonl), which Bamboogle itself does not have."""
        def fits(t: Task) -> bool:
            return bool(t.verifier.get("hops")) and t.prompt["question"] != seed.prompt["question"]

        if sibling is None or not fits(sibling):
            try:
                sibling = next_sibling(self, seed, fits)
            except ValueError:
                raise ValueError(f"bamboogle: no question with hops in {seed.task_id}'s split to write a reference "
                                 f"generation from: add {data.HOPS_FILE} to data_dir (see docs/bamboogle.md)") from None
        return generation.fenced({"question": sibling.prompt["question"], "hops": sibling.verifier["hops"],
                                  "answer": sibling.verifier["answers"][0]})


class _LazyRetrieverEnvironment(BamboogleEnvironment):
    """An episode whose domain builds the retriever only when the agent first searches."""

    def __init__(self, domain: BamboogleDomain, task: Task):
        super().__init__(task, None, domain.topk, domain.max_searches, domain.max_turns)
        self._domain = domain

    def _retriever(self) -> Retriever:
        return self._domain.retriever


__all__ = ["BamboogleDomain", "DOMAIN_NAME", "REJECTION_REASONS"]
