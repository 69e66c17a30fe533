"""Per-scaler poll intervals on the real control plane (issue 16, docs/design.md#beyond-the-seeds): a manager
polling every 10 s by default (``--metrics-trigger-poll-interval=10s``) with ``--min-poll-interval=2s`` runs
three MetricsTrigger ElasticScalers on the fake Prometheus, each with its own query:

* ``fast``: ``pollIntervalSeconds: 2`` — about one query per 2 s;
* ``slow``: ``pollIntervalSeconds: 6`` — about one per 6 s;
* ``clamped``: ``pollIntervalSeconds: 1`` — below the floor, so polled every 2 s, and a Warning
  event ``PollIntervalClamped`` says so.

The counts come from the fake Prometheus's query log over a fixed span after every scaler has
made its first decision (one poller thread and one heap serve all three)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import QUICK, apply, cond, deployment, es, scaler, start_manager

pytestmark = pytest.mark.e2e

USER = "escaler-poll-interval"
SPAN = 24.0
SCALERS = {"fast": 2, "slow": 6, "clamped": 1}
FLOOR = 2


def _trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {
        "scalingAlgorithm": "apa",
        "metrics": [{"type": "ExternalServer",
                     "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                                        "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def test_scalers_are_polled_at_their_own_rates(cluster: Cluster, namespace: str, prometheus: PrometheusServer,
                                                managers: list[Any], tmp_path: Path) -> None:
    queries = {name: f'load{{namespace="{namespace}",scaler="{name}"}}' for name in SCALERS}
    for name, every in SCALERS.items():
        prometheus.set(queries[name], 20.0)  # on target at 2 replicas: no scaling, just polls
        apply(cluster, namespace, deployment(name, 2))
        apply(cluster, namespace, scaler(name, name, _trigger(prometheus.url, queries[name]),
                                         annotations=QUICK, pollIntervalSeconds=every))
    manager = start_manager(cluster, tmp_path, user=USER, poll="10s", namespace=namespace,
                            extra_args=[f"--min-poll-interval={FLOOR}s"])
    managers.append(manager)
    for name in SCALERS:
        eventually(lambda n=name: cond(es(cluster, namespace, n), "ScalingActive")[:2]  # type: ignore[misc]
                   == ("True", "MetricsAvailable"), timeout=60,
                   what=f"{name}'s first decision; log:\n{manager.output()}")

    def count(name: str) -> int:
        return sum(q == queries[name] for q in list(prometheus.queries))

    start = {name: count(name) for name in SCALERS}
    time.sleep(SPAN)
    got = {name: count(name) - start[name] for name in SCALERS}
    expected = {name: SPAN / max(every, FLOOR) for name, every in SCALERS.items()}
    for name in SCALERS:
        # phase and tick jitter: one poll either way at the span's edges, plus one for a spec-change
        # collection; never the 10 s default (2.4 polls in the span)
        assert expected[name] - 2 <= got[name] <= expected[name] + 2, (got, expected)
    assert got["fast"] >= 2 * got["slow"], got
    assert abs(got["clamped"] - got["fast"]) <= 2, got

    def clamp_event() -> str | None:
        items = cluster.kubectl_json("get", "events.events.k8s.io", "-n", namespace)["items"]
        for ev in items:
            regarding = (ev.get("regarding") or {}).get("name")
            if ev.get("reason") == "PollIntervalClamped" and regarding == "clamped":
                return str(ev.get("note", ""))
        return None

    note = eventually(clamp_event, timeout=30, what="the PollIntervalClamped event")
    assert note == (f"spec.pollIntervalSeconds 1 is below the manager's "
                    f"--min-poll-interval {FLOOR}s: polled every {FLOOR}s"), note
    assert manager.alive(), manager.output()
