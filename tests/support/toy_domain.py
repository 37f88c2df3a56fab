"""A tiny synthetic domain for fast co-evolution loop tests: "say the number N".

Short prompts keep a tiny random model with the real Qwen vocabulary cheap; almost every
generation becomes a task (copies of the seed's number are rejected), so the loop's every stage runs.
"""

from __future__ import annotations

import re
import signal
import time
from typing import Sequence

from genenv_jax.domains.base import ChatPrompt, Domain, Rejection, ScoreResult, Task


class ToyDomain(Domain):
    name = "toy"
    rejection_reasons = ("no_number", "copy_of_seed")

    def __init__(self, num_seeds: int = 4, reject_all: bool = False, hang_answer: str = "", hog_answer: str = ""):
        self.reject_all, self.hang_answer, self.hog_answer = reject_all, hang_answer, hog_answer
        self._seeds = [self._task(f"seed_{i}", str(i), None) for i in range(num_seeds)]

    @staticmethod
    def _task(task_id: str, answer: str, parent: str | None, difficulty: str | None = None) -> Task:
        return Task(domain="toy", task_id=task_id, category="say", prompt={"question": f"Say {answer}."},
                    verifier={"answer": answer}, parent_id=parent, difficulty=difficulty)

    def seeds(self, split: str) -> list[Task]:
        return list(self._seeds)

    def simulator_prompt(self, seed: Task, recent_success: Sequence[float] = (), difficulty: str = "similar",
                         alpha: float = 0.5) -> ChatPrompt:
        return ChatPrompt(messages=[{"role": "user", "content": f"New task like: {seed.prompt['question']}"}])

    def parse_task(self, text: str, seed: Task, difficulty: str | None = None) -> Task | Rejection:
        """The first number in the text, else the text's length mod 10 (so random text parses too)."""
        if self.reject_all:
            return Rejection(domain="toy", reason="no_number", detail="rejecting everything", seed_id=seed.task_id,
                             raw_text=text)
        match = re.search(r"\d+", text)
        answer = match.group(0) if match else str(len(text) % 10)
        if answer == seed.verifier["answer"]:
            return Rejection(domain="toy", reason="copy_of_seed", detail="same number", seed_id=seed.task_id,
                             raw_text=text)
        return self._task(f"{seed.task_id}/{answer}", answer, seed.task_id, difficulty)

    def agent_prompt(self, task: Task) -> ChatPrompt:
        return ChatPrompt(messages=[{"role": "user", "content": task.prompt["question"]}])

    def score_details(self, task: Task, response: str) -> ScoreResult:
        """`hang_answer`: scoring that task hangs, ignoring SIGALRM; `hog_answer` ("*": any other task):
        scoring it allocates 64 GB (tests/episodes/test_environment_limits.py)."""
        if self.hang_answer and task.verifier["answer"] == self.hang_answer:
            signal.signal(signal.SIGALRM, signal.SIG_IGN)
            time.sleep(3600)
        if self.hog_answer in ("*", task.verifier["answer"]) and self.hog_answer:
            self.hog = bytearray(64 << 30)
        return ScoreResult(reward=float(task.verifier["answer"] in response))

    def reference_response(self, task: Task) -> str:
        return task.verifier["answer"]

    def reference_generation(self, seed: Task, sibling: Task | None = None) -> str:
        return f"Say {(sibling or seed).verifier['answer']}7."
