"""A slow metrics source holds no reconcile worker (issue 9: "slow sources must not delay other
scalers").

Controller level, so it means the same on the code before the change (6cf3acc, where the
collection ran inline on the worker): a Controller with ONE worker, scaler A whose collection
blocks until released, then scaler B. B must be reconciled and its target written while A's
collection still hangs; A writes once its collection finishes. Real worker threads and the real
clock; nothing is timed, the test waits for outcomes with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from es_fakes import NS, Cluster, FakeCollector, deployment, external_metric, metrics_trigger, scaler
from fakeapi import wait_until

from escaler.api.elasticscaler import MetricSpec
from escaler.reconcilers.elasticscaler import setup_elasticscaler
from escaler.runtime import Manager
from escaler.signals.collector import metric_name
from escaler.signals.sample import Sample
from escaler.signals.signal_pull import SignalReading
from escaler.targets.registry import default_registry


class BlockingCollector(FakeCollector):
    """``values`` like FakeCollector; a collection that reads metric ``slow`` blocks until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.slow_started = threading.Event()

    def collect(self, namespace: str, metrics: Sequence[MetricSpec], target: Any,
                current_replicas: int) -> list[tuple[MetricSpec, Sample]]:
        if any(metric_name(m) == "slow" for m in metrics):
            self.slow_started.set()
            self.release.wait(30.0)
        return super().collect(namespace, metrics, target, current_replicas)


def test_a_slow_collection_does_not_block_another_scalers_write() -> None:
    cluster = Cluster()
    mgr = Manager.for_testing(cluster.lw_factory, cluster.mapper)  # the real clock: worker threads run
    collector = BlockingCollector()
    collector.values.update(slow=50.0, fast=50.0)
    es = setup_elasticscaler(mgr, poll_interval=0.0, max_concurrent_reconciles=1, client=cluster.client,
                             handlers=default_registry(cluster.client),  # type: ignore[arg-type]
                             collector=collector, signal_puller=lambda e, t: SignalReading(active=False))
    for name in ("slow-target", "fast-target"):
        cluster.apis["deployments"].create(deployment(name, 2))
    stop = threading.Event()
    mgr.informers.start(stop)
    assert mgr.informers.wait_for_cache_sync(5.0)
    mgr.can_write.set()
    runner = threading.Thread(target=es.controller.start, args=(stop,), daemon=True)
    runner.start()
    try:
        cluster.apis["elasticscalers"].create(scaler(
            "a", metrics_trigger(external_metric("slow", "10")),
            target={"apiVersion": "apps/v1", "kind": "Deployment", "name": "slow-target"}))
        assert collector.slow_started.wait(10.0), "scaler A's collection never started"
        cluster.apis["elasticscalers"].create(scaler(
            "b", metrics_trigger(external_metric("fast", "10")),
            target={"apiVersion": "apps/v1", "kind": "Deployment", "name": "fast-target"}))

        def fast_scaled() -> bool:
            obj = cluster.apis["deployments"].get(f"{NS}/fast-target")
            return obj is not None and obj["spec"]["replicas"] == 4

        # on 6cf3acc the only worker sits in A's collection: B is never reconciled (TimeoutError)
        wait_until(fast_scaled, timeout=10.0, what="scaler B wrote its target while A's collection hangs")
        slow = cluster.apis["deployments"].get(f"{NS}/slow-target")
        assert slow is not None and slow["spec"]["replicas"] == 2, "A has no result yet: nothing written"
        collector.release.set()

        def slow_scaled() -> bool:
            obj = cluster.apis["deployments"].get(f"{NS}/slow-target")
            return obj is not None and obj["spec"]["replicas"] == 4

        wait_until(slow_scaled, timeout=10.0, what="scaler A wrote once its collection finished")
    finally:
        collector.release.set()
        stop.set()
        runner.join(10.0)
        mgr.dynamic_informers.stop_all()
