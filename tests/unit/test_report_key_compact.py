"""The Reporter remembers only the hash of its last-status key (issue 30, memory per scaler): an int
per scaler instead of the key's rows and texts, and the idle poll still skips the status rebuild
exactly as before, while any change to what the status is built from still rebuilds it."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from es_fakes import Harness, deployment, external_server_metric, harness, metrics_trigger, scaler

POLL = 30.0


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness(poll_interval=POLL) as hh:
        yield hh


def _fleet(h: Harness, n: int) -> None:
    """``n`` scalers, each with its own query (no two triggers equal), all on target."""
    for i in range(n):
        h.api("deployments").create(deployment(f"w{i}", 2))
        obj = scaler(f"es{i}", metrics_trigger(external_server_metric(f'sum(load{{s="{i}"}})', "10")))
        obj["spec"]["targetRef"]["name"] = f"w{i}"
        h.api("elasticscalers").create(obj)
        h.collector.values[f'sum(load{{s="{i}"}})'] = 20.0
    h.start()
    for i in range(n):
        h.reconcile(f"es{i}")


def test_the_remembered_status_is_a_hash_and_three_small_values(h: Harness) -> None:
    _fleet(h, 3)
    seen = list(h.reconciler.reporter._seen.values())
    assert len(seen) == 3 and all(type(s.key) is int for s in seen)
    assert len({s.key for s in seen}) == 3, "each scaler's key is its own (resourceVersion, rows)"
    assert not hasattr(seen[0], "__dict__")
    assert sys.getsizeof(seen[0].key) <= 36


def test_idle_polls_still_skip_the_rebuild(h: Harness) -> None:
    _fleet(h, 2)
    writes = h.client.count("patch", "elasticscalers/status")
    for _ in range(3):
        h.clock.step(POLL)
        for i in range(2):
            h.reconcile(f"es{i}")
    assert h.client.count("patch", "elasticscalers/status") == writes


def test_a_change_of_one_part_of_the_key_rebuilds(h: Harness) -> None:
    _fleet(h, 1)
    writes = h.client.count("patch", "elasticscalers/status")
    h.clock.step(POLL)
    h.reconcile("es0")
    assert h.client.count("patch", "elasticscalers/status") == writes
    # the metric errors: the row's error text changes (and the conditions with it)
    h.collector.values['sum(load{s="0"})'] = "connection refused"
    h.clock.step(POLL)
    h.reconcile("es0")
    assert h.client.count("patch", "elasticscalers/status") == writes + 1
    assert "connection refused" in h.status("es0")["currentMetrics"][0]["error"]
