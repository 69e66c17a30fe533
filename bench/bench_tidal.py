"""Tidal transition → target write latency, on the real local control plane (issue 11).

Starts ``hack/cluster.py``'s control plane and one ``python -m escaler manager`` (the same setup as
``bench_elasticscaler``: its ``Bench``), then creates ``BENCH_TIDALS`` (default 20: 120 transitions
over 6 minutes, enough to quote a p99) Tidals, each with its own Deployment and StateTrigger
ElasticScaler (no scale-down stabilization). Every Tidal has one
rule that starts on even minutes and ends on odd ones of its zone (UTC, Asia/Kathmandu +05:45,
Australia/Lord_Howe +10:30/+11:00, America/St_Johns -03:30/-02:30 in turn), so each Tidal has a
transition at every minute boundary, up or down. For ``BENCH_TIDAL_MINUTES`` (default 6) boundaries,
the delay from the boundary (the cron fire, wall clock) to the Deployment's ``spec.replicas`` showing
the value the schedule gives (``escaler.scaling.tidal.evaluate``) is read from ONE watch on the
namespace's Deployments (``benchkube.Watch``), not a ``kubectl`` process or a GET per sample.

All Tidals transition at the same instant (cron fires are whole minutes), so the row includes the
queueing of ``BENCH_TIDALS`` simultaneous transitions through both controllers, with the manager's
default reconcile workers (as a platform team runs it).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from bench_elasticscaler import NO_STAB, NS, Bench, pct  # noqa: E402

from escaler.scaling.schedule import parse_schedule  # noqa: E402
from escaler.scaling.tidal import RuleSchedule, evaluate  # noqa: E402

TITLE = "Tidal: transition → target write latency (real control plane)"
NOTES = """
`python bench/run.py bench_tidal` (about 8 minutes: a fresh local control plane, then
`BENCH_TIDAL_MINUTES` minute boundaries). Each Tidal alternates 3 and 1 replicas at every minute
boundary (a rule starting on even minutes of its zone, ending on odd ones; zones with odd offsets
included), followed by its own StateTrigger ElasticScaler with no scale-down stabilization. The delay
is measured from the cron fire instant (the manager and the benchmark share the host clock) to the
Deployment's new `spec.replicas` arriving on one watch: it covers the Tidal's requeue timer, its
status write, the watch event to the ElasticScaler, its reconcile and the `/scale` write. Goal
(issue 11): p99 <= 1.5 s.
"""

TIDALS = int(os.environ.get("BENCH_TIDALS", "20"))
MINUTES = int(os.environ.get("BENCH_TIDAL_MINUTES", "6"))
ZONES = ("UTC", "Asia/Kathmandu", "Australia/Lord_Howe", "America/St_Johns")
HIGH, LOW = 3, 1


def _rule(zone: str) -> dict[str, Any]:
    return {"name": "even-minutes", "start": f"CRON_TZ={zone} */2 * * * *",
            "end": f"CRON_TZ={zone} 1-59/2 * * * *", "replicas": HIGH}


def _desired(zone: str, at: datetime) -> int:
    r = _rule(zone)
    rule = RuleSchedule(r["name"], parse_schedule(r["start"]), parse_schedule(r["end"]), HIGH)
    d = evaluate([rule], LOW, at).desired_replicas
    assert d is not None
    return d


def _setup(b: Bench) -> list[tuple[str, str]]:
    out = []
    for i in range(TIDALS):
        name, zone = f"tidal-{i}", ZONES[i % len(ZONES)]
        b.deployment(name, _desired(zone, datetime.now(UTC)))
        b.apply({"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
                 "metadata": {"name": name, "labels": {"elasticscaler.io/name": name,
                                                       "elasticscaler.io/namespace": NS}},
                 "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                          "defaultReplicas": LOW, "rules": [_rule(zone)]}})
        b.scaler(name, {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "name": name},
                 {"type": "StateTrigger"}, annotations=NO_STAB)
        out.append((name, zone))
    return out


def _boundary_after(margin: float) -> datetime:
    now = datetime.now(UTC)
    t = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return t if (t - now).total_seconds() >= margin else t + timedelta(minutes=1)


def bench_transitions(b: Bench) -> list[float]:
    tidals = _setup(b)
    for name, zone in tidals:  # settled on the current state before the first boundary
        b.wait_replicas(name, _desired(zone, datetime.now(UTC)))
    t = _boundary_after(margin=10)
    out: list[float] = []
    for _ in range(MINUTES):
        # the boundary as a monotonic reading (the watch stamps events with time.monotonic())
        t0 = time.monotonic() + (t.timestamp() - time.time())
        for name, zone in tidals:
            before, after = _desired(zone, t - timedelta(seconds=1)), _desired(zone, t)
            if before != after:
                out.append(b.wait_replicas(name, after, t0, timeout=max(60.0, t0 - time.monotonic() + 60)))
        print(f"  boundary {t:%H:%M}: {len(out)} transitions so far, last {out[-1]:.3f} s", flush=True)
        t += timedelta(minutes=1)
    return out


def run() -> list[dict[str, Any]]:
    b = Bench(workers=None)
    try:
        xs = bench_transitions(b)
    finally:
        b.close()
    return [{
        "measurement": "Tidal transition → target write",
        "tidals": TIDALS,
        "transitions": len(xs),
        "p50 s": round(statistics.median(xs), 3),
        "p99 s": round(pct(xs, 99), 3),
        "max s": round(max(xs), 3),
        "goal p99 s": 1.5,
    }]


def main() -> int:
    from run import table

    print(table(run()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
