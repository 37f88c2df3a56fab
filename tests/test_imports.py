"""Package structure, measured on the source (every `import`, function-level ones too):

- the package's rooms (its subpackages and root modules) keep to a layer table: a room imports only
  rooms of lower layers, so there is no package-level circle;
- the module-level import graph has no cycles;
- `genenv_jax.parallel` never reaches `genenv_jax.models`;
- no module is over 400 lines."""

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "genenv_jax"
MAX_LINES = 400

# Lowest first. A room may import the rooms of the layers below its own, never its own layer or above.
# docs/architecture.md draws the same table.
LAYERS = (
    ("core",),                                  # leaves: no genenv_jax imports
    ("text", "parallel", "workdir"),
    ("models",),
    ("data", "rl", "sampling"),
    ("domains",),
    ("episodes", "dreamgym"),
    ("configs",),
    ("cli", "evaluation"),
    ("loop", "export"),
    ("main",),
    ("study", "tools"),
)
LAYER_OF = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """Package modules `path` imports anywhere in its body, as the import statements name them
    (`from pkg import name` counts as pkg.name when that is a module, else pkg)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                      for alias in node.names}
    return {name for name in found if name in modules}


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> modules whose top level runs when it imports: each target and the packages above
    it, except packages that contain the importer (already being initialised)."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for target in _imported(path, modules):
            parts = target.split(".")
            for depth in range(1, len(parts) + 1):
                prefix = ".".join(parts[:depth])
                if prefix in modules and not (name + ".").startswith(prefix + ".") and prefix != name:
                    targets.add(prefix)
        graph[name] = targets
    return graph


def _room(module: str) -> str | None:
    """The room of a module: `genenv_jax.loop.policy` -> 'loop', `genenv_jax.main` -> 'main'; None
    for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _room_edges() -> dict[str, set[str]]:
    """room -> the other rooms it imports (function-level and typing-only imports included)."""
    modules = _modules()
    rooms: dict[str, set[str]] = {}
    for name, path in modules.items():
        room = _room(name)
        if room is None:
            continue
        targets = {_room(t) for t in _imported(path, modules)} - {room, None}
        rooms.setdefault(room, set()).update(targets)
    return rooms


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_every_room_is_in_the_layer_table():
    rooms = {_room(name) for name in _modules()} - {None}
    assert rooms == set(LAYER_OF), f"rooms not in LAYERS: {sorted(rooms - set(LAYER_OF))}; " \
                                   f"LAYERS names missing rooms: {sorted(set(LAYER_OF) - rooms)}"


def test_rooms_import_only_lower_layers():
    wrong = sorted(f"{a} (layer {LAYER_OF[a]}) imports {b} (layer {LAYER_OF[b]})"
                   for a, targets in _room_edges().items() for b in targets if LAYER_OF[b] >= LAYER_OF[a])
    assert not wrong, "imports against the layer table:\n" + "\n".join(wrong)


def test_no_package_level_import_circles():
    graph = _room_edges()
    circles = sorted(f"{a} -> {b} -> ... -> {a}" for a in graph for b in graph[a] if a in _reachable(graph, b))
    assert not circles, "package-level import circles:\n" + "\n".join(circles)


def test_package_import_graph_has_no_cycles():
    graph = _edges(_modules())
    cycles = sorted(f"{a} -> {b} -> ... -> {a}" for a in graph for b in graph[a] if a in _reachable(graph, b))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_parallel_never_imports_models():
    graph = _edges(_modules())
    for name in graph:
        if name == "genenv_jax.parallel" or name.startswith("genenv_jax.parallel."):
            reached = {m for m in _reachable(graph, name) if m.startswith("genenv_jax.models")}
            assert not reached, f"{name} reaches {sorted(reached)}"


def test_edges_include_function_level_imports(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text("def f():\n    from genenv_jax.models import decode\n    import genenv_jax.parallel\n")
    assert _imported(module, _modules()) == {"genenv_jax.models.decode", "genenv_jax.parallel"}


@pytest.mark.parametrize("path", sorted(PACKAGE_DIR.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_modules_stay_small(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path} has {lines} lines; split it by job"
