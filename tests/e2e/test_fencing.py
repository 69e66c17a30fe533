"""Leader fencing on the real control plane (issue 9, "Leader fencing").

Two managers with ``--leader-elect`` share one Lease, each as its own client-certificate user, so
the API server's audit log attributes every write. Twenty MetricsTrigger scalers poll every 1 s
while the load keeps changing, so the leader is always writing: ``/scale``, status patches and
Events. The leader is frozen with SIGSTOP (a long GC pause, CPU throttling, a paused VM); the
standby takes the lease over; only then, and at least 20 s after the freeze, the old leader is
thawed. Its lease is long past its renew deadline: from the moment the standby took over, the
audit log must show **no** write by the old leader's user — not a target, not a status, not an
Event (a backlog flushed on waking), not an HPA. The only tolerated request is a lease update
the API server refuses with 409 (a renewal frozen mid-send cannot be un-sent, and it changes
nothing).

``kill -9`` cannot find this bug; only a frozen process that wakes up can.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually
from .es_helpers import (
    QUICK,
    AuditLog,
    Manager,
    SeriesFeeder,
    _ts,
    deployment,
    external_metric,
    lease_holder,
    metrics_trigger,
    scaler,
    start_manager,
    wait_cond,
)

pytestmark = pytest.mark.e2e

LEASE = "escaler-fencing"
SCALERS = 20
FREEZE_SECONDS = 20.0
# a load that never settles: every phase moves most targets by a replica or more
PHASES = [(load, 4.0) for load in (40, 90, 30, 110, 50, 100, 35, 95) * 6]


def _fleet(cluster: Cluster, ns: str) -> None:
    annotations = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}
    items: list[dict[str, Any]] = []
    for i in range(SCALERS):
        items.append(deployment(f"w{i}", 1))
        # a different target per scaler, so the fleet's answers differ and all move
        trigger = metrics_trigger(external_metric("load", str(10 + i)))
        items.append(scaler(f"s{i}", f"w{i}", trigger, maxr=12, annotations=annotations))
    for item in items:
        item["metadata"]["namespace"] = ns
    cluster.apply(items)


def _first_lease_write(audit: AuditLog, user: str, ns: str) -> dict[str, Any] | None:
    """The standby's first successful lease write: it acquires the lease with it."""
    writes = audit.writes(users=user, namespace=ns, resource="leases", name=LEASE)
    return writes[0] if writes else None


def _describe(writes: list[dict[str, Any]]) -> list[str]:
    return [f"{e['requestReceivedTimestamp']} {e['verb']} {e['objectRef'].get('resource', '')}"
            f"{'/' + e['objectRef']['subresource'] if e['objectRef'].get('subresource') else ''} "
            f"{e['objectRef'].get('name', '')} -> {e['responseStatus'].get('code')}" for e in writes]


def test_frozen_leader_writes_nothing_after_the_standby_takes_over(
    cluster: Cluster, namespace: str, fake_metrics: Any, tmp_path: Path, managers: list[Manager],
) -> None:
    ns = namespace
    fake_metrics.set_external(ns, "load", 40)
    a = start_manager(cluster, tmp_path, user="escaler-fence-a", namespace=ns, leader_elect=True,
                      leader_election_id=LEASE, api=False, poll="1s")
    managers.append(a)
    holder = eventually(lambda: lease_holder(cluster, ns, LEASE), timeout=30,
                        what=f"a leader; log:\n{a.output()}")
    b = start_manager(cluster, tmp_path, user="escaler-fence-b", namespace=ns, leader_elect=True,
                      leader_election_id=LEASE, api=False, poll="1s")
    managers.append(b)
    _fleet(cluster, ns)
    wait_cond(cluster, ns, f"s{SCALERS - 1}", "ScalingActive", "True", "MetricsAvailable", a, timeout=60)
    feeder = SeriesFeeder(fake_metrics, ns, "load", PHASES, noise=0.2, step=1.0).start()
    audit = AuditLog.of(cluster)
    try:
        # the leader is busy writing before the freeze
        since = audit.offset()
        eventually(lambda: len(audit.writes(users=a.user, namespace=ns, resource="deployments",
                                            since=since)) >= 5,
                   timeout=40, what=f"the leader scaling the fleet; log:\n{a.output(1500)}")
        frozen_wall = time.time()
        a.signal(signal.SIGSTOP)
        frozen = time.monotonic()
        eventually(lambda: lease_holder(cluster, ns, LEASE) not in ("", holder), timeout=45, interval=0.5,
                   what=f"the standby to take the lease; B's log:\n{b.output()}")
        took = eventually(lambda: _first_lease_write(audit, b.user, ns), timeout=10,
                          what="the standby's lease write in the audit log")
        takeover_wall = _ts(took["requestReceivedTimestamp"])
        # stay frozen at least FREEZE_SECONDS, and until the new leader is certainly writing
        time.sleep(max(0.0, frozen + FREEZE_SECONDS - time.monotonic()) + 1.0)
        woke_wall = time.time()
        a.signal(signal.SIGCONT)
        # what the old leader does on waking happens within milliseconds; give it ample time
        with contextlib.suppress(subprocess.TimeoutExpired):
            a.proc.wait(15)
        time.sleep(2.0)
    finally:
        feeder.stop()
    after = audit.writes(users=a.user, after=takeover_wall, successful=None)
    harmful = [e for e in after
               if not (e["objectRef"].get("resource") == "leases" and e["responseStatus"].get("code") == 409)]
    new_leader_writes = audit.writes(users=b.user, namespace=ns, resource="deployments",
                                     after=takeover_wall)
    sys.stderr.write(
        f"\n[e2e] fencing: frozen at {frozen_wall:.3f}, takeover at {takeover_wall:.3f} "
        f"({takeover_wall - frozen_wall:.1f}s later), thawed at {woke_wall:.3f}; old leader exit code "
        f"{a.proc.poll()}; old leader requests after the takeover: {len(after)} "
        f"({len(harmful)} writes): {_describe(after)[:40]}; new leader /scale writes: "
        f"{len(new_leader_writes)}\n")
    assert new_leader_writes, "the new leader never wrote a target: the load did not keep changing?"
    assert not harmful, (f"the old leader wrote {len(harmful)} times after the standby took over:\n"
                         + "\n".join(_describe(harmful)[:60]) + f"\nits log:\n{a.output(3000)}")
    assert a.proc.poll() == 1, f"a leader that lost its lease exits 1; log:\n{a.output(2000)}"
