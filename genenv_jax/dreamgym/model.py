"""The experience model's data side as one object, assembled the same way by the loop
(`loop.experience.ExperienceWorld`) and by `fit_experience`: a frozen embedder (a copy of the
model's initial weights), the replay buffer seeded with the offline real transitions, retrieval
over it, the SFT rows, and the predictor around a sampling function."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax
import numpy as np

from genenv_jax.domains.experience import Transition
from genenv_jax.dreamgym.embedding import Embedder, transition_key_text
from genenv_jax.dreamgym.experience_text import PromptSettings
from genenv_jax.dreamgym.predictor import Predictor, Retrieval, SampleFn
from genenv_jax.dreamgym.replay import ReplayBuffer
from genenv_jax.dreamgym.sft import sft_rows
from genenv_jax.models import ModelConfig
from genenv_jax.rl.batches import TrainRow
from genenv_jax.text.chat_text import ChatText
from genenv_jax.workdir.pools import Pool


@dataclasses.dataclass
class ExperienceModel:
    """What the experience model reads besides its weights. `buffer` is what retrieval serves at
    prediction time (it grows); `offline` and `vectors` ([N, D]) are the offline transitions and
    their embeddings, from which the SFT rows' demos are retrieved."""

    text: ChatText
    embedder: Embedder
    buffer: ReplayBuffer
    offline: list[Transition]
    vectors: np.ndarray
    prompt_settings: PromptSettings
    top_k: int
    max_prompt_len: int

    @classmethod
    def build(cls, text: ChatText, cfg: ModelConfig, initial_params, offline: Sequence[Transition], pool: Pool,
              prompt_settings: PromptSettings, *, top_k: int, max_prompt_len: int) -> "ExperienceModel":
        """Embeds the offline transitions with a frozen copy of `initial_params` (the SFT donates
        the originals) and opens `pool`'s replay buffer, seeding it with them when it is empty (a
        resumed run's buffer already holds them)."""
        embedder = Embedder(cfg, jax.tree.map(lambda x: x.copy(), initial_params), text)
        offline = list(offline)
        vectors = embedder([transition_key_text(t) for t in offline])  # [N, D]
        buffer = ReplayBuffer.open(pool, dim=embedder.dim)
        if len(buffer) == 0:
            buffer.add(offline, vectors)
        return cls(text, embedder, buffer, offline, vectors, prompt_settings, top_k, max_prompt_len)

    def retrieval(self, real_only: bool = True, buffer: ReplayBuffer | None = None) -> Retrieval | None:
        """Top-k retrieval over `buffer` (default: the growing one); None when top_k is 0 (the
        no-replay ablation)."""
        if self.top_k <= 0:
            return None
        return Retrieval(self.buffer if buffer is None else buffer, self.embedder, top_k=self.top_k, real_only=real_only)

    def sft_rows(self) -> list[TrainRow]:
        """One SFT row per offline transition, its demos retrieved from the offline transitions alone
        (an in-memory buffer, never committed), so the rows depend on the offline data only."""
        offline_only = ReplayBuffer(self.buffer.pool)
        offline_only.add(self.offline, self.vectors)
        return sft_rows(self.text, self.offline, self.retrieval(buffer=offline_only), self.prompt_settings,
                        self.max_prompt_len)

    def predictor(self, sample: SampleFn, real_only: bool = True) -> Predictor:
        """Predictions through `sample` (the fitted weights' sampler), with retrieval over the buffer."""
        return Predictor(self.text, sample, self.prompt_settings, self.retrieval(real_only), self.max_prompt_len)
