"""``StatusWriter`` keeps the status it wrote as compact JSON text, deflated against a preset
dictionary (issues 10 and 30: memory per scaler): what it hands back while the cache lags is equal
to what was written, a fresh mutable copy every time, and not an alias of the caller's dict; any
status packs and unpacks exactly, and a fleet's typical status takes a fraction of its text."""

from __future__ import annotations

import copy
import json
import math
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from escaler.reconcilers.kit.status import StatusWriter, WriteOutcome, pack_status, unpack_status


class _Server:
    def __init__(self) -> None:
        self.rv = 10

    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]:
        self.rv += 1
        return {"metadata": {"resourceVersion": str(self.rv)}, "status": patch["status"]}


def _cached(status: dict[str, Any], rv: int) -> dict[str, Any]:
    return {"metadata": {"name": "es", "namespace": "ns", "uid": "u1", "resourceVersion": str(rv)},
            "status": status}


STATUS: dict[str, Any] = {
    "currentReplicas": 4, "desiredReplicas": 4, "lastScaleTime": "2026-01-01T00:00:01Z",
    "currentMetrics": [{"name": "queue", "type": "External", "value": 20.000000000000004, "target": 10.0}],
    "conditions": [{"type": "AbleToScale", "status": "True", "reason": "Synced", "message": "ünïcode ok",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    "recentDecisions": [{"from": 2, "to": 4, "boundBy": None}],
}


def test_the_status_handed_back_while_the_cache_lags_equals_the_one_written() -> None:
    writer = StatusWriter(_Server())
    written = copy.deepcopy(STATUS)
    assert writer.write(None, _cached({}, rv=10), written) is WriteOutcome.WRITTEN
    written["desiredReplicas"] = 99  # the caller's dict is not the memo
    first = writer.base_status(_cached({}, rv=10))
    assert first == STATUS and type(first["currentMetrics"]) is list
    first["conditions"].clear()
    assert writer.base_status(_cached({}, rv=10)) == STATUS, "each call is a fresh copy"
    assert not writer.changed(_cached({}, rv=10), STATUS), "equal to what we wrote: nothing to write"
    assert writer.write(None, _cached({}, rv=10), copy.deepcopy(STATUS)) is WriteOutcome.UNCHANGED
    # the cache caught up: the writer believes it again
    assert writer.base_status(_cached({"desiredReplicas": 1}, rv=11)) == {"desiredReplicas": 1}


def test_the_memo_is_packed_smaller_than_the_status_tree() -> None:
    writer = StatusWriter(_Server())
    writer.write(None, _cached({}, rv=10), copy.deepcopy(STATUS))
    memo = writer._memo(_cached({}, rv=10))
    assert memo is not None and memo.written is not None
    packed = memo.written[1]
    assert isinstance(packed, bytes) and 2 * sys.getsizeof(packed) < _tree_size(STATUS)
    assert unpack_status(packed) == STATUS


# a scaler's status right after a scale-up, as a fleet of them writes it (bench/bench_capacity.py's
# fleet: a query of its own per scaler, so the names, reasons and counts differ from scaler to scaler)
def fleet_status(i: int) -> dict[str, Any]:
    query = f'sum(rate(http_requests_total{{namespace="team-{i % 97}",app="model-{i}"}}[2m]))'
    row = {"type": "ScalingActive", "status": "True", "observedGeneration": 3,
           "lastTransitionTime": f"2026-12-07T09:{i % 60:02d}:{(7 * i) % 60:02d}Z",
           "reason": "MetricsAvailable",
           "message": f"evaluated 1 of 1 metrics; recommends {3 + i % 5} replicas"}
    return {"observedGeneration": 3, "currentReplicas": 3 + i % 5, "desiredReplicas": 3 + i % 5,
            "currentMetrics": [{"name": query, "type": "ExternalServer", "value": 41.5 + i, "target": 10.0,
                                "targetType": "AverageValue", "recommendedReplicas": 3 + i % 5}],
            "recentDecisions": [{"time": "2026-12-07T09:31:12Z", "from": 1, "to": 3 + i % 5,
                                 "reason": f"evaluated 1 of 1 metrics; recommends {3 + i % 5} replicas "
                                           f"({query} {41.5 + i}/10 (AverageValue))"}],
            "conditions": [row, {**row, "type": "AbleToScale", "reason": "Synced",
                                 "message": f"the target is at the desired count ({3 + i % 5})"},
                           {**row, "type": "ScalingLimited", "status": "False",
                            "reason": "DesiredWithinRange",
                            "message": "the desired count is within the acceptable range [1, 20]"},
                           {**row, "type": "Validated", "reason": "Valid", "message": "the spec is valid"},
                           {**row, "type": "MetricsPipeline", "reason": "AllMetricsAvailable",
                            "message": "all 1 metrics available"}],
            "resolvedTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"model-{i}"},
            "lastScaleTime": "2026-12-07T09:31:12Z"}


def test_a_fleets_status_packs_to_a_fraction_of_its_text() -> None:
    for i in range(50):
        status = fleet_status(i)
        text = json.dumps(status, separators=(",", ":"))
        packed = pack_status(status)
        assert unpack_status(packed) == status
        assert len(text) > 1500 and 4 * len(packed) < len(text), (len(text), len(packed))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(), JSON, max_size=6))
