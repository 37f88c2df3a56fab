"""Bounds on the work BFCL's backends can be driven to, and a state comparison that respects sharing.

BFCL's GorillaFileSystem copies a directory shallowly: `cp(a, x)` gives `x` a new dict holding a's
very children, so subtrees are shared and `cp(a, x); mv(x, a)` doubles the paths under `a` with two
calls and no new memory. `du`, `find` and comparing two states then walk every path: 18 rounds make
a 20 MB `find` and steps of a minute; one reply more multiplies that by thousands (docs/reliability.md).

- `reachable_paths` counts the paths from the root as those walks would, in time linear in the
  DISTINCT directories (memoised by identity), stopping once past a bound.
- The dispatcher keeps every file system within MAX_FILE_SYSTEM_PATHS: a call that may add paths
  (GROWING_CALLS) runs on the live state; if the count then exceeds the bound, the state is put back
  as it was and the call refused with the backend's own kind of error. So `du`, `find` and the
  checker's state comparison are bounded by the same number. The 800 shipped ground truths reach at
  most 126 paths (multi_turn_long_context_6).
- `same_state` compares two public states (Backends.public_state) node by node, memoising pairs
  of objects it has already compared, so a shared subtree is compared once.
"""

from __future__ import annotations

import copy
from typing import Any

MAX_FILE_SYSTEM_PATHS = 10_000
FILE_SYSTEM = "GorillaFileSystem"
GROWING_CALLS = frozenset({"cp", "mv", "mkdir", "touch", "echo"})  # the calls that may add paths


def _children(node: Any) -> dict | None:
    contents = getattr(node, "contents", None)
    return contents if isinstance(contents, dict) else None


def reachable_paths(root: Any, bound: int = MAX_FILE_SYSTEM_PATHS) -> int:
    """Paths below `root` (each file and directory once per path reaching it); any count past
    `bound`, or a cycle, returns bound + 1."""
    counted: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node) or {}
        if done:
            on_path.discard(key)
            total = sum(1 + counted.get(id(child), 0) for child in children.values())
            counted[key] = min(total, bound + 1)
            continue
        if key in counted:
            continue
        if key in on_path:
            return bound + 1
        on_path.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children.values()
                     if _children(child) is not None and id(child) not in counted)
    return counted[id(root)]


def guarded_call(instance: Any, name: str, run):
    """Runs `run()` (a file-system call) and keeps the file system within MAX_FILE_SYSTEM_PATHS:
    returns (result, None), or (None, refusal text) with the state as it was before the call."""
    if name not in GROWING_CALLS:
        return run(), None
    saved = copy.deepcopy(instance.__dict__)  # a copy of what the call may change (sharing kept)
    result = run()
    paths = reachable_paths(instance.root)
    if paths <= MAX_FILE_SYSTEM_PATHS:
        return result, None
    instance.__dict__.clear()
    instance.__dict__.update(saved)
    return None, (f"{name}: the file system would hold more than {MAX_FILE_SYSTEM_PATHS} paths "
                  "(copies of copies); nothing was changed")


def same_state(a: Any, b: Any) -> bool:
    """a == b for public states (dicts, lists, BFCL's directories by name and contents, anything else
    by ==), each pair of objects compared once: repeated shared subtrees cost nothing more."""
    seen: set[tuple[int, int]] = set()
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        pair = (id(x), id(y))
        if pair in seen:
            continue
        seen.add(pair)
        if isinstance(x, dict) and isinstance(y, dict):
            if x.keys() != y.keys():
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list) and isinstance(y, list) or isinstance(x, tuple) and isinstance(y, tuple):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif _children(x) is not None and type(x) is type(y):  # a Directory: as its __eq__, name and contents
            if x.name != y.name:
                return False
            stack.append((x.contents, y.contents))
        elif x != y:
            return False
    return True


__all__ = ["FILE_SYSTEM", "GROWING_CALLS", "MAX_FILE_SYSTEM_PATHS", "guarded_call", "reachable_paths", "same_state"]
