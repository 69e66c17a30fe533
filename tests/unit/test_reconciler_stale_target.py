"""A replica write never goes out twice from the same cached version of the target (issue 15: the
API server killed for 10 s).

After an API server outage the target's informer re-watches only after its backoff (up to 30 s),
while the scaler's polls go on. Seen on the real control plane (tests/e2e/test_chaos_apiserver.py):
a scaler wrote its target once, then — its Deployment cache still showing the version before that
write — wrote again from it every poll and every rate-limited retry, each answered 409 Conflict
(about 60 refused writes for two scalers in 13 s), until the cache relisted. A write from a version
that already took one (written, or refused with 409) is bound to fail: the scaler now waits for its
cache to show a newer version (the watch event wakes it), writing nothing meanwhile, not even
status.

The reconciler reads targets from its watch caches, as in production (``production_harness``); the
Deployment cache is made to lag with ``FakeAPI.pause_watches`` (events held back until
``resume_watches``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from es_fakes import NS, Harness, deployment, external_metric, metrics_trigger, scaler
from fakeapi import wait_until
from reads_fakes import production_harness

from escaler.runtime import Request

# the latest sample decides; a scale-down is not held by the stabilization window
ANNOTATIONS = {"elasticscaler.io/metrics.aggregationType": "Latest",
               "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}

@pytest.fixture
def h() -> Iterator[Harness]:
    """The production read path: targets read from the reconciler's own watch caches."""
    hh = production_harness()
    try:
        yield hh
    finally:
        hh.stop()


def _cached(h: Harness) -> tuple[int, str]:
    """spec.replicas and resourceVersion of the Deployment as the reconciler's cache shows it."""
    keys = [k for k in h.mgr.dynamic_informers.active_keys() if k.resource == "deployments"]
    inf = h.mgr.dynamic_informers.informer(keys[0])
    assert inf is not None
    obj = inf.store.get_by_key(f"{NS}/web")
    return int(obj["spec"]["replicas"]), str(obj["metadata"]["resourceVersion"])


def _caught_up(h: Harness) -> bool:
    live = h.api("deployments").get(f"{NS}/web")
    assert live is not None
    return _cached(h)[1] == live["metadata"]["resourceVersion"]


def _sync(h: Harness) -> bool:
    """One reconcile a second later, on whatever the caches show; whether it asked for a retry."""
    h.clock.step(1)
    return h.reconciler.reconcile(Request(NS, "es")).requeue


def _start(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric("queue", "10")),
                                              annotations=ANNOTATIONS))
    h.start()
    h.collector.values["queue"] = 20.0  # on target at 2
    h.reconcile("es")
    assert h.replicas() == 2


def test_no_second_write_from_the_version_the_first_went_out_from(h: Harness) -> None:
    _start(h)
    h.api("deployments").pause_watches()  # the target's watch is cut: our write will not be seen
    h.collector.values["queue"] = 30.0
    _sync(h)
    assert h.replicas() == 3 and h.client.count("patch", "deployments") == 1
    assert _cached(h)[0] == 2, "the cache still shows the version before the write"

    # polls (and retries) go on while the cache is stale: none writes from that version again
    h.collector.values["queue"] = 40.0
    statuses = h.client.count("patch", "elasticscalers/status")
    for _ in range(5):
        assert not _sync(h), "nothing to retry at once: the cache's next version wakes the scaler"
    assert h.client.count("patch", "deployments") == 1, "a write from a stale version is bound to 409"
    assert h.client.count("patch", "elasticscalers/status") == statuses, "nor is status written from it"

    # the watch comes back (and the Deployment controller catches up): the next sync writes from the
    # new version
    h.api("deployments").resume_watches()
    h.settle()
    wait_until(lambda: _caught_up(h), what="the cache to show our write")
    h.clock.step(1)
    h.reconcile("es")
    assert h.replicas() == 4 and h.client.count("patch", "deployments") == 2


def test_a_409_is_not_retried_from_the_same_cached_version(h: Harness) -> None:
    _start(h)
    h.api("deployments").pause_watches()
    # someone else scales the target; our cache does not see it
    other = h.api("deployments").get(f"{NS}/web")
    assert other is not None
    other["spec"]["replicas"] = 5
    h.api("deployments").update(other)
    h.settle()
    h.collector.values["queue"] = 30.0
    assert _sync(h), "a 409 decides again at once (the cache may have caught up by then)"
    assert h.client.count("patch", "deployments") == 1  # refused: 409
    for _ in range(5):
        _sync(h)
    assert h.client.count("patch", "deployments") == 1, "no write again from the version that got 409"
    assert h.replicas() == 5

    h.api("deployments").resume_watches()
    wait_until(lambda: _caught_up(h), what="the cache to catch up")
    h.clock.step(1)
    h.reconcile("es")
    assert h.replicas() == 3 and h.client.count("patch", "deployments") == 2
