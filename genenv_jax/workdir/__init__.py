"""The workdir: what a run writes and what survives a kill (docs/reliability.md). Local and gs://
file operations and atomic writes, the single-writer lock, Orbax checkpoints with their digests and
one-line errors, the record pools (ArrayRecord shards read through Grain) and their mixing, and the
metrics files."""
