"""Where a live manager's memory is, by the attribute path that holds it (``bench/memprobe.py``'s
``MEMPROBE_OWNERS=1``).

``bench/mem_by_owner.py`` walks the owners of a fake-API harness it builds itself; the real
manager of ``bench/bench_capacity.py`` holds about twice as much per scaler (real objects, the
event recorder, the executor, caches the harness does not have). This walks the real one, in its
own process, from the ``escaler.runtime.manager.Manager`` instance:

* **Services** are the escaler objects with an instance dict of which the process has at most
  ``SERVICE_MAX`` (controllers, reconcilers, informers, stores, the recorder...): per-object
  records are slotted, pydantic models, or many. Starting from the manager, every attribute of a
  service is followed breadth first (and the items of a small container of services), giving each
  object the path it was first reached by (``mgr._leaders.runnables[0]._reconciler._parse``).
* Every other attribute value is a **leaf row**: the bytes (``sys.getsizeof``; a 3.11 instance's
  inline attribute values estimated at 8 bytes each) of everything reachable from it that no
  earlier row reached, never entering a service, a module, a type or a function. A shared object
  counts once, for the first row (breadth-first order: the shortest path wins).
* ``rows()`` returns ``{path: bytes}``; ``growth(before, after, n)`` prints the rows that grew
  most, per scaler. Paths are stable between two probes of one process, so a row's growth is what
  that attribute came to hold.

A measuring tool, not part of the product; its own bookkeeping (sets of ids) is left out.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import types
from collections import Counter, deque
from typing import Any

# an escaler class with a __dict__ and at most this many instances is a service, not a record
SERVICE_MAX = 64
# a list, tuple, set or dict of at most this many items, holding a service, is walked into
SMALL = 32

_STOP_TYPES = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.CodeType,
               types.FrameType, types.MethodType, types.MethodWrapperType, types.WrapperDescriptorType,
               types.GetSetDescriptorType, types.MemberDescriptorType)
_MANAGED_DICT = 1 << 4


def _escaler_dict_classes() -> tuple[Counter[type], list[Any]]:
    counts: Counter[type] = Counter()
    objs = []
    for o in gc.get_objects():
        t = type(o)
        module = t.__dict__.get("__module__") if isinstance(t.__dict__.get("__module__"), str) else ""
        if module.startswith("escaler.") and not isinstance(o, type) and \
                (t.__flags__ & _MANAGED_DICT or (hasattr(t, "__dictoffset__") and t.__dictoffset__)):
            if "pydantic" in str(t.__mro__):
                continue
            counts[t] += 1
            objs.append(o)
    return counts, objs


def _attrs(o: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    with contextlib.suppress(TypeError):
        out += list(vars(o).items())
    for cls in type(o).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot in ("__dict__", "__weakref__"):
                continue
            with contextlib.suppress(AttributeError):
                out.append((slot, getattr(o, slot)))
    return out


def _items(o: Any) -> list[tuple[str, Any]] | None:
    """The labelled items of a small container holding a service, else None."""
    if isinstance(o, dict) and len(o) <= SMALL:
        items = [(repr(k)[:40], v) for k, v in o.items()]
    elif isinstance(o, (list, tuple, set, frozenset)) and len(o) <= SMALL:
        items = [(str(i), v) for i, v in enumerate(o)]
    else:
        return None
    return items


def rows() -> dict[str, int]:
    """``{attribute path: bytes first reached from it}`` of the live manager (module docstring)."""
    counts, candidates = _escaler_dict_classes()
    services = {id(o) for o in candidates if counts[type(o)] <= SERVICE_MAX}
    managers = [o for o in candidates if type(o).__qualname__ == "Manager"
                and type(o).__dict__.get("__module__") == "escaler.runtime.manager"]
    seen: set[int] = set()
    out: dict[str, int] = {}
    queue: deque[tuple[str, Any]] = deque(("mgr", m) for m in managers[:1])
    while queue:
        path, o = queue.popleft()
        if id(o) in seen:
            continue
        if id(o) in services:
            seen.add(id(o))
            out[path + " (itself)"] = sys.getsizeof(o)
            queue.extend((f"{path}.{name}", v) for name, v in _attrs(o))
            continue
        items = _items(o)
        if items is not None and any(id(v) in services for _, v in items):
            seen.add(id(o))
            out[path + " (itself)"] = sys.getsizeof(o)
            queue.extend((f"{path}[{k}]", v) for k, v in items)
            continue
        for part, size in _split(o, seen, services):
            out[f"{path}[*].{part}"] = size
        size = _leaf(o, seen, services)
        if size:
            out[path] = size
    return out


def _split(o: Any, seen: set[int], services: set[int]) -> list[tuple[str, int]]:
    """A cache of many objects (a dict of > ``SMALL`` mappings with a ``kind``) split by top-level
    field: the bytes first reached from every item's ``metadata``, ``spec`` and ``status``."""
    if not isinstance(o, dict) or len(o) <= SMALL:
        return []
    first = next(iter(o.values()))
    if not isinstance(first, dict) or "kind" not in first:
        return []
    return [(part, sum(_leaf(item.get(part), seen, services) for item in o.values()
                       if isinstance(item, dict) and item.get(part) is not None))
            for part in ("metadata", "spec", "status")]


def _leaf(root: Any, seen: set[int], services: set[int]) -> int:
    total = 0
    stack = [root]
    while stack:
        o = stack.pop()
        i = id(o)
        if i in seen or i in services or isinstance(o, _STOP_TYPES):
            continue
        seen.add(i)
        try:
            total += sys.getsizeof(o)
        except TypeError:
            continue
        refs = gc.get_referents(o)
        t = type(o)
        if t.__flags__ & _MANAGED_DICT and not any(type(r) is dict for r in refs):
            total += 8 * max(len(refs) - 1, 0) + 16
        stack.extend(refs)
    return total


def growth(before: dict[str, int], after: dict[str, int], n: int, top: int = 40) -> list[str]:
    """The rows that grew most between two probes, in bytes per scaler (``n`` scalers)."""
    diff = {p: after.get(p, 0) - before.get(p, 0) for p in set(before) | set(after)}
    total = sum(diff.values())
    lines = [f"owners: growth {total / max(n, 1):,.0f} B per scaler over {len(diff)} rows; the top {top}:"]
    for path, b in sorted(diff.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {b / max(n, 1):9,.0f} B/scaler  {path}")
    return lines
