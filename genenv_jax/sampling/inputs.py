"""The inputs of a sampler call, prepared once: params placed for a sampler, and prompts
left-padded on the host with their caps."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from jax.sharding import Mesh

from genenv_jax.models import ModelConfig


@dataclasses.dataclass(frozen=True, eq=False)
class SamplerParams:
    """Params placed for one sampler: layers unstacked, in its mesh's shardings and param dtype."""

    tree: Any
    cfg: ModelConfig
    mesh: Mesh


@dataclasses.dataclass(frozen=True)
class PromptBatch:
    """A call's prompts on the host, left-padded to the prompt bucket, with each prompt's cap."""

    tokens: np.ndarray  # [n, P] int32
    mask: np.ndarray  # [n, P] bool, True on real prompt tokens
    lengths: np.ndarray  # [n] int32 prompt lengths
    caps: np.ndarray  # [n] int32 max_new_tokens per prompt
    new_tokens_bucket: int  # G: the largest cap, bucketed (the results' width and the largest window)

    @property
    def num_rows(self) -> int:
        return len(self.lengths)
