"""``StatusWriter`` keeps the status it wrote as compact JSON text (issue 10: memory per scaler): what
it hands back while the cache lags is equal to what was written, a fresh mutable copy every time,
and not an alias of the caller's dict."""

from __future__ import annotations

import copy
import sys
from typing import Any

from escaler.reconcilers.kit.status import StatusWriter, WriteOutcome


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


def test_the_memo_is_text_smaller_than_the_status_tree() -> None:
    writer = StatusWriter(_Server())
    writer.write(None, _cached({}, rv=10), copy.deepcopy(STATUS))
    memo = writer._memo(_cached({}, rv=10))
    assert memo is not None and memo.written is not None
    text = memo.written[1]
    assert isinstance(text, str) and 2 * sys.getsizeof(text) < _tree_size(STATUS)


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
