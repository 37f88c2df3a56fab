"""docs/api.md, generated: every package's `__all__`, each name with its signature and the first
paragraph of its docstring.

    python -m genenv_jax.tools.api_docs --out docs/api.md     # or without --out: the page on stdout

`--out` is checked before the page is rendered (a directory, a missing directory or an empty value
is one line `<program>: error: ...`, exit 2) and replaced whole once the page is ready, so a failure
leaves the old page as it was.

The reference is generated so that it cannot drift from the code: tests/tools/test_api_docs.py renders
the page again and fails when docs/api.md differs. Every package under genenv_jax must declare
`__all__` (the generator refuses one that does not, naming it); a name in `__all__` that is a module
is documented by its module docstring (packages such as `workdir` list their modules, not objects).
Packages in `SKIPPED` are not imported, each for the reason stated there and on the page, so the
page is the same on every machine whether or not an optional dependency is installed.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import types
from pathlib import Path
from typing import Any, Callable, Sequence

from genenv_jax.core.errors import ArgumentParser, CommandError, check_not_empty, check_output_path, command
from genenv_jax.workdir.atomic_files import write_bytes_atomic

PROGRAM = "python -m genenv_jax.tools.api_docs"
ROOT = "genenv_jax"
PACKAGE_DIR = Path(__file__).resolve().parent.parent

# package -> why it is not imported here (the reason is printed on the page).
SKIPPED = {
    "genenv_jax.domains.alfworld": "importing it requires the optional ALFWorld engine (textworld, Fast Downward: "
                                   "`make alfworld`), which a checkout may lack; its modules are described in "
                                   "[alfworld.md](alfworld.md) and it is reached through `get_domain(\"alfworld\")`",
}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_VALUE_REPR = 60


def packages() -> list[str]:
    """Every package under genenv_jax (a directory with an `__init__.py`), root excluded, sorted by name."""
    found = []
    for init in sorted(PACKAGE_DIR.rglob("__init__.py")):
        parts = init.parent.relative_to(PACKAGE_DIR.parent).parts
        if len(parts) > 1:
            found.append(".".join(parts))
    return sorted(found)


def first_paragraph(doc: str | None) -> str:
    """The docstring's first paragraph on one line (whitespace collapsed), or '' without one."""
    if not doc:
        return ""
    text = inspect.cleandoc(doc).strip()
    return " ".join(text.split("\n\n", 1)[0].split())


def own_doc(obj: Any) -> str | None:
    """The docstring written for `obj` itself: never one inherited from a base class or from the type
    of a constant (a dict's docstring says nothing about `PRESETS`)."""
    if isinstance(obj, type):
        return obj.__dict__.get("__doc__")
    if isinstance(obj, types.ModuleType) or callable(obj):
        doc = getattr(obj, "__doc__", None)
        return None if doc is not None and doc == type(obj).__doc__ else doc
    return None


def signature(obj: Any) -> str | None:
    """`(a, b=1, *, c=None)`: parameters and defaults without annotations (they are in the source), or
    None where Python cannot tell. Memory addresses in default values are dropped so that the page
    is the same on every run."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    text = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    return _ADDRESS.sub("", text)


def describe(name: str, obj: Any) -> str:
    """One list item: the name (with its signature or kind) and its first docstring paragraph."""
    if isinstance(obj, types.ModuleType):
        head, doc = f"`{name}` (module)", own_doc(obj)
    elif isinstance(obj, type):
        sig = signature(obj)
        head, doc = f"`{name}{sig or ''}` (class)", own_doc(obj)
    elif callable(obj):
        head, doc = f"`{name}{signature(obj) or ''}`", own_doc(obj)
    else:
        value = _ADDRESS.sub("", repr(obj))
        size = f", {len(obj)} entries" if isinstance(obj, (dict, list, tuple, frozenset, set)) else ""
        # a value that names this checkout's path (CONFIG_DIR) differs between machines: type only
        plain = len(value) <= _MAX_VALUE_REPR and "`" not in value and str(PACKAGE_DIR) not in value
        shown = f" = `{value}`" if plain else ""
        head, doc = f"`{name}`{shown} ({type(obj).__name__}{size})", None
    if not (callable(obj) or isinstance(obj, types.ModuleType)):
        return f"- {head}"  # a constant: its value or type says what it is
    return f"- {head}: {_escape_html(first_paragraph(doc)) or '(no docstring)'}"


def _escape_html(text: str) -> str:
    """`<` outside code spans as `&lt;`, so that `<tool_call>` in prose is shown rather than read as
    an HTML tag."""
    parts = text.split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def package_section(name: str) -> list[str]:
    """The page's section for one package: its docstring's first paragraph, then one item per name
    of its `__all__`. A package without `__all__` is an error: the page documents what a package
    declares public, and nothing else."""
    module = importlib.import_module(name)
    public = getattr(module, "__all__", None)
    if public is None:
        raise ValueError(f"{name} has no __all__: declare its public names (objects or modules) in {name}/__init__.py")
    lines = [f"## `{name}`", ""]
    intro = _escape_html(first_paragraph(module.__doc__))
    if intro:
        lines += [intro, ""]
    for item in public:
        obj = getattr(module, item, None)
        if obj is None:  # a submodule listed in __all__ and not imported by the package itself
            obj = importlib.import_module(f"{name}.{item}")
        lines.append(describe(item, obj))
    return lines + [""]


def render() -> str:
    """The whole page, as docs/api.md holds it."""
    names = packages()
    documented = [n for n in names if n not in SKIPPED]
    lines = [
        "# API reference",
        "",
        "Generated by `python -m genenv_jax.tools.api_docs --out docs/api.md` from each package's `__all__`",
        "and the first paragraph of each docstring; do not edit it by hand (`tests/tools/test_api_docs.py` fails",
        "when it is stale). Examples of the library in use: [library.md](library.md); the layers the",
        "packages form: [architecture.md](architecture.md).",
        "",
        "Packages: " + ", ".join(f"[`{n.removeprefix(ROOT + '.')}`](#{n.replace('.', '')})" for n in documented)
        + ".",
        "",
    ]
    for name in documented:
        lines += package_section(name)
    if SKIPPED:
        lines += ["## Not imported here", ""]
        lines += [f"- `{name}`: {reason}." for name, reason in sorted(SKIPPED.items())]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def check_out(path: str) -> None:
    """Refuses, before the page is rendered, an `--out` that is empty, a directory, or in a directory
    that does not exist or cannot be written (`check_output_path`; a missing directory is not created)."""
    check_output_path(path, "--out", directory=False)
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CommandError(f"--out {path}: no directory {parent}; create it first")


def write_page(argv: Sequence[str] | None, program: str, description: str, render_page: Callable[[], str]) -> int:
    """A generated page's command line: `--out` (a bad path refused in one line before anything is
    rendered, the file replaced whole once the page is) or stdout. Shared with `config_docs`."""
    parser = ArgumentParser(prog=program, description=description)
    parser.add_argument("--out", help="write the page here, replacing the file whole once it is rendered "
                                      "(default: stdout)")
    args = parser.parse_args(argv)
    if args.out is not None:
        check_not_empty(args, ("out",))
        check_out(args.out)
    page = render_page()
    if args.out is None:
        sys.stdout.write(page)
    else:
        write_bytes_atomic(Path(args.out), page.encode("utf-8"))
    return 0


@command(PROGRAM)
def main(argv: Sequence[str] | None = None) -> int:
    return write_page(argv, PROGRAM, __doc__.split("\n")[0], render)


if __name__ == "__main__":
    sys.exit(main())
