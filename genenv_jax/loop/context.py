"""What every stage of an epoch shares: the run config, the domain and its seeds, the tokenizer,
per-(epoch, stream) random seeds and progress bars."""

from __future__ import annotations

import dataclasses
import json
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from genenv_jax import tokenization
from genenv_jax.domains.base import ChatPrompt, Domain, Task
from genenv_jax.run_config import RunConfig

# Streams of `epoch_seed`: one per random choice an epoch makes, so each is replayed exactly on resume.
STREAM_SEEDS, STREAM_GENERATE, STREAM_STATIC, STREAM_REPLAY, STREAM_ROLLOUTS, STREAM_GRPO, STREAM_RWR = range(1, 8)
STREAM_WARMSTART_AGENT, STREAM_WARMSTART_SIMULATOR = 101, 102


def epoch_seed(seed: int, epoch: int, stream: int) -> int:
    """A 32-bit seed for one random stream of one epoch."""
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(1)[0])


@dataclasses.dataclass(frozen=True)
class ChatText:
    """The tokenizer as the loop uses it: chat prompts -> ids, ids -> text, special ids."""

    tokenizer: object
    pad_id: int
    stop_ids: tuple[int, ...]
    end_id: int  # <|im_end|>: closes every SFT target

    @classmethod
    def load(cls, directory: str | None) -> "ChatText":
        tok = tokenization.load_tokenizer(directory)
        return cls(tok, tokenization.pad_id(tok), tokenization.stop_ids(tok), tokenization.im_end_id(tok))

    def prompt(self, prompt: ChatPrompt) -> list[int]:
        return tokenization.encode_chat(self.tokenizer, prompt.messages, prompt.tools)

    def encode(self, text: str) -> list[int]:
        return tokenization.encode(self.tokenizer, text)

    def decode(self, tokens: Sequence[int]) -> str:
        return tokenization.decode(self.tokenizer, tokens, skip_special_tokens=True)


@dataclasses.dataclass
class LoopContext:
    config: RunConfig
    domain: Domain
    text: ChatText
    train_seeds: list[Task]

    def __post_init__(self):
        self.seed_by_id = {s.task_id: s for s in self.train_seeds}

    def progress(self, total: int, desc: str, unit: str = "seq"):
        return tqdm(total=total, desc=desc, unit=unit, leave=False, disable=not self.config.log.progress_bars)

    def seed(self, epoch: int, stream: int) -> int:
        return epoch_seed(self.config.seed, epoch, stream)


def training_seeds(config: RunConfig, domain: Domain, text: ChatText) -> list[Task]:
    """The seed split, optionally cut to `max_seeds` (in file order, or the shortest first)."""
    d = config.domain
    seeds = domain.seeds(d.seed_split)
    if not seeds:
        raise ValueError(f"config.domain.seed_split={d.seed_split!r}: domain {d.name!r} has no seeds in that split")
    if d.seed_order == "shortest":  # agent prompt + answer + the task itself (what the simulator writes)
        lengths = {s.task_id: len(text.prompt(domain.agent_prompt(s))) + len(text.encode(domain.reference_response(s)))
                   + len(text.encode(json.dumps([s.prompt, s.verifier]))) for s in seeds}
        seeds = sorted(seeds, key=lambda s: (lengths[s.task_id], s.task_id))
    return seeds[:d.max_seeds] if d.max_seeds > 0 else seeds
