"""The co-evolution loop: the epoch and the run (`CoEvolution`), both policies' weights apart from it
(`PolicyWeights`), one record per task through the epoch's stages (`EpochTask`), typed state, task
sources, rollouts, updates, records, checkpoint/resume."""

from genenv_jax.loop.coevolution import POOLS, CoEvolution
from genenv_jax.loop.epoch_tasks import EpochTask
from genenv_jax.loop.policy import Placement, Policy
from genenv_jax.loop.state import LoopState, SeedStats
from genenv_jax.loop.weights import PolicyWeights
from genenv_jax.rl.batches import NonFiniteLossError, PolicyState

__all__ = ["CoEvolution", "EpochTask", "LoopState", "NonFiniteLossError", "POOLS", "Placement", "Policy", "PolicyState",
           "PolicyWeights", "SeedStats"]