def test_any_status_unpacks_to_what_was_packed(status: dict[str, Any]) -> None:
    out = unpack_status(pack_status(status))
    assert out == status and out is not status


def test_non_finite_numbers_pack_as_before() -> None:
    out = unpack_status(pack_status({"value": math.nan, "target": math.inf, "low": -math.inf}))
    assert math.isnan(out["value"]) and out["target"] == math.inf and out["low"] == -math.inf


def _tree_size(value: Any) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return sys.getsizeof(value) + sum(_tree_size(v) for v in children)


def test_the_text_is_dropped_once_the_cache_shows_a_newer_version_and_the_refresh_time_stays() -> None:
    writer = StatusWriter(_Server(), refresh_seconds=60.0)
    assert writer.write(None, _cached({}, rv=10), copy.deepcopy(STATUS), now=100.0,
                        significance=0.1) is WriteOutcome.WRITTEN
    assert writer.base_status(_cached({}, rv=10)) == STATUS, "still lagging: the text is read"
    memo = writer._memo(_cached({}, rv=10))
    assert memo is not None and memo.written is not None
    caught_up = _cached(copy.deepcopy(STATUS), rv=11)  # the version our write produced
    assert writer.base_status(caught_up) == STATUS
    memo = writer._memo(caught_up)
    assert memo is not None and memo.written is None and memo.at == 100.0, "only the refresh time is kept"
    # what the writer decides from here is what it decided with the text: the cache is believed
    assert not writer.changed(caught_up, STATUS)
    assert writer.write(None, caught_up, copy.deepcopy(STATUS)) is WriteOutcome.UNCHANGED
    assert not writer.refresh_due(caught_up, 159.0) and writer.refresh_due(caught_up, 160.0)


def test_the_text_is_kept_while_the_cache_shows_any_version_older_than_the_last_write() -> None:
    writer = StatusWriter(_Server())
    first = copy.deepcopy(STATUS)
    writer.write(None, _cached({}, rv=10), first)  # produces 11
    second = {**copy.deepcopy(STATUS), "desiredReplicas": 6}
    writer.write(None, _cached({}, rv=10), second)  # the cache lags both: produces 12
    # the cache delivers the first write: still behind the second, the text is handed out
    assert writer.base_status(_cached(copy.deepcopy(first), rv=11)) == second
    memo = writer._memo(_cached({}, rv=11))
    assert memo is not None and memo.written is not None
    assert writer.base_status(_cached(copy.deepcopy(second), rv=12)) == second
    memo = writer._memo(_cached({}, rv=12))
    assert memo is not None and memo.written is None
