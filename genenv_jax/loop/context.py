"""What every stage of an epoch shares: the run config, the domain and its seeds, the tokenizer
(`ChatText`), per-(epoch, stream) random seeds and progress bars."""

from __future__ import annotations

import dataclasses
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
    return seeds[:d.max_seeds] if d.max_seeds > 0 else seeds
