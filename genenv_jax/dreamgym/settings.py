"""mode=dreamgym's settings (`config.dreamgym`; configs/base.py documents each key), validated once."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from genenv_jax.core.config_checks import check_fraction, check_positive, failure, section


@dataclasses.dataclass(frozen=True)
class DreamGymSettings:
    """mode=dreamgym (configs/base.py `dreamgym_config` documents each key)."""

    synthetic_epochs: int
    task_generation: bool
    generated_task_share: float
    top_k: int
    retrieve_real_only: bool
    reasoning: bool
    max_history: int
    grow_replay: bool
    offline_random_per_task: int
    offline_random_steps: int
    offline_invalid_prob: float
    sft_steps: int
    sft_batch_size: int

    def synthetic(self, epoch: int) -> bool:
        """Whether `epoch` rolls out on the experience model (else on the real environment)."""
        return self.synthetic_epochs < 0 or epoch < self.synthetic_epochs

    @property
    def any_synthetic(self) -> bool:
        return self.synthetic_epochs != 0


def dreamgym_settings(tree: Mapping[str, Any]) -> DreamGymSettings:
    """config.dreamgym validated (ConfigError naming the key)."""
    d = section(DreamGymSettings, tree, "dreamgym")
    check_positive("dreamgym.synthetic_epochs", d.synthetic_epochs, -1)
    check_fraction("dreamgym.generated_task_share", d.generated_task_share)
    for key in ("top_k", "max_history", "offline_random_per_task"):
        check_positive(f"dreamgym.{key}", getattr(d, key), 0)
    for key in ("offline_random_steps", "sft_steps", "sft_batch_size"):
        check_positive(f"dreamgym.{key}", getattr(d, key))
    if not 0 <= d.offline_invalid_prob < 1:
        raise failure("dreamgym.offline_invalid_prob", d.offline_invalid_prob, "must lie in [0, 1)")
    return d
