"""Helpers the test files share, imported as `tests.support.<module>` (pyproject.toml puts the
repository root on pytest's path), and the paths they build on: every test file finds the tests'
folders from here, not from its own place in tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]  # tests/
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
CONFIGS = TESTS / "support" / "configs"  # config files for `--config=...` (toy_run.py, study_smoke.py)
