"""DreamGym mode (the DreamGym paper; docs/dreamgym.md): an experience model that stands in for the environment,
a replay buffer it retrieves real transitions from, a variance curriculum and sim-to-real.

The domain side of its contract (transitions, synthetic episodes) is `domains/experience.py`;
`model.ExperienceModel` assembles the experience model's data side for the loop and for
`fit_experience`."""

# modules
__all__ = ["domains", "embedding", "environments", "experience_text", "fit_experience", "model", "predictor", "replay",
           "settings", "sft"]
