"""The Event recorder's live series kept compact (issue 30, third memory pass).

After a surge the recorder holds one live series per scaler that scaled (up to ``MAX_TRACKED``,
for the 6-minute series window): each kept the body it created the Event with, as a tree of dicts
(~1.2 KB), only to send it once and to recreate the Event after a 404. The body is now kept as
compact JSON deflated against a typical Event (``escaler.packed``) and decoded for those two writes;
the series and the spam buckets are slotted.
What is sent is unchanged (``test_kube_events.py``: the created body, the recreate after a 404).
"""

from __future__ import annotations

import json
from typing import Any

from escaler.clock import FakeClock
from escaler.kube import events
from escaler.kube.events import EventRecorder


class _Rest:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        self.sent.append((method, path, kw.get("body")))
        return {}


def _regarding(i: int) -> dict[str, str]:
    return {"apiVersion": "escaler.io/v1alpha1", "kind": "ElasticScaler", "namespace": "team",
            "name": f"scaler-{i}", "uid": f"uid-{i}"}


def test_a_live_series_keeps_its_body_packed() -> None:
    rest = _Rest()
    rec = EventRecorder(rest, component="escaler", instance="pod-0", clock=FakeClock())  # type: ignore[arg-type]
    rec.event(_regarding(1), "Normal", "SuccessfulRescale", "Scale", "New size: 4")
    (series,) = rec._series.values()
    assert isinstance(series.body, bytes), type(series.body)
    body = events._unpack(series.body)
    text = json.dumps(body, separators=(",", ":")).encode()
    # deflated against the typical Event: a fraction of its JSON text (~330 bytes here)
    assert 3 * len(series.body) < len(text), (len(series.body), len(text))
    assert body["regarding"] == _regarding(1) and body["note"] == "New size: 4"
    assert body["reason"] == "SuccessfulRescale" and body["metadata"]["namespace"] == "team"
    assert not hasattr(series, "__dict__") and "series" not in body


def test_a_body_json_cannot_encode_is_kept_as_given() -> None:
    odd: dict[str, Any] = {"note": {"a set"}}  # JSON has no sets
    assert events._pack(odd) is odd
    copy = events._unpack(odd)
    assert copy == odd and copy is not odd
    packed = events._pack({"a": {"b": "c"}})
    assert isinstance(packed, bytes) and events._unpack(packed) == {"a": {"b": "c"}}


def test_series_and_buckets_are_keyed_by_a_digest_and_stay_apart() -> None:
    """Issue 30: a live series and a spam bucket keep a 16-byte digest of what makes occurrences
    isomorphic, not the tuple of the regarding object's and the related object's strings and the
    note (~500 bytes). Occurrences that differ in any part still make their own series."""
    rest = _Rest()
    clock = FakeClock()
    rec = EventRecorder(rest, component="escaler", instance="pod-0", clock=clock)  # type: ignore[arg-type]
    related = {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team", "name": "web"}
    for note in ("New size: 4", "New size: 4", "New size: 5"):
        rec.event(_regarding(1), "Normal", "SuccessfulRescale", "Scale", note)
    rec.event(_regarding(1), "Normal", "SuccessfulRescale", "Scale", "New size: 4", related=related)
    rec.event(_regarding(1), "Warning", "SuccessfulRescale", "Scale", "New size: 4")
    rec.event(_regarding(2), "Normal", "SuccessfulRescale", "Scale", "New size: 4")
    # a part that holds a separator the key could be confused by: still apart
    rec.event({**_regarding(3), "name": "a/b"}, "Normal", "R", "Scale", "x")
    rec.event({**_regarding(3), "name": "a", "namespace": "team/b"}, "Normal", "R", "Scale", "x")
    assert rec.tracked() == (7, 4)
    assert {len(k) for k in rec._series} == {16} and {len(k) for k in rec._buckets} == {16}
    assert [s.count for s in rec._series.values()].count(2) == 1


def test_the_bucket_map_drops_the_least_recently_used_past_its_bound(monkeypatch: Any) -> None:
    """client-go's LRU of spam buckets: past ``MAX_TRACKED`` the bucket used longest ago goes; a
    bucket used again moves to the newest end (it keeps its spent tokens)."""
    monkeypatch.setattr(events, "MAX_TRACKED", 3)
    monkeypatch.setattr(events, "_SWEEP_FLOOR", 100)  # no sweep: only the bound drops buckets
    rest = _Rest()
    rec = EventRecorder(rest, component="escaler", instance="pod-0", clock=FakeClock(),  # type: ignore[arg-type]
                        burst=2)
    for i in (1, 2, 3):
        rec.event(_regarding(i), "Normal", "R", "Scale", "first")
    rec.event(_regarding(1), "Normal", "R", "Scale", "second")  # scaler-1 used again: newest, 0 tokens
    rec.event(_regarding(4), "Normal", "R", "Scale", "first")  # scaler-2's bucket, the oldest, goes
    assert len(rec._buckets) == 3
    rec.event(_regarding(1), "Normal", "R", "Scale", "third")  # kept bucket: no token left
    assert rec.spam_filtered == 1
    rec.event(_regarding(2), "Normal", "R", "Scale", "second")  # a new bucket: full again
    assert rec.spam_filtered == 1
