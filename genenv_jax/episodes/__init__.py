"""Agent episodes: environments in this process or in worker processes, and the batched
multi-turn runner the loop and the evaluator share."""

from genenv_jax.episodes.environments import (ENV_MEMORY, ENV_TIMEOUT, WORKER_DIED, EnvFailure, LocalEnvironments,
                                              ProcessZeroEnvironments, WorkerEnvironments, open_environments)
from genenv_jax.episodes.limits import EnvLimits, EnvTimeout, time_limit
from genenv_jax.episodes.runner import (END_DONE, END_MAX_TOKENS, END_MAX_TURNS, END_TURN_TOKENS, Episode, EpisodeCaps,
                                        EpisodeStats, run_episodes)

__all__ = ["END_DONE", "END_MAX_TOKENS", "END_MAX_TURNS", "END_TURN_TOKENS", "ENV_MEMORY", "ENV_TIMEOUT", "WORKER_DIED",
           "EnvFailure", "EnvLimits", "EnvTimeout", "Episode", "EpisodeCaps", "time_limit",
           "EpisodeStats", "LocalEnvironments", "ProcessZeroEnvironments", "WorkerEnvironments",
           "open_environments", "run_episodes"]
