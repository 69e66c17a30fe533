"""Idle must mean idle, with a real metric (issue 10): on the real control plane, MetricsTrigger
scalers whose Prometheus series wobbles ±4 % around its target (inside apa's 10 % tolerance) make
no API write at all — every write of the manager's user counted in the audit log, not a name prefix
— while the manager keeps querying; and a surge of the same series is still written at once.

One manager (poll 2 s, its own user); the QUICK window (4 s, Latest) so every poll's sample is the
value the status would show: the strictest case for status writes.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import QUICK, AuditLog, apply, deployment, es, replicas, scaler, start_manager

pytestmark = pytest.mark.e2e

SCALERS = 5
REPLICAS = 4
# the series' value on target: 10 per replica at 4 replicas (AverageValue 10)
ON_TARGET = 40.0
NOISE = 0.04
# how long the idle window lasts (the manager polls every 2 s: ~10 polls per scaler)
IDLE_SECONDS = 20.0
USER = "escaler-idle"


def _trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [{
        "type": "ExternalServer",
        "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                           "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def _noisy(level: list[float]) -> Any:
    rng, mu = random.Random(10), threading.Lock()

    def value(query: str) -> float:
        with mu:
            return level[0] * (1 + rng.uniform(-NOISE, NOISE))

    return value


def test_a_noisy_metric_inside_the_tolerance_writes_nothing(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, managers: list[Any], tmp_path: Path
) -> None:
    level = [ON_TARGET]
    prometheus.value_fn = _noisy(level)
    names = [f"idle-{i}" for i in range(SCALERS)]
    for name in names:
        apply(cluster, namespace, deployment(name, REPLICAS))
        query = f'load{{namespace="{namespace}",app="{name}"}}'
        apply(cluster, namespace, scaler(name, name, _trigger(prometheus.url, query), annotations=QUICK))
    manager = start_manager(cluster, tmp_path, user=USER, namespace=namespace)
    managers.append(manager)

    def all_reported() -> bool:
        return all((es(cluster, namespace, n).get("status") or {}).get("currentMetrics") for n in names)

    eventually(all_reported, timeout=60, what=f"every scaler's first status; log:\n{manager.output()}")
    time.sleep(4)  # the writes that follow the first one (the cache catching up) are done
    audit = AuditLog.of(cluster)
    since, queries = audit.offset(), prometheus.query_count
    time.sleep(IDLE_SECONDS)
    writes = audit.writes(users=USER, namespace=namespace, since=since)
    polled = prometheus.query_count - queries
    assert manager.alive(), manager.output()
    assert polled >= SCALERS * IDLE_SECONDS / 2 / 2, f"the manager queried only {polled} times"
    assert writes == [], [(w["verb"], w["objectRef"]) for w in writes]
    assert [replicas(cluster, namespace, n) for n in names] == [REPLICAS] * SCALERS

    # the same series doubles: every scaler is scaled (and its status written) at once
    since = audit.offset()
    level[0] = ON_TARGET * 2
    eventually(lambda: all(replicas(cluster, namespace, n) == 2 * REPLICAS for n in names), timeout=30,
               what=f"the surge written; log:\n{manager.output()}")
    eventually(lambda: len({w["objectRef"]["name"] for w in audit.writes(
        users=USER, namespace=namespace, resource="elasticscalers", subresource="status", since=since)})
        == SCALERS, timeout=30, what="every scaler's status written with its decision")
