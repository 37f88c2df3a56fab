"""The workdir: what a run writes and what survives a kill (docs/reliability.md). Local and gs://
file operations and atomic writes, the single-writer lock, Orbax checkpoints with their digests and
one-line errors, the record pools (ArrayRecord shards read through Grain) and their mixing, and the
metrics files."""

# modules
__all__ = ["atomic_files", "checkpoint_digests", "checkpoint_errors", "checkpoints", "lock", "metrics", "pool_mixing",
           "pools", "storage", "tensorboard_events", "trackers"]
