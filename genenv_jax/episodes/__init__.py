"""Agent episodes: environments in this process or in worker processes, and the batched
multi-turn runner the loop and the evaluator share."""

from genenv_jax.episodes.environments import (EnvFailure, LocalEnvironments, ProcessZeroEnvironments, WorkerEnvironments,
                                              open_environments)
from genenv_jax.episodes.runner import (END_DONE, END_MAX_TOKENS, END_MAX_TURNS, END_TURN_TOKENS, Episode, EpisodeCaps,
                                        EpisodeStats, run_episodes)

__all__ = ["END_DONE", "END_MAX_TOKENS", "END_MAX_TURNS", "END_TURN_TOKENS", "EnvFailure", "Episode", "EpisodeCaps",
           "EpisodeStats", "LocalEnvironments", "ProcessZeroEnvironments", "WorkerEnvironments",
           "open_environments", "run_episodes"]
