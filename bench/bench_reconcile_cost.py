"""CPU of one ElasticScaler reconcile on the in-process fake API: an idle poll (a flat metric, and a
±4 % noisy one inside apa's tolerance) and a writing reconcile (the metric doubles: a /scale-style
replica write, a status patch and an event).

Run: ``python bench/bench_reconcile_cost.py`` (or ``python bench/run.py bench_reconcile_cost``).
The harness is ``tests/unit/es_fakes.py`` (a ``FakeClock``, inline metric collection from a fake
collector, the real reconciler, status writer and event recorder): no network, so the rows are
the reconciler's own Python cost — what a manager pays per poll per scaler on top of the I/O.
CPU is ``time.thread_time()`` of the thread running the reconcile (the informer threads applying a
write are not counted); after each round the caches are waited on, outside the measurement. The
cProfile top frames of one round of each case are printed (not written to the doc).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from es_fakes import (
    NS,
    Harness,
    deployment,
    external_metric,
    harness,
    metrics_trigger,
    scaler,
)

from escaler.runtime import Request

TITLE = "ElasticScaler reconcile CPU: idle poll vs writing reconcile (fake API, one thread)"
NOTES = """
One MetricsTrigger scaler per Deployment (apa, one External metric, Value target 10 at 4 replicas),
100 scalers, 30 s poll on a FakeClock; metric collection is inline from a fake collector, so no
network time is included. `idle flat`: the metric never moves. `idle noisy ±4%`: ±4 % uniform
noise (seeded), inside apa's 10 % tolerance: no replica change. `writing`: the metric doubles, so
every reconcile writes the target, patches status and records an event (one round).
`status writes/poll` is status patches per reconcile in the measured rounds. CPU per reconcile is
the thread CPU (`time.thread_time`) of the reconcile call: the median of the per-round medians
(8 rounds; `best round`: the lowest, the least disturbed by the machine's load), after a
discarded warm-up case. One thread; the informer threads of the harness run
beside it; numbers vary with the machine's load. The cProfile top frames (thread CPU) are printed
by the script, not written here.
"""

SCALERS = 100
ROUNDS = 8
# print the cProfile top frames of each case (one more round, not measured)
PROFILE = True
POLL = 30.0
TARGET_VALUE = 10.0
REPLICAS = 4
PROFILE_LINES = 14


def _fleet(h: Harness, n: int) -> list[str]:
    names = [f"es-{i}" for i in range(n)]
    for i, name in enumerate(names):
        h.api("deployments").create(deployment(f"web-{i}", REPLICAS))
        h.api("elasticscalers").create(scaler(
            name, metrics_trigger(external_metric(f"q{i}", str(int(TARGET_VALUE)))),
            target={"apiVersion": "apps/v1", "kind": "Deployment", "name": f"web-{i}"}))
        h.collector.values[f"q{i}"] = TARGET_VALUE * REPLICAS
    h.start()
    for name in names:
        h.reconcile(name)  # first sync: watches, first status
    return names


def _writes(h: Harness) -> int:
    return h.client.count("patch", "elasticscalers/status")


def _round(h: Harness, names: list[str], values: Callable[[int], float],
           prof: cProfile.Profile | None = None) -> list[float]:
    """One poll of every scaler; the thread CPU of each reconcile (profiled when ``prof`` is given)."""
    h.clock.step(POLL)
    for i in range(len(names)):
        h.collector.values[f"q{i}"] = values(i)
    h.wait_synced("elasticscalers")
    h.wait_synced("deployments")
    cpu: list[float] = []
    for name in names:
        if prof is not None:
            prof.enable()
        t0 = time.thread_time()
        h.reconciler.reconcile(Request(NS, name))
        cpu.append(time.thread_time() - t0)
        if prof is not None:
            prof.disable()
    return cpu


def _profile(h: Harness, names: list[str], values: Callable[[int], float], label: str) -> None:
    prof = cProfile.Profile(time.thread_time)  # CPU of the reconciling thread, not GIL waits
    _round(h, names, values, prof)
    for order in ("cumulative", "tottime"):
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(order).print_stats(PROFILE_LINES)
        print(f"-- cProfile, {label}, {len(names)} reconciles: top frames by {order} --")
        lines = out.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
        print("\n".join(line for line in lines[start:] if line.strip()))


def _case(label: str, values_for: Callable[[int, random.Random], Callable[[int], float]],
          writing: bool = False) -> dict[str, Any]:
    with harness(poll_interval=POLL) as h:
        names = _fleet(h, SCALERS)
        rng = random.Random(1)
        medians: list[float] = []
        writes = reconciles = 0
        for r in range(ROUNDS):
            before = _writes(h)
            cpu = _round(h, names, values_for(r, rng))
            writes += _writes(h) - before
            reconciles += len(cpu)
            medians.append(sorted(cpu)[len(cpu) // 2])
        if PROFILE:
            _profile(h, names, values_for(ROUNDS, rng), label)
        return {"case": label, "scalers": SCALERS, "rounds": ROUNDS,
                "cpu ms/reconcile (median)": round(sorted(medians)[len(medians) // 2] * 1000, 3),
                "best round": round(min(medians) * 1000, 3),
                "status writes/poll": round(writes / reconciles, 3),
                "target replicas after": h.replicas("web-0") if writing else REPLICAS}


def _flat(r: int, rng: random.Random) -> Callable[[int], float]:
    return lambda i: TARGET_VALUE * REPLICAS


def _noisy(r: int, rng: random.Random) -> Callable[[int], float]:
    return lambda i: TARGET_VALUE * REPLICAS * (1 + rng.uniform(-0.04, 0.04))


def _surge(r: int, rng: random.Random) -> Callable[[int], float]:
    # doubles every round: apa scales x2 per step (up to maxReplicas 10, then clamped: no write)
    return lambda i: TARGET_VALUE * REPLICAS * 2 ** (r + 1)


def run() -> list[dict[str, Any]]:
    global PROFILE
    PROFILE, saved_profile = False, PROFILE
    _case("warm-up (discarded)", _flat)  # imports, pydantic's lazy schemas, allocator
    PROFILE = saved_profile
    rows = [_case("idle flat", _flat), _case("idle noisy ±4%", _noisy)]
    # writing: one round only writes everywhere (4 -> 8); later rounds hit maxReplicas
    global ROUNDS
    saved, ROUNDS = ROUNDS, 1
    try:
        rows.append(_case("writing (metric x2)", _surge, writing=True))
    finally:
        ROUNDS = saved
    return rows


if __name__ == "__main__":
    from run import table  # type: ignore[import-not-found]

    print(table(run()))
