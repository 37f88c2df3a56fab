"""mode=dreamgym's settings (`config.dreamgym`), declared once: each key's default, doc and allowed
values (docs/dreamgym.md explains them). `configs/run_config.py` reads the section through
`core.config_checks.section`."""

from __future__ import annotations

import dataclasses

from genenv_jax.core.config_checks import setting


def _invalid_prob(value: float) -> str | None:
    """in [0, 1)"""
    return None if 0 <= value < 1 else "must lie in [0, 1)"


@dataclasses.dataclass(frozen=True)
class DreamGymSettings:
    """Synthetic rollouts through the experience model, the replay buffer it retrieves from, the
    variance curriculum's generated-task cap and the sim-to-real schedule."""

    synthetic_epochs: int = setting(-1, "the first N epochs roll out on the experience model, the rest on the real "
                                        "environment (sim-to-real); -1: every epoch; 0: real only", minimum=-1)
    task_generation: bool = setting(True, "the simulator writes variants of the highest-variance seeds")
    generated_task_share: float = setting(0.5, "cap: at most this share of an epoch's tasks are generated",
                                          fraction=True)
    top_k: int = setting(3, "real transitions retrieved into each prompt (0: no retrieval)", minimum=0)
    retrieve_real_only: bool = setting(True, "retrieve offline / real transitions only (synthetic ones are kept)")
    reasoning: bool = setting(True, "the experience model reasons before predicting the next state")
    max_history: int = setting(4, "earlier (state, action) steps shown to the experience model", minimum=0)
    grow_replay: bool = setting(True, "add each epoch's transitions to the buffer: a synthetic epoch's predictions, "
                                      "a real epoch's agent episodes (replayed, real)")
    offline_random_per_task: int = setting(2, "offline data per training seed: the expert episode and this many "
                                              "random episodes", minimum=0)
    offline_random_steps: int = setting(12, "agent replies per random episode", minimum=1)
    offline_invalid_prob: float = setting(0.15, "ALFWorld: share of inadmissible commands in random episodes; BFCL "
                                                "multi-turn: each turn's calls perturbed with this probability",
                                          check=_invalid_prob)
    sft_steps: int = setting(300, "the experience model's SFT on the offline transitions", minimum=1)
    sft_batch_size: int = setting(8, "SFT rows per step", minimum=1)

    def synthetic(self, epoch: int) -> bool:
        """Whether `epoch` rolls out on the experience model (else on the real environment)."""
        return self.synthetic_epochs < 0 or epoch < self.synthetic_epochs

    @property
    def any_synthetic(self) -> bool:
        return self.synthetic_epochs != 0
