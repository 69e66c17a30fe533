"""The SLO engine's signal reads share no thread pool one tenant's expensive PromQL can fill (issue 27,
item 6): ``escaler.reconcilers.slo.setup.slo_outbound``."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from escaler.clock import RealClock
from escaler.reconcilers.slo.setup import SLO_OUTBOUND_PER_NAMESPACE, slo_outbound
from escaler.runtime.executor import DEFAULT_OUTBOUND_WORKERS


class Queue:
    def add(self, item: Any) -> None:
        pass


def test_slow_tenants_hold_at_most_their_share_and_another_tenant_reads_at_once() -> None:
    mgr = SimpleNamespace(clock=RealClock(), metrics=SimpleNamespace(registry=CollectorRegistry()))
    ex = slo_outbound(mgr, "llmslorequirement")  # type: ignore[arg-type]
    ex.start(Queue())
    release = threading.Event()
    started: list[str] = []
    try:
        # tenants whose PromQL runs to its deadline: as many as the old pool (4 threads, 2 per
        # namespace) had room for, and then some
        slow = [f"slow-{i}" for i in range(DEFAULT_OUTBOUND_WORKERS // SLO_OUTBOUND_PER_NAMESPACE - 1)]
        for ns in slow:
            for i in range(SLO_OUTBOUND_PER_NAMESPACE + 2):  # more queued than its share
                ex.submit((ns, i), ns, None, lambda ns=ns: (started.append(ns), release.wait(10)), wake=None)
        ran = threading.Event()
        ex.submit(("quick", 0), "quick", None, ran.set, wake=None)
        assert ran.wait(5), "a quick tenant's read waited behind the slow tenants'"
        # no slow tenant got more than its share while the others waited
        for ns in slow:
            assert started.count(ns) <= SLO_OUTBOUND_PER_NAMESPACE, started
    finally:
        release.set()
        ex.stop()
