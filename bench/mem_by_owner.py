"""Memory per ElasticScaler by the structure that holds it (a companion of ``bench_memory.py``).

``python bench/mem_by_owner.py`` (``MEM_N`` scalers, default 500): the same fake-API scenario as
``bench_memory`` (N Deployments, then N MetricsTrigger scalers created, cached and reconciled
``MEM_POLLS`` times, default 2: a scale-up, then the next poll on caches that show its write, as
every scaler of a steady fleet is between two writes; ``MEM_POLLS=1`` is the scenario before 2026-12-07),
but instead of asking tracemalloc *which file allocated* the memory it walks the object graph from
each structure the manager keeps per scaler, in a fixed order, and counts every object reachable
from it that no earlier structure reached (``sys.getsizeof``; a shared string or model counts once,
for the first owner). The difference between the walk after the scalers and before them, divided by
N, is that structure's KiB per scaler. The fake API server's own state (its objects, watch history
and views) is walked too and printed apart: a real manager does not hold it. ``MEM_STEP=30``
moves the clock that many seconds after each round of polls (default 0: every round at the same
time), so that ``MEM_POLLS=70 MEM_STEP=30`` shows a fleet that has been polled for 35 minutes: the
per-scaler histories at their bounds (the algorithm's 64 past recommendations). ``MEM_DISTINCT=1``
gives every scaler its own ExternalServer query (bench/bench_capacity.py's fleet: no two triggers
equal, so the shared spec parts share nothing).

Why both: tracemalloc's by-file rows are approximate (a dict reused from CPython's free list keeps
the file of its first allocation, so ``frozen.py``'s row included the fake API server's copies),
and a file is not an owner (``pydantic/main.py`` allocates for the parse cache and for each status
row). Not part of ``make bench`` (no table in docs/benchmarks.md); docs/performance.md quotes it.

``MEM_RESIDUAL=1`` adds the attribution of what no owner above reaches: the rest of the manager
walked from its roots (the event recorder, the workqueue, the poller, the metrics registry, the
bindings, the reconciler's other helpers, the manager itself), each its own row; then the objects
created during the scenario (``gc.get_objects()`` after minus before) that no row reached, by type;
then, for every row, the plain ``dict``s (and pydantic/dataclass instance dicts) it holds per
scaler, by the type of the object that holds each (``__dict__`` of a class, a dict inside a
container); and for a sample of the unreached dicts, the first named root found by walking
``gc.get_referrers`` upward. The harness's event recorder is the test fake (it keeps every event):
its row is the fake's, not the manager's ``Recorder``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import types
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from es_fakes import (  # noqa: E402
    Harness,
    deployment,
    external_metric,
    external_server_metric,
    harness,
    metrics_trigger,
    scaler,
)

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
         types.CodeType, types.FrameType, threading.Thread)
# owners whose memory is the fake API server's, not the manager's
FAKE = ("fake API server: objects and history", "fake API server: watch views")


def _size(obj: Any, seen: set[int], dicts: Counter[str] | None = None) -> int:
    """Bytes of everything reachable from ``obj`` not in ``seen`` (which it extends); ``dicts``
    (when given) counts the plain dicts reached, by what holds them (``__dict__ of <class>``, or
    ``in <container type>``)."""
    total, stack = 0, [(obj, "")]
    while stack:
        o, holder = stack.pop()
        if id(o) in seen or isinstance(o, _SKIP):
            continue
        seen.add(id(o))
        try:
            total += sys.getsizeof(o)
        except TypeError:
            continue
        if dicts is not None and type(o) is dict:
            dicts[holder] += 1
        here = f"in {type(o).__name__}"
        refs = gc.get_referents(o)
        total += _inline_values(o, refs)
        if dicts is not None and _has_dict(o):
            here = f"__dict__ of {type(o).__module__}.{type(o).__qualname__}"
        stack.extend((r, here) for r in refs)
    return total


def _has_dict(o: Any) -> bool:
    """Whether ``o``'s instance dict exists as a dict object. Never creates it: on Python 3.11 an
    instance of a plain class keeps its attributes inline (a values array, no dict object, not
    shown by ``sys.getsizeof``) until something reads ``o.__dict__`` (``vars()``, ``copy``, a
    ``getattr(o, "__dict__")`` as this walk did before 2026-12-07), which creates a ~300-byte dict
    for good — so a walk that reads it inflates what it measures."""
    if isinstance(o, type) or type(o).__dictoffset__ == 0:
        return False
    # the dict, if it exists, is a referent (else the inline values are: a dict-valued attribute
    # of an object without its dict is miscounted here, rare among the manager's records)
    return any(type(r) is dict for r in gc.get_referents(o))


# Py_TPFLAGS_MANAGED_DICT (3.11: instances keep their attributes inline until the dict is read)
_MANAGED_DICT = 1 << 4


def _inline_values(o: Any, refs: list[Any]) -> int:
    """Bytes of ``o``'s inline attribute values (3.11's values array: one pointer per attribute
    and a small header) when no dict object holds them; 0 otherwise (the dict is a referent)."""
    if not (type(o).__flags__ & _MANAGED_DICT) or isinstance(o, type):
        return 0
    if any(type(r) is dict for r in refs):
        return 0
    return 8 * max(len(refs) - 1, 0) + 16  # refs: the values and the type


def _owners(h: Harness) -> Iterator[tuple[str, Any]]:
    rec = h.reconciler
    for key, inf in h.mgr.informers.informers().items():
        yield f"informer cache: {key.resource}", inf._indexer
    watches = rec._d.watches
    for key, entry in watches._informers._entries.items():
        yield f"informer cache: {key.resource} (targets)", entry.informer._indexer
    yield "ParseCache (parsed specs)", rec._parsed._entries
    yield "ScalerMemory (windows, last collection, pipeline state)", rec._memory
    yield "StatusWriter memo (last status written)", rec.reporter._writer._last
    yield "Reporter (last status key)", rec.reporter._seen
    m = rec._d.metrics
    yield "Prometheus per-scaler series", [getattr(m, a, None) for a in (
        "desired_replicas", "current_replicas", "metric_value", "_series", "_live",
        "scale_writes", "metric_errors")]
    yield "watch index", [getattr(watches, a, None) for a in ("_index", "_wants", "_roles")]
    yield FAKE[0], h.cluster
    yield FAKE[1], [entry.informer._lw for entry in watches._informers._entries.values()]


def _more_owners(h: Harness) -> Iterator[tuple[str, Any]]:
    """The rest of the manager (``MEM_RESIDUAL=1``), after ``_owners`` so its rows do not move."""
    rec = h.reconciler
    yield "event recorder (the test fake: keeps every event)", h.recorder
    yield "workqueue", h.es.controller.queue
    yield "poller", h.es.poller
    yield "target bindings (claims)", h.es.bindings
    yield "signal store", h.es.signals
    yield "manager metrics registry", h.mgr.metrics
    yield "reconciler (the rest: helpers, their caches)", rec
    yield "controller (the rest)", h.es.controller
    yield "manager (the rest: informers' other state, threads' objects)", h.mgr


def _roots(h: Harness) -> dict[int, str]:
    """id → a readable path for the manager's objects two attribute levels down (the names the
    referrer walk stops at)."""
    named: dict[int, str] = {}
    start = {"harness": h, "mgr": h.mgr, "es": h.es, "reconciler": h.reconciler,
             "deps": h.reconciler._d, "reporter": h.reconciler.reporter}
    for name, obj in start.items():
        named.setdefault(id(obj), name)
        for level in (obj, *[v for v in getattr(obj, "__dict__", {}).values()]):
            attrs = getattr(level, "__dict__", None)
            if attrs is None and hasattr(type(level), "__slots__"):
                attrs = {a: getattr(level, a, None) for a in getattr(type(level), "__slots__", ())}
            for attr, value in (attrs or {}).items():
                base = named.get(id(level), name)
                named.setdefault(id(value), f"{base}.{attr}")
    return named


def _holder_path(obj: Any, roots: dict[int, str], ignore: set[int], depth: int = 12) -> str:
    """The first named root above ``obj`` (breadth-first over ``gc.get_referrers``)."""
    frontier, visited = [(obj, type(obj).__name__)], {id(obj)}
    for _ in range(depth):
        nxt = []
        for o, path in frontier:
            for r in gc.get_referrers(o):
                if id(r) in visited or id(r) in ignore or isinstance(r, types.FrameType):
                    continue
                visited.add(id(r))
                step = f"{type(r).__name__} > {path}"
                if id(r) in roots:
                    return f"{roots[id(r)]} > {path}"
                nxt.append((r, step))
        frontier = nxt[:200]
        if not frontier:
            break
    return "(no named root within reach)"


def residual(h: Harness, before_ids: set[int], n: int, sample: int = 40) -> None:
    """Print the ``MEM_RESIDUAL`` attribution (see the module docstring)."""
    gc.collect()
    seen: set[int] = set()
    rows: list[tuple[str, int, Counter[str]]] = []
    for name, obj in (*_owners(h), *_more_owners(h)):
        dicts: Counter[str] = Counter()
        rows.append((name, _size(obj, seen, dicts), dicts))
    print("\nplain dicts per scaler, by owner and holder (after the scenario; >= 0.2 per scaler):")
    for name, _, dicts in rows:
        for holder, count in dicts.most_common():
            if count / n >= 0.2:
                print(f"  {count / n:6.2f}  {name}: {holder}")
    new = [o for o in gc.get_objects() if id(o) not in before_ids and id(o) not in seen]
    by_type: Counter[str] = Counter()
    size_by_type: Counter[str] = Counter()
    for o in new:
        t = type(o).__name__
        by_type[t] += 1
        with contextlib.suppress(TypeError):
            size_by_type[t] += sys.getsizeof(o)
    print("\nobjects created during the scenario that no owner reaches (gc-tracked, per scaler):")
    for t, count in by_type.most_common(15):
        print(f"  {count / n:6.2f} objects  {size_by_type[t] / n / 1024:6.2f} KiB  {t}")
    roots = _roots(h)
    ignore = {id(new), id(rows), id(before_ids)}
    paths: Counter[str] = Counter()
    for o in [o for o in new if type(o) is dict][:sample]:
        paths[_holder_path(o, roots, ignore)] += 1
    print(f"\na sample of {sum(paths.values())} unreached dicts, by the first named root above each:")
    for path, count in paths.most_common():
        print(f"  {count:4d}  {path}")


def _walk(h: Harness, attribute: bool = False) -> dict[str, int]:
    gc.collect()
    seen: set[int] = set()
    owners = (*_owners(h), *_more_owners(h)) if attribute else tuple(_owners(h))
    return {name: _size(obj, seen) for name, obj in owners}


def _metric(i: int, distinct: bool) -> dict[str, Any]:
    """One template's External metric, or (``distinct``) an ExternalServer query of its own per
    scaler, as bench/bench_capacity.py's fleet has: no two triggers are equal."""
    if distinct:
        return external_server_metric(f'sum(load{{scaler="es{i}"}})', "10")
    return external_metric("queue", "10")


