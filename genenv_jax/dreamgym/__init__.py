"""DreamGym mode (PAPERS.md section 2): an experience model that stands in for the environment,
a replay buffer it retrieves real transitions from, a variance curriculum and sim-to-real."""
