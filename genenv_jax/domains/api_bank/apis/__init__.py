"""API-Bank's APIs, one module per area; importing the package registers them all (see `base.REGISTRY`).

| module | APIs |
|---|---|
| account.py | GetUserToken, RegisterUser, DeleteAccount, ModifyPassword, ForgotPassword |
| schedule.py, meeting.py | agenda, alarm, reminder and meeting APIs |
| health.py | appointments, health data, symptom search, emergency knowledge |
| finance.py | bank account, balance, stock, hotel booking |
| home.py | scenes, timed switches, music |
| knowledge.py, calculator.py | search engine, wiki, history, document QA, captions, speech, email, date, calculator |
| level3.py | the level-3 planning APIs (data in level3_data.json) |
| official.py, official_apis.py | `scoring="official"`: the original's argument handling, and the APIs it runs differently |
"""

from genenv_jax.domains.api_bank.apis import (  # registration by import
    account, calculator, finance, health, home, knowledge, level3, meeting, schedule)
from genenv_jax.domains.api_bank.apis.base import REGISTRY, SUITES, ApiError, ApiSpec, description

__all__ = ["ApiError", "ApiSpec", "REGISTRY", "SUITES", "description",
           # the API modules (imported for their registrations)
           "account", "calculator", "finance", "health", "home", "knowledge", "level3", "meeting", "schedule"]