def measure(n: int, polls: int = 2, distinct: bool = False,
            attribute: bool = False, step: float = 0.0) -> list[tuple[str, float]]:
    with harness(poll_interval=30.0) as h:
        for i in range(n):
            h.api("deployments").create(deployment(f"w{i}", 2))
        h.start()
        h.collector.values["queue"] = 20.0
        for i in range(n) if distinct else ():
            h.collector.values[f'sum(load{{scaler="es{i}"}})'] = 20.0
        h.wait_synced()
        before = _walk(h, attribute)
        before_ids = {id(o) for o in gc.get_objects()} if attribute else set()
        for i in range(n):
            obj = scaler(f"es{i}", metrics_trigger(_metric(i, distinct)))
            obj["spec"]["targetRef"]["name"] = f"w{i}"
            h.api("elasticscalers").create(obj)
        h.wait_synced()
        for _ in range(polls):
            for i in range(n):
                h.reconcile_once(f"es{i}")
            h.wait_synced()
            h.clock.step(step)
        after = _walk(h, attribute)
        if attribute:
            residual(h, before_ids, n)
    rows = [(name, (after[name] - before.get(name, 0)) / n / 1024) for name in after]
    manager = sum(kib for name, kib in rows if name not in FAKE)
    return [("manager (all owners below but the fake API server)", manager), *rows]


if __name__ == "__main__":
    n = int(os.environ.get("MEM_N", "500"))
    distinct = os.environ.get("MEM_DISTINCT", "0") not in ("", "0")
    attribute = os.environ.get("MEM_RESIDUAL", "0") not in ("", "0")
    step = float(os.environ.get("MEM_STEP", "0"))
    for name, kib in measure(n, int(os.environ.get("MEM_POLLS", "2")), distinct, attribute, step):
        print(f"{kib:7.2f} KiB/scaler  {name}")
