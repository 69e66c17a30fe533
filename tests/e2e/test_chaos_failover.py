"""Leader failover, repeated (issue 15, "Leader failover"), on the real control plane.

Two managers with ``--leader-elect`` (default timings: lease 15 s, renew deadline 10 s, retry
2 s) share one Lease, each as its own client-certificate user, so the audit log attributes every
write. Six MetricsTrigger scalers poll every 1 s while the load keeps changing, so the leader is
always writing. Then, again and again: ``kill -9`` the leader (or, every other time, freeze it with
``SIGSTOP`` and thaw it after the takeover), measure the takeover, restart the killed manager as the
new standby (same user), let it watch the Lease for a while, and fail the new leader.

Per failover:

* the takeover (the heir's first successful Lease write, from the audit log) comes at most 17 s
  (issue 15) after the ``kill -9``/``SIGSTOP``: the standby watches the Lease, so it counts the
  15 s lease from the dead leader's last renewal, which is at most one 2 s renewal period before
  the failure (docs/reliability.md);
* a frozen leader, thawed after the takeover, exits with "leader election lost" (code 1) and has
  written nothing since the takeover (below);
* **no overlap**: from the heir's takeover to the next failover, the killed user writes nothing
  (its restarted process is a standby), except Lease requests; and the heir writes scalers'
  targets. Requests the killed process sent before the kill may reach a loaded API server after
  it, but long before the takeover 15 s later: they are counted (``late_requests``);

and at the end every scaler still converges on a new load.

Reduced (every e2e run): 2 failovers, one ``kill -9`` and one ``SIGSTOP``. Full
(``ESCALER_CHAOS=full``): 50, 25 of each. Reports (``record_property``): ``runs``,
``passed`` (failovers that held), ``worst_takeover_s`` (kill → heir's Lease write), ``writes``
(successful writes by the managers, Leases excluded), ``peak_rss_mib`` (the largest of the
managers').
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
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
    chaos_runs,
    deployment,
    external_metric,
    lease_holder,
    metrics_trigger,
    peak_rss_mib,
    replicas,
    scaler,
    start_manager,
    wait_cond,
)

# serial tier (docs/testing.md): it times leader failover, which the other workers' load would skew
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.serial]

LEASE = "escaler-chaos-failover"
SCALERS = 6
PER_REPLICA = 10
# issue 15's bound: the standby watches the Lease, so it counts the 15 s lease from the dead
# leader's last renewal (at most one 2 s renewal period before the kill), not from a late read
TAKEOVER_BOUND = 17.0
# the standby watches the Lease this long, from its first sight of the leader, before the next
# failure (it must have seen a renewal: the leader renews every 2 s)
STANDBY_WARM = 4.0
USERS = ("chaos-fo-a", "chaos-fo-b")


def _fleet(cluster: Cluster, ns: str) -> None:
    annotations = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}
    items: list[dict[str, Any]] = []
    for i in range(SCALERS):
        items.append(deployment(f"w{i}", 1))
        items.append(scaler(f"s{i}", f"w{i}", metrics_trigger(external_metric("load", str(PER_REPLICA))),
                            maxr=12, annotations=annotations))
    for item in items:
        item["metadata"]["namespace"] = ns
    cluster.apply(items)


def _warm(standby: Manager) -> None:
    """Wait until the standby's elector has seen the leader (a loaded machine can start a manager
    slowly: a standby that has not yet read the Lease counts the lease from its first read, later
    than the failure), then a renewal period and more."""
    eventually(lambda: "current leader: " in standby.output(10**6), timeout=60,
               what=f"the standby sees the leader; log:\n{standby.output()}")
    time.sleep(STANDBY_WARM)


def _describe(writes: list[dict[str, Any]]) -> list[str]:
    return [f"{e['requestReceivedTimestamp']} {e['verb']} {e['objectRef'].get('resource', '')}"
            f"{'/' + e['objectRef']['subresource'] if e['objectRef'].get('subresource') else ''} "
            f"{e['objectRef'].get('name', '')} -> {e['responseStatus'].get('code')}" for e in writes]


def _not_lease(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in writes if e["objectRef"].get("resource") != "leases"]


def _takeover(cluster: Cluster, ns: str, audit: AuditLog, heir: Manager, heir_user: str, holder: str,
              since: int, killed_wall: float, k: int) -> float:
    """The wall time of the heir's first Lease write after the kill; then the heir scales the fleet."""
    eventually(lambda: lease_holder(cluster, ns, LEASE) not in ("", holder), timeout=40, interval=0.2,
               what=f"failover {k}: the heir to take the lease; log:\n{heir.output()}")
    took = eventually(lambda: audit.writes(users=heir_user, namespace=ns, resource="leases", name=LEASE,
                                           since=since, after=killed_wall), timeout=10,
                      what="the heir's Lease write in the audit log")[0]
    eventually(lambda: audit.scale_writes(heir_user, ns, since=since), timeout=30,
               what=f"failover {k}: the heir scaling the fleet; log:\n{heir.output(1500)}")
    return float(_ts(took["requestReceivedTimestamp"]))


