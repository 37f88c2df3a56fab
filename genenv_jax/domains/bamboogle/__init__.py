"""Bamboogle (search-augmented two-hop QA) as a GenEnv domain.

Modules: data (the download's questions, the loop's split), passages (wiki-18 passages and their
rendering), bm25_index (cached local BM25), retrieval (the retriever interface and the Search-R1
server client), metrics (EM, cover EM, F1), episode (one Search-R1-style episode), generation (the
simulator's prompt and checks), domain (the Domain), __main__ (EM, cover EM and F1 of an evaluation's items).
"""

from genenv_jax.domains.bamboogle.domain import DOMAIN_NAME, BamboogleDomain

__all__ = ["BamboogleDomain", "DOMAIN_NAME"]
