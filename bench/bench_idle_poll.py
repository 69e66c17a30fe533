"""CPU of one idle ElasticScaler poll through the poller's path, on the in-process fake API.

Run: ``python bench/bench_idle_poll.py`` (or ``python bench/run.py bench_idle_poll``). Against another
checkout: ``PYTHONPATH=<checkout> python bench/bench_idle_poll.py`` (the harness is that checkout's
``tests/unit/es_fakes.py``).

A poll here is what a manager does for a due scaler whose inputs did not change:
``ElasticScalerReconciler.poll`` (the poller's shortcut: reads the cached target, submits the
collection), the collection (a fake collector, no network), and the one reconcile its completion
wakes (windows, algorithm, pipeline, no write). CPU is ``time.thread_time()`` of those three calls
on one thread; the informer threads of the harness run beside it. Also counted: target snapshots
read per poll (``ResourceHandler.read`` calls). The handlers are a manager's (targets read from the
watch cache), not the harness's (a GET per read).
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from es_fakes import NS, Harness, deployment, external_metric, harness, metrics_trigger, scaler
from executor_fakes import ManualExecutor

from escaler.reconcilers.kit.setup import cache_reader
from escaler.runtime import Request
from escaler.targets.registry import default_registry

TITLE = "ElasticScaler idle poll CPU: poller shortcut + collection + the consuming reconcile (fake API)"
NOTES = """
100 MetricsTrigger scalers (apa, one External metric, Value target 10 at 4 replicas), 30 s poll on a
FakeClock, a ±4 % noisy metric inside apa's tolerance (no replica change, no write). One poll =
`ElasticScalerReconciler.poll` + the collection (fake collector) + the reconcile that consumes it.
`cpu ms/poll`: the median over rounds of each round's median thread CPU per poll (`best round`:
the lowest); `target reads/poll`: `ResourceHandler.read` calls per poll. One thread; numbers vary
with the machine's load.
"""

SCALERS = 100
ROUNDS = 10
POLL = 30.0
TARGET_VALUE = 10.0
REPLICAS = 4


class _Reads:
    """Counts ``read`` calls of every handler the reconciler's registry hands out."""

    def __init__(self) -> None:
        self.n = 0

    def wrap(self, h: Harness) -> None:
        handlers = h.reconciler._d.handlers
        original = handlers.handler_for
        wrapped: dict[int, Any] = {}

        def handler_for(api_version: str, kind: str) -> Any:
            real = original(api_version, kind)
            if id(real) not in wrapped:
                read = real.read

                def counted(ns: str, ref: Any) -> Any:
                    self.n += 1
                    return read(ns, ref)
                real.read = counted
                wrapped[id(real)] = real
            return real
        handlers.handler_for = handler_for


def _production_handlers(h: Harness) -> None:
    """The handlers a manager builds (``setup._handlers_of``): targets read from the watch cache,
    not by a GET each (the harness's default)."""
    h.reconciler._d = dataclasses.replace(h.reconciler._d, handlers=default_registry(
        h.client, cache_get=cache_reader(h.cluster.mapper, h.es.watches)))  # type: ignore[arg-type]


def _fleet(h: Harness, mx: ManualExecutor, n: int) -> list[Request]:
    reqs = [Request(NS, f"es-{i}") for i in range(n)]
    for i, req in enumerate(reqs):
        h.api("deployments").create(deployment(f"web-{i}", REPLICAS))
        h.api("elasticscalers").create(scaler(
            req.name, metrics_trigger(external_metric(f"q{i}", str(int(TARGET_VALUE)))),
            target={"apiVersion": "apps/v1", "kind": "Deployment", "name": f"web-{i}"}))
        h.collector.values[f"q{i}"] = TARGET_VALUE * REPLICAS
    h.start()
    mx.start(h.es.controller.queue)
    for req in reqs:  # first sync, its collection, the sync that consumes it, the status's echo
        h.reconcile(req.name)
        mx.complete(("metrics", NS, req.name))
        h.reconcile(req.name)
    h.wait_synced("elasticscalers")
    for req in reqs:
        h.reconcile(req.name)
    h.wait_synced("elasticscalers")
    return reqs


def _round(h: Harness, mx: ManualExecutor, reqs: list[Request],
           rng: random.Random) -> tuple[list[float], int]:
    h.clock.step(POLL)
    for i in range(len(reqs)):
        h.collector.values[f"q{i}"] = TARGET_VALUE * REPLICAS * (1 + rng.uniform(-0.04, 0.04))
    h.wait_synced("elasticscalers")
    h.wait_synced("deployments")
    cpu: list[float] = []
    shortcut = 0
    for req in reqs:
        t0 = time.thread_time()
        if h.reconciler.poll(req):
            shortcut += 1
            mx.complete(("metrics", NS, req.name))
        h.reconciler.reconcile(req)
        cpu.append(time.thread_time() - t0)
    return cpu, shortcut


def run() -> list[dict[str, Any]]:
    mx = ManualExecutor()
    with harness(outbound=mx, poll_interval=POLL) as h:
        _production_handlers(h)
        reads = _Reads()
        reads.wrap(h)
        reqs = _fleet(h, mx, SCALERS)
        rng = random.Random(1)
        _round(h, mx, reqs, rng)  # warm-up, discarded
        medians: list[float] = []
        polls = shortcuts = 0
        writes0 = h.client.count("patch", "elasticscalers/status")
        reads.n = 0
        for _ in range(ROUNDS):
            cpu, shortcut = _round(h, mx, reqs, rng)
            medians.append(statistics.median(cpu))
            polls += len(cpu)
            shortcuts += shortcut
        return [{"case": "idle noisy ±4%", "scalers": SCALERS, "rounds": ROUNDS,
                 "cpu ms/poll (median)": round(statistics.median(medians) * 1000, 3),
                 "best round": round(min(medians) * 1000, 3),
                 "target reads/poll": round(reads.n / polls, 2),
                 "polls via shortcut": f"{shortcuts}/{polls}",
                 "status writes": h.client.count("patch", "elasticscalers/status") - writes0,
                 "replicas after": h.replicas("web-0")}]


if __name__ == "__main__":
    from run import table  # type: ignore[import-not-found]

    print(table(run()))
