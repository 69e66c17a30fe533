"""Memory of one cached object: what the informer keeps of a decoded ElasticScaler, by cache option.

Run: ``python bench/bench_cache_object.py`` (or ``python bench/run.py bench_cache_object``).
One realistic ElasticScaler as the API server returns it (two managedFields entries, the spec
of a MetricsTrigger scaler, a status with five conditions, a metric row and three decisions;
~3 KB of JSON) is decoded ``N`` times with ``json.loads`` — one decode per watch event, as the
reflector does — and put through each variant of the informer's cache path; tracemalloc counts
the heap that stays allocated per object. The production path is the last row (the ElasticScaler
informer's transform, ``transform_for``, then ``freeze``).
"""

from __future__ import annotations

import json
import sys
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from escaler.informers import frozen
from escaler.informers.frozen import freeze
from escaler.informers.transform import identity, strip_managed_fields, transform_for

TITLE = "One cached ElasticScaler: heap per object by cache option (tracemalloc)"
NOTES = """
`N` decodes of one ~3 KB ElasticScaler (with two managedFields entries and a full status), each
kept as the informer would keep it. `no interning`: `freeze` with `sys.intern` replaced by the
identity (the code before issue 10's memory work); `keys interned`: only keys shared;
`keys + short values interned`: what `freeze` does (strings up to `INTERN_MAX_LENGTH`);
`spec and status packed`: the ElasticScaler informer's transform (`transform_for`: since
2026-12-07 the spec and the status kept as deflated JSON text, `PackedMapping`; before, the spec's
template parts were cached once for equal values, 3.52 KiB in the last run with them). The last row
is the production cache path.
`decode+freeze µs`: json.loads + transform + freeze of one object, the best of 7 rounds of 300
(the round least disturbed by the machine's load).
"""

N = 2000
_MF = {"f:spec": {".": {}, "f:targetRef": {".": {}, "f:apiVersion": {}, "f:kind": {}, "f:name": {}},
                  "f:minReplicas": {}, "f:maxReplicas": {},
                  "f:trigger": {".": {}, "f:type": {}, "f:metricsTrigger": {".": {}, "f:metrics": {}}}}}
_CONDITIONS = ("Validated", "AbleToScale", "ScalingActive", "MetricsPipeline", "ScalingLimited")
OBJECT: dict[str, Any] = {
    "apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
    "metadata": {
        "name": "s-00001", "namespace": "es-1", "uid": "0b3c2a4e-1111-2222-3333-444455556666",
        "generation": 1, "resourceVersion": "123456", "creationTimestamp": "2026-12-01T03:00:00Z",
        "labels": {"app": "x"},
        "managedFields": [
            {"manager": "bench", "operation": "Update", "apiVersion": "elasticscaler.io/v1alpha1",
             "time": "2026-12-01T03:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": _MF},
            {"manager": "escaler", "operation": "Update", "apiVersion": "elasticscaler.io/v1alpha1",
             "time": "2026-12-01T03:00:00Z", "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {".": {}, "f:conditions": {}, "f:currentMetrics": {},
                                       "f:currentReplicas": {}, "f:desiredReplicas": {}}}},
        ],
    },
    "spec": {
        "targetRef": {"apiVersion": "bench.escaler.io/v1", "kind": "Scalable", "name": "t-00001"},
        "minReplicas": 1, "maxReplicas": 100,
        "trigger": {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [
            {"name": "qps", "type": "ExternalServer",
             "externalServer": {"endpoint": "http://127.0.0.1:9090", "query": 'sum(rate(x{s="1"}[1m]))'},
             "target": {"type": "AverageValue", "averageValue": "10"}}]}},
    },
    "status": {
        "observedGeneration": 1, "currentReplicas": 3, "desiredReplicas": 3,
        "lastScaleTime": "2026-12-01T03:00:00Z",
        "conditions": [{"type": t, "status": "True", "reason": f"Reason{t}",
                        "message": f"some message about {t}",
                        "lastTransitionTime": "2026-12-01T03:00:00Z", "observedGeneration": 1}
                       for t in _CONDITIONS],
        "currentMetrics": [{"name": "qps", "type": "ExternalServer", "value": "29.5", "averageValue": "9.8",
                            "recommendedReplicas": 3}],
        "recentDecisions": [{"time": "2026-12-01T03:00:00Z", "from": 1, "to": 3,
                             "reason": "metrics: 1 → 3 (qps 29.5/10 per replica)"}] * 3,
    },
}


def _measure(transform: Callable[[Mapping[str, Any]], Mapping[str, Any]],
             intern: Callable[[str], str]) -> tuple[float, float]:
    """KiB kept per object, and µs of decode + transform + freeze per object."""
    import time

    text = json.dumps(OBJECT)
    saved = frozen._intern
    frozen._intern = intern
    try:
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        t0 = time.perf_counter()
        kept = [freeze(transform(json.loads(text))) for _ in range(N)]
        elapsed = time.perf_counter() - t0
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
    finally:
        frozen._intern = saved
    size = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert len(kept) == N and elapsed > 0
    return size / N / 1024, _best_us(text, transform, intern)


def _best_us(text: str, transform: Callable[[Mapping[str, Any]], Mapping[str, Any]],
             intern: Callable[[str], str]) -> float:
    """Best of 7 rounds (the least disturbed by the machine's load) of the mean per object."""
    import time

    saved = frozen._intern
    frozen._intern = intern
    try:
        best = float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            for _ in range(300):
                freeze(transform(json.loads(text)))
            best = min(best, (time.perf_counter() - t0) / 300 * 1e6)
        return best
    finally:
        frozen._intern = saved


def run() -> list[dict[str, Any]]:
    rows = []
    cases: list[tuple[str, str, Callable[[Mapping[str, Any]], Mapping[str, Any]], Callable[[str], str]]] = [
        ("kept", "no interning", identity, str),
        ("stripped", "no interning", strip_managed_fields, str),
        ("stripped", "keys interned", strip_managed_fields, _KeysOnly()),
        ("stripped", "keys + short values interned", strip_managed_fields, sys.intern),
        ("stripped", "keys + short values interned, spec and status packed (production)",
         transform_for("elasticscaler.io", "elasticscalers"), sys.intern),
    ]
    for managed, interning, transform, intern in cases:
        kib, us = _measure(transform, intern)
        rows.append({"managedFields": managed, "strings": interning, "objects": N,
                     "KiB/object": round(kib, 2), "decode+freeze µs": round(us, 1)})
        print(rows[-1], flush=True)
    return rows


class _KeysOnly:
    """Interns keys only: ``freeze`` interns a value only when it is a short ``str`` value, so this
    variant tells keys from values by remembering the keys of the object."""

    def __init__(self) -> None:
        self._keys = set(_all_keys(OBJECT))

    def __call__(self, s: str) -> str:
        return sys.intern(s) if s in self._keys else s


def _all_keys(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        return [k for k, v in obj.items() for k in (k, *_all_keys(v))]
    if isinstance(obj, list):
        return [k for v in obj for k in _all_keys(v)]
    return []


if __name__ == "__main__":
    run()
