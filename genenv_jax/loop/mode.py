"""What a run's mode (`config.mode`) asks of the loop, decided once from the config."""

from __future__ import annotations

import dataclasses

from genenv_jax.configs.run_config import RunConfig

TASK_SOURCES = ("generated", "static", "curriculum")


@dataclasses.dataclass(frozen=True)
class Mode:
    """The answers `CoEvolution` needs, instead of testing the mode's name.

    task_source: where an epoch's tasks come from: "generated" (the simulator's variants of chosen
      seeds, every epoch), "static" (variants generated once, drawn from each epoch) or
      "curriculum" (DreamGym: seeds by reward variance plus capped simulator variants).
    trains_simulator: RWR updates the simulator (genenv only; random and static keep it fixed).
    counts_generations: an epoch's metrics count the simulator's generations (static draws and
      DreamGym's curriculum count their own).
    needs_dreamgym: the domain must supply DreamGym's pieces (checked before any work).
    synthetic_epochs: some epochs roll out on the experience model (its world is built).
    """

    name: str
    task_source: str
    trains_simulator: bool
    counts_generations: bool
    needs_dreamgym: bool
    synthetic_epochs: bool

    @classmethod
    def of(cls, config: RunConfig) -> "Mode":
        name = config.mode
        dreamgym = name == "dreamgym"
        return cls(name=name, task_source={"static": "static", "dreamgym": "curriculum"}.get(name, "generated"),
                   trains_simulator=name == "genenv", counts_generations=name not in ("static", "dreamgym"),
                   needs_dreamgym=dreamgym, synthetic_epochs=dreamgym and config.dreamgym.any_synthetic)
