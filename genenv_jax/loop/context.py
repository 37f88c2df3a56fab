"""What every stage of an epoch shares: the run config, the domain and its seeds, the tokenizer
(`ChatText`), per-(epoch, stream) random seeds and progress bars."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
from tqdm.auto import tqdm

from genenv_jax.text.chat_text import ChatText
from genenv_jax.domains.base import Domain, Task
from genenv_jax.parallel import is_writer
from genenv_jax.configs.run_config import RunConfig

# Streams of `epoch_seed`: one per random choice an epoch makes, so each is replayed exactly on resume.
(STREAM_SEEDS, STREAM_GENERATE, STREAM_STATIC, STREAM_REPLAY, STREAM_ROLLOUTS, STREAM_GRPO, STREAM_RWR,
 STREAM_TOP_UP) = range(1, 9)
STREAM_EXPERIENCE = 9  # mode=dreamgym: the experience model's sampling in synthetic episodes
STREAM_REFILL = 10     # dynamic sampling: refill round r draws its tasks from stream 10 * 1000 + r
STREAM_UPDATE_SUBSET, STREAM_SIMULATOR_SUBSET = 11, 12  # train.tasks_per_epoch: which tasks an update uses
STREAM_SIMULATOR_GRPO = 13  # the order of the simulator's GRPO groups
STREAM_WARMSTART_AGENT, STREAM_WARMSTART_SIMULATOR, STREAM_EXPERIENCE_SFT = 101, 102, 103


def epoch_seed(seed: int, epoch: int, stream: int) -> int:
    """A 32-bit seed for one random stream of one epoch."""
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(1)[0])


@dataclasses.dataclass
class LoopContext:
    config: RunConfig
    domain: Domain
    text: ChatText
    train_seeds: list[Task]

    def __post_init__(self):
        self.seed_by_id = {s.task_id: s for s in self.train_seeds}

    @property
    def show_progress(self) -> bool:
        """Progress bars if the config asks for them, on process 0 only."""
        return self.config.log.progress_bars and is_writer()

    def progress(self, total: int, desc: str, unit: str = "seq"):
        return tqdm(total=total, desc=desc, unit=unit, leave=False, disable=not self.show_progress)

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
    elif d.seed_order == "interleaved":
        seeds = interleaved(seeds)
    return seeds[:d.max_seeds] if d.max_seeds > 0 else seeds


def interleaved(seeds: list[Task]) -> list[Task]:
    """Categories in turn (first-seen order), each category's seeds in a fixed pseudo-random order (a
    hash of the task id: the same on every machine and in every run), so any prefix is stratified."""
    by_category: dict[str, list[Task]] = {}
    for s in seeds:
        by_category.setdefault(s.category, []).append(s)
    queues = [sorted(group, key=lambda s: hashlib.sha256(s.task_id.encode()).hexdigest())
              for group in by_category.values()]
    out = []
    for i in range(max(map(len, queues), default=0)):
        out += [q[i] for q in queues if i < len(q)]
    return out
