"""TravelPlanner (Xie et al., 2024) as a GenEnv domain (`get_domain("travelplanner", data_dir=...)`);
see docs/travelplanner.md.

| module | job |
|---|---|
| data.py | the download's queries as seed records (official CSVs, or the fine-tuning file alone) |
| tools.py | the two-stage search tools over the database; reference information of a route |
| prompts.py, simulator_prompt.py | the agent's prompts (sole-planning, two-stage) and reading its plan; the simulator's |
| episode.py | the plan's score (evaluator verdict -> reward) and the two-stage environment (30-step cap) |
| feasibility.py | the cheapest plan of a query in the database, or why there is none |
| generation.py | the simulator's query format and its checks (text agreement, feasibility) |
| summary.py | the headline metric table |
| domain.py | the Domain |
| queries.py, database.py, plans.py, commonsense.py, hard.py, metrics.py, evaluate.py, reference.py, places.py | the benchmark's queries, database and evaluator |
"""

from genenv_jax.domains.travelplanner.domain import DOMAIN_NAME, TravelPlannerDomain

__all__ = ["DOMAIN_NAME", "TravelPlannerDomain"]
