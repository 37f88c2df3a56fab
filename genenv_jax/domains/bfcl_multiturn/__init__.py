"""BFCL v4 multi-turn categories as a GenEnv domain (`get_domain("bfcl_multiturn")`); see docs/bfcl_multiturn.md.

| module | job |
|---|---|
| data.py | shipped entries, function docs, backend classes, the split by scenario |
| dispatch.py | runs JSON tool calls on an episode's backends, refusing anything off the list |
| scenario.py | what one task's episode needs, read from its Task |
| checker.py | BFCL's multi-turn verdict on dispatcher executions (official comparisons) |
| episode.py | the Environment: user turns, tool steps, scoring a transcript |
| schema.py | the simulator's task format and its validation |
| domain.py | the Domain: seeds, prompts, parse_task, references |
| verify.py | agreement with the official checker (`python -m genenv_jax.domains.bfcl_multiturn --check`) |
"""

from genenv_jax.domains.bfcl_multiturn.domain import DOMAIN_NAME, BFCLMultiTurnDomain

__all__ = ["DOMAIN_NAME", "BFCLMultiTurnDomain"]
