"""API-Bank (levels 1-3) as a GenEnv domain (`get_domain("api_bank", data_dir=...)`); see docs/api_bank.md.

| module | job |
|---|---|
| data.py | the user's download as scored items (official test files joined to their source dialogues) |
| calls.py | reading calls from model text: the official bracket parser (quirks included) and `<tool_call>` JSON |
| metrics.py | call correctness by replay and execution, ROUGE-L F of replies |
| prompts.py | the agent's prompts in the official text format or as a tool-calling chat |
| episode.py | the level-3 Environment (requirement -> tool searcher -> calls) and its score |
| generation.py | the simulator's task format, validated by execution |
| summary.py | the headline numbers |
| domain.py | the Domain |
| replay.py | the gold-call replay figures (`python -m genenv_jax.domains.api_bank --data_dir DIR`) |
| executor.py, correctness.py, database.py, apis/, tool_search.py | the APIs themselves |
"""

from genenv_jax.domains.api_bank.domain import DOMAIN_NAME, APIBankDomain

__all__ = ["APIBankDomain", "DOMAIN_NAME"]
