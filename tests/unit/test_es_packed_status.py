"""The ElasticScaler cache keeps each status packed (issue 30); the reconciler reads it as before.

``escaler.informers.transform`` keeps a cached ElasticScaler's status as a ``PackedMapping``: each
read decodes it. What must hold: a scaler's syncs write what they wrote before (a scale-up's
decision recorded once and kept by the next write, nothing written on an idle poll), and an idle
poll — the one that runs for every scaler every interval — reads no cached status at all (the
Reporter's key skips the rebuild), so the packing costs no CPU where it matters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import Harness, deployment, external_metric, harness, metrics_trigger, scaler

from escaler.informers.frozen import FrozenDict, PackedMapping


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness(poll_interval=30.0) as hh:
        yield hh


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reads of a packed mapping from now on (each decodes it, or finds it the last one
    decoded)."""
    calls: list[int] = []
    unpack = PackedMapping.unpack

    def counted(self: PackedMapping) -> FrozenDict:
        calls.append(self.packed_size())
        return unpack(self)

    monkeypatch.setattr(PackedMapping, "unpack", counted)
    return calls


def _cached_status(h: Harness) -> Any:
    h.wait_synced()
    (obj,) = [o for o in h.scalers.list() if o["metadata"]["name"] == "es"]
    return obj["status"]


def _decisions(status: dict[str, Any]) -> list[tuple[int, int]]:
    return [(d["from"], d["to"]) for d in status["recentDecisions"]]


def test_idle_polls_read_no_cached_status_and_a_change_builds_on_it(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric("queue", "10"))))
    h.start()
    h.collector.values["queue"] = 50.0  # 5 wanted; apa's step: 2 → 4, and 5 desired from then on
    for _ in range(3):  # the first sync on a cache showing the last write rebuilds the status once
        h.reconcile("es")
        h.clock.step(30)
    status = h.status("es")
    assert h.replicas() == 4 and status["desiredReplicas"] == 5 and _decisions(status) == [(2, 4)]
    cached = _cached_status(h)
    assert isinstance(cached, PackedMapping) and cached == status, "the cache holds it packed"
    writes = h.client.count("patch", "elasticscalers/status")
    calls = _reads(monkeypatch)
    for _ in range(3):
        h.reconcile("es")
        h.clock.step(30)
    assert calls == [], "an idle poll reads no cached status"
    assert h.client.count("patch", "elasticscalers/status") == writes, "and writes none"
    assert h.status("es") == status
    # a change reads it (the status writer compares with it and builds on it)
    h.collector.values["queue"] = 200.0
    h.reconcile("es")
    assert calls, "a write reads the cached status"
    assert h.client.count("patch", "elasticscalers/status") > writes
    after = h.status("es")
    # 8 desired, held at 4 while the fake Deployment's rollout never completes; the decisions
    # recorded so far come from the cached status
    assert after["desiredReplicas"] == 8 and _decisions(after) == [(2, 4)]
    assert after["currentMetrics"][0]["value"] > status["currentMetrics"][0]["value"]
