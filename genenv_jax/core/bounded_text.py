"""Text cut to a stated length with a marker saying how much was cut: what an environment may show
of a backend's error or an observation (model-driven texts can be megabytes; docs/reliability.md)."""

from __future__ import annotations


def bound_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, plus a marker of what was cut (0: no bound)."""
    if limit <= 0 or len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} of {len(text)} characters cut by this environment's limit]"


__all__ = ["bound_text"]