# each failover takes about 30 s (15 s lease, the heir's first writes, the standby's warm-up)
@pytest.mark.timeout(chaos_runs(600, 3600))
def test_leader_killed_again_and_again_hands_over_without_overlap(
        cluster: Cluster, namespace: str, fake_metrics: Any, tmp_path: Path, managers: list[Manager],
        record_property: Callable[[str, object], None]) -> None:
    ns = namespace
    runs = chaos_runs(2, 50)
    record_property("runs", runs)
    fake_metrics.set_external(ns, "load", 40)
    audit = AuditLog.of(cluster)

    def start(user: str, k: int) -> Manager:
        work = tmp_path / f"{user}-{k}"
        work.mkdir()
        m = start_manager(cluster, work, user=user, namespace=ns, leader_elect=True,
                          leader_election_id=LEASE, api=False, poll="1s")
        managers.append(m)
        return m

    live = {USERS[0]: start(USERS[0], 0)}
    holder = eventually(lambda: lease_holder(cluster, ns, LEASE), timeout=30,
                        what=f"a leader; log:\n{live[USERS[0]].output()}")
    live[USERS[1]] = start(USERS[1], 0)
    _fleet(cluster, ns)
    wait_cond(cluster, ns, f"s{SCALERS - 1}", "ScalingActive", "True", "MetricsAvailable",
              live[USERS[0]], timeout=60)
    phases = [(load, 3.0) for load in (40, 90, 30, 110, 50, 100)] * (runs * 3)
    feeder = SeriesFeeder(fake_metrics, ns, "load", phases, noise=0.2, step=1.0).start()
    leader_user, worst, peak, late = USERS[0], 0.0, 0.0, 0
    _warm(live[USERS[1]])
    try:
        for k in range(runs):
            heir_user = USERS[1] if leader_user == USERS[0] else USERS[0]
            leader, heir = live[leader_user], live[heir_user]
            assert heir.alive(), heir.output()
            peak = max(peak, peak_rss_mib(leader.proc.pid), peak_rss_mib(heir.proc.pid))
            since, killed_wall = audit.offset(), time.time()
            frozen = k % 2 == 1  # every other failover the leader is frozen, not killed
            leader.signal(signal.SIGSTOP if frozen else signal.SIGKILL)
            if not frozen:
                leader.proc.wait(10)
            took_wall = _takeover(cluster, ns, audit, heir, heir_user, holder, since, killed_wall, k)
            takeover = took_wall - killed_wall
            worst = max(worst, takeover)
            holder = lease_holder(cluster, ns, LEASE)
            how = "frozen" if frozen else "killed"
            sys.stderr.write(f"\n[chaos] failover {k}: {leader_user} {how}, {heir_user} took the lease "
                             f"{takeover:.1f}s later\n")
            assert takeover <= TAKEOVER_BOUND, (k, takeover)
            if frozen:
                # thawed after the takeover, the old leader finds its lease deadline passed: it
                # writes nothing (the fence), logs the loss and exits, as controller-runtime does
                leader.signal(signal.SIGCONT)
                code = leader.proc.wait(30)
                assert code == 1 and "leader election lost" in leader.output(10**6), (code, leader.output())
            # the killed (or exited) manager comes back as the standby
            live[leader_user] = start(leader_user, k + 1)
            _warm(live[leader_user])
            # no overlap: from the heir's takeover on, the killed user (its restarted process a
            # standby) sent nothing but Lease requests. Requests the old process had sent before
            # the kill may still be received after it (a loaded API server reads them late: seen
            # with 504 answers at load 12); they are counted, not refused.
            mine = _not_lease(audit.writes(users=leader_user, namespace=ns, since=since, after=killed_wall,
                                           successful=None))
            overlap = [e for e in mine if _ts(e["requestReceivedTimestamp"]) >= took_wall]
            late += len(mine) - len(overlap)
            assert not overlap, (k, _describe(overlap))
            # recorded as they are reached (bench/chaos.py keeps the last value of each): a failing
            # run still reports its worst takeover and peak so far
            record_property("passed", k + 1)
            record_property("worst_takeover_s", round(worst, 1))
            record_property("peak_rss_mib", peak)
            record_property("late_requests", late)
            leader_user = heir_user
    finally:
        feeder.stop()
    # every scaler converges on a final load: 50 / 10 → 5 each
    fake_metrics.set_external(ns, "load", 50)
    eventually(lambda: all(replicas(cluster, ns, f"w{i}") == 5 for i in range(SCALERS)), timeout=90,
               interval=0.5, what="every target at 5 after the failovers; leader log:\n"
               + live[leader_user].output(1500))
    writes = _not_lease(audit.writes(users=USERS, namespace=ns))
    record_property("writes", len(writes))
    record_property("peak_rss_mib", max(peak, *(peak_rss_mib(m.proc.pid) for m in live.values())))
    sys.stderr.write(f"\n[chaos] {runs} failovers, worst takeover {worst:.1f}s, {len(writes)} writes, "
                     f"{late} requests of a killed leader received after its kill (before the takeover)\n")
