"""``StatusWriter`` against a cache that lags more than one of its own writes (issue 15, conflicting
writers).

A hand patch of a target's replicas bumps its generation, so the first sync after it is held by
the RolloutInProgress guard (a status write, X) and the sync the Deployment controller's next
status update wakes writes the target and records the decision (a second status write, A) —
tens of milliseconds later, on the same cached scaler, whose informer has not delivered X yet.
When the cache then shows X, the writer must still build on A: seen on the real control plane as
a ``recentDecisions`` entry (and ``lastScaleTime``) lost, overwritten by a third status built on X.
"""

from __future__ import annotations

from typing import Any

from escaler.reconcilers.kit.status import StatusWriter, WriteOutcome


class _Server:
    """A status subresource: every patch is a new resourceVersion, returned as the API server does."""

    def __init__(self, rv: int) -> None:
        self.rv = rv
        self.patches: list[dict[str, Any]] = []

    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]:
        self.patches.append(patch)
        self.rv += 1
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": str(self.rv)},
                "status": patch["status"]}


def _cached(status: dict[str, Any], rv: int) -> dict[str, Any]:
    return {"metadata": {"name": "es", "namespace": "ns", "uid": "u1", "resourceVersion": str(rv)},
            "status": status}


HELD = {"currentReplicas": 2, "desiredReplicas": 4, "deferredSince": "2026-01-01T00:00:00Z",
        "recentDecisions": [{"from": 6, "to": 4}]}
SCALED = {"currentReplicas": 4, "desiredReplicas": 4, "lastScaleTime": "2026-01-01T00:00:01Z",
          "recentDecisions": [{"from": 6, "to": 4}, {"from": 2, "to": 4}]}


def test_a_cache_two_writes_behind_still_builds_on_the_last_status_written() -> None:
    server = _Server(rv=10)
    writer = StatusWriter(server)
    before = _cached({"currentReplicas": 4, "desiredReplicas": 4, "recentDecisions": [{"from": 6, "to": 4}]},
                     rv=10)
    assert writer.write(None, before, HELD) == WriteOutcome.WRITTEN  # → rv 11
    # the cache has not delivered rv 11 yet: the next sync builds on what was written
    assert writer.base_status(before) == HELD
    assert writer.write(None, before, SCALED) == WriteOutcome.WRITTEN  # → rv 12
    # the cache delivers rv 11 (HELD): it is older than the last write, so SCALED is the base
    behind = _cached(HELD, rv=11)
    assert writer.base_status(behind) == SCALED
    assert not writer.changed(behind, SCALED)
    assert writer.write(None, behind, SCALED) == WriteOutcome.UNCHANGED
    # once the cache shows the last write, it is the base again
    caught_up = _cached(SCALED, rv=12)
    assert writer.base_status(caught_up) == SCALED
    assert len(server.patches) == 2


def test_a_write_on_a_caught_up_cache_forgets_the_older_versions() -> None:
    server = _Server(rv=10)
    writer = StatusWriter(server)
    assert writer.write(None, _cached({}, rv=10), HELD) == WriteOutcome.WRITTEN  # → rv 11
    assert writer.write(None, _cached(HELD, rv=11), SCALED) == WriteOutcome.WRITTEN  # → rv 12
    # rv 11 was the base of the last write, so the cache showing it is behind that write
    assert writer.base_status(_cached(HELD, rv=11)) == SCALED
    # rv 10 predates a write made on a cache that had caught up: it is not remembered as ours
    assert writer.base_status(_cached({}, rv=10)) == {}


def test_a_client_that_returns_no_resource_version_keeps_the_one_write_rule() -> None:
    class _Bare(_Server):
        def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                         patch_type: Any = "merge") -> dict[str, Any]:
            super().patch_status(m, name, patch, namespace, patch_type)
            return {}

    writer = StatusWriter(_Bare(rv=10))
    before = _cached({}, rv=10)
    writer.write(None, before, HELD)
    writer.write(None, before, SCALED)
    assert writer.base_status(before) == SCALED
    assert writer.base_status(_cached(HELD, rv=11)) == HELD  # unknown: the cache is believed
