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
and views) is walked too and printed apart: a real manager does not hold it. ``MEM_DISTINCT=1``
gives every scaler its own ExternalServer query (bench/bench_capacity.py's fleet: no two triggers
equal, so the shared spec parts share nothing).

Why both: tracemalloc's by-file rows are approximate (a dict reused from CPython's free list keeps
the file of its first allocation, so ``frozen.py``'s row included the fake API server's copies),
and a file is not an owner (``pydantic/main.py`` allocates for the parse cache and for each status
row). Not part of ``make bench`` (no table in docs/benchmarks.md); docs/performance.md quotes it.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import types
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


def _size(obj: Any, seen: set[int]) -> int:
    """Bytes of everything reachable from ``obj`` not in ``seen`` (which it extends)."""
    total, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, _SKIP):
            continue
        seen.add(id(o))
        try:
            total += sys.getsizeof(o)
        except TypeError:
            continue
        d = getattr(o, "__dict__", None)
        if isinstance(d, dict) and id(d) not in seen:  # a managed __dict__ is not a gc referent
            seen.add(id(d))
            total += sys.getsizeof(d)
            stack.extend(d.keys())
            stack.extend(d.values())
        stack.extend(gc.get_referents(o))
    return total


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
        "desired_replicas", "current_replicas", "metric_value", "_series", "_live")]
    yield "watch index", [getattr(watches, a, None) for a in ("_index", "_wants", "_roles")]
    yield FAKE[0], h.cluster
    yield FAKE[1], [entry.informer._lw for entry in watches._informers._entries.values()]


def _walk(h: Harness) -> dict[str, int]:
    gc.collect()
    seen: set[int] = set()
    return {name: _size(obj, seen) for name, obj in _owners(h)}


def _metric(i: int, distinct: bool) -> dict[str, Any]:
    """One template's External metric, or (``distinct``) an ExternalServer query of its own per
    scaler, as bench/bench_capacity.py's fleet has: no two triggers are equal."""
    if distinct:
        return external_server_metric(f'sum(load{{scaler="es{i}"}})', "10")
    return external_metric("queue", "10")


def measure(n: int, polls: int = 2, distinct: bool = False) -> list[tuple[str, float]]:
    with harness(poll_interval=30.0) as h:
        for i in range(n):
            h.api("deployments").create(deployment(f"w{i}", 2))
        h.start()
        h.collector.values["queue"] = 20.0
        for i in range(n) if distinct else ():
            h.collector.values[f'sum(load{{scaler="es{i}"}})'] = 20.0
        h.wait_synced()
        before = _walk(h)
        for i in range(n):
            obj = scaler(f"es{i}", metrics_trigger(_metric(i, distinct)))
            obj["spec"]["targetRef"]["name"] = f"w{i}"
            h.api("elasticscalers").create(obj)
        h.wait_synced()
        for _ in range(polls):
            for i in range(n):
                h.reconcile_once(f"es{i}")
            h.wait_synced()
        after = _walk(h)
    rows = [(name, (after[name] - before.get(name, 0)) / n / 1024) for name in after]
    manager = sum(kib for name, kib in rows if name not in FAKE)
    return [("manager (all owners below but the fake API server)", manager), *rows]


if __name__ == "__main__":
    n = int(os.environ.get("MEM_N", "500"))
    distinct = os.environ.get("MEM_DISTINCT", "0") not in ("", "0")
    for name, kib in measure(n, int(os.environ.get("MEM_POLLS", "2")), distinct):
        print(f"{kib:7.2f} KiB/scaler  {name}")
