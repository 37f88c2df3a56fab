"""docs/api.md is generated (`python -m genenv_jax.tools.api_docs --out docs/api.md`): this fails when
the page differs from what the generator prints now, so the API reference cannot drift from the
code's `__all__` lists and docstrings."""

import ast
from pathlib import Path

from genenv_jax.tools import api_docs
from tests.support import REPO

PAGE = REPO / "docs" / "api.md"
REGENERATE = "python -m genenv_jax.tools.api_docs --out docs/api.md"


def test_api_page_is_current():
    page = PAGE.read_text()
    fresh = api_docs.render()
    if page != fresh:
        changed = [line for line in set(fresh.splitlines()) ^ set(page.splitlines())][:6]
        raise AssertionError(f"docs/api.md is stale; regenerate it with `{REGENERATE}`. Lines that differ "
                             f"(either side): {changed}")


def test_every_package_declares_all():
    """The generator documents a package's `__all__` and refuses one without; checked here on the
    source (skipped packages included), so the message names every package at once."""
    missing = []
    for name in api_docs.packages():
        init = REPO / Path(*name.split(".")) / "__init__.py"
        assigned = {target.id for node in ast.parse(init.read_text()).body if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}
        if "__all__" not in assigned:
            missing.append(name)
    assert not missing, f"packages without __all__: {missing}"


def test_skipped_packages_are_named_with_their_reason():
    page = PAGE.read_text()
    for name, reason in api_docs.SKIPPED.items():
        assert name in api_docs.packages(), f"SKIPPED names {name}, which is not a package"
        assert f"- `{name}`: {reason}." in page


def test_docstring_rendering():
    assert api_docs.first_paragraph("  One line\n  and more.\n\n  Second paragraph.") == "One line and more."
    assert api_docs.own_doc({}) is None  # a constant never shows its type's docstring

    def f(x, y=1, *, z=None):
        """Adds `<tool_call>` blocks.

        Details."""

    assert api_docs.describe("f", f) == "- `f(x, y=1, *, z=None)`: Adds `<tool_call>` blocks."
    assert api_docs.describe("g", lambda: None) == "- `g()`: (no docstring)"
    assert api_docs._escape_html("a <b> `<c>`") == "a &lt;b> `<c>`"
