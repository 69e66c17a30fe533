"""A leader change during a scale-down stabilization window (issue 8, item 6;
docs/concepts.md#the-decision-pipeline step 2).

Two managers with ``--leader-elect`` share one Lease (each as its own user, so the audit log tells
their writes apart). A load spike scales the target up; the load drops, and the 60 s scale-down
window holds the count. During the window the leader fails -- ``kill -9``, or ``SIGSTOP`` (a frozen
process, not a dead one) -- and the standby takes over. A failover must never scale down earlier
than one leader would have: not before the window has elapsed counting from the last high
recommendation, and then it does scale down. A frozen leader that wakes up after losing its
lease must not write.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from .conftest import Cluster, eventually
from .es_helpers import (
    QUICK,
    AuditLog,
    Manager,
    ReplicaRecorder,
    apply,
    deployment,
    external_metric,
    lease_holder,
    metrics_trigger,
    replicas,
    scaler,
    seen_scale_writes,
    start_manager,
    wait_cond,
    wait_replicas,
)

pytestmark = pytest.mark.e2e

LEASE = "escaler-failover"
WINDOW = 60
POLL_SECONDS = 2.0
# one apa step each way (default scaleUpRate/scaleDownRate 2): the spike is 2 -> 4, the drop 4 -> 2, so
# the scale-down is one write, due when the window ends
HIGH, LOW = 4, 2


def _scaled_up_with_two_managers(cluster: Cluster, ns: str, work: Path, managers: list[Manager],
                                 fake_metrics: Any) -> tuple[Manager, Manager, str]:
    """A leads, B stands by; the target has been scaled up to HIGH by A. Returns (A, B, A's identity)."""
    # users named per test: both tests of this file may run at once on the shared control plane, and the
    # audit log is shared, so a per-test name keeps one test's managers out of the other's checks
    a = start_manager(cluster, work, user=f"escaler-failover-a-{ns}", namespace=ns, leader_elect=True,
                      leader_election_id=LEASE, api=False)
    managers.append(a)
    holder = eventually(lambda: lease_holder(cluster, ns, LEASE), timeout=30,
                        what=f"a leader; log:\n{a.output()}")
    b = start_manager(cluster, work, user=f"escaler-failover-b-{ns}", namespace=ns, leader_elect=True,
                      leader_election_id=LEASE, api=False)
    managers.append(b)
    apply(cluster, ns, deployment("llm", LOW))
    fake_metrics.set_external(ns, "queue", 10 * LOW)
    apply(cluster, ns, scaler("s", "llm", metrics_trigger(external_metric("queue", "10")), annotations={
        **QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(WINDOW)}))
    wait_cond(cluster, ns, "s", "ScalingActive", "True", "MetricsAvailable", a)
    fake_metrics.set_external(ns, "queue", 10 * HIGH)  # the spike
    eventually(lambda: replicas(cluster, ns, "llm") == HIGH, timeout=30, what=f"scale-up to {HIGH}")
    assert lease_holder(cluster, ns, LEASE) == holder, "the lease moved before the failure was injected"
    return a, b, holder


def _drop_fail_and_watch(cluster: Cluster, ns: str, api_client: k8s.ApiClient, fake_metrics: Any, a: Manager,
                         b: Manager, holder: str, sig: int,
                         on_takeover: Callable[[], None] | None = None) -> tuple[dict[str, float], list[str]]:
    """Drop the load, fail the leader with ``sig`` inside the window, wait for the scale-down.
    Returns the timing (seconds after the drop) and the problems found (empty when all is well)."""
    audit = AuditLog.of(cluster)
    fake_metrics.set_external(ns, "queue", 10 * LOW)  # needs LOW: held by the window
    dropped, dropped_wall = time.monotonic(), time.time()
    wait_cond(cluster, ns, "s", "AbleToScale", "True", "ScaleDownStabilized", a, timeout=20)
    rec = ReplicaRecorder(api_client, ns, interval=0.5).start()
    try:
        a.signal(sig)
        failed = time.monotonic()
        eventually(lambda: lease_holder(cluster, ns, LEASE) not in ("", holder), timeout=40, interval=0.5,
                   what=f"the standby to take the lease; B's log:\n{b.output()}")
        took_over = time.monotonic()
        if on_takeover is not None:
            on_takeover()
        deadline = dropped + WINDOW + 45
        wait_replicas(cluster, ns, "llm", LOW, scaler_name="s", timeout=deadline - time.monotonic(),
                      interval=0.5, what=f"the scale-down to {LOW} after the window")
        # the recorder's own sample of it (it samples every 0.5 s, on its own phase)
        first_down = eventually(lambda: rec.first_time("llm", lambda n: n < HIGH), timeout=5, interval=0.1,
                                what="the recorder to sample the scale-down")
    finally:
        rec.stop()
    timing = {"failed": failed - dropped, "took_over": took_over - dropped,
              "scaled_down": first_down - dropped}
    sys.stderr.write(f"\n[e2e] failover ({signal.Signals(sig).name}), seconds after the load dropped: "
                     + ", ".join(f"{k} {v:.1f}" for k, v in timing.items()) + "\n")
    problems = []
    # One leader would scale down WINDOW seconds after its last recommendation of HIGH, which came from
    # the last poll before the drop (at most one 2 s poll earlier), so never before drop + WINDOW - 2 s.
    if timing["scaled_down"] < WINDOW - POLL_SECONDS:
        problems.append(f"scaled down {timing['scaled_down']:.1f}s after the drop, inside the {WINDOW}s "
                        f"window (new leader at {timing['took_over']:.1f}s)")
    # the new leader wrote the scale-down; the old one wrote no replicas after the drop
    try:  # seen through a GET: its audit event may follow a moment later (AuditLog)
        seen_scale_writes(audit, b.user, ns, "llm")
    except AssertionError:
        problems.append("the new leader never wrote the scale-down")
    old = audit.writes(users=a.user, namespace=ns, resource="deployments", after=dropped_wall)
    if old:
        problems.append(f"the failed leader wrote the target after the drop: {_describe(old)}")
    return timing, problems


def _describe(writes: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    return [(e["verb"], e["objectRef"].get("resource", ""), e["objectRef"].get("subresource", ""),
             int(e["responseStatus"]["code"])) for e in writes]


def test_leader_killed_during_the_window_does_not_scale_down_early(
    cluster: Cluster, namespace: str, fake_metrics: Any, api_client: k8s.ApiClient, tmp_path: Path,
    managers: list[Manager],
) -> None:
    a, b, holder = _scaled_up_with_two_managers(cluster, namespace, tmp_path, managers, fake_metrics)
    _, problems = _drop_fail_and_watch(cluster, namespace, api_client, fake_metrics, a, b, holder,
                                       signal.SIGKILL)
    assert not problems, "\n".join(problems)
    assert a.proc.wait(10) == -signal.SIGKILL


def test_leader_frozen_during_the_window_does_not_scale_down_early_nor_write_when_it_wakes(
    cluster: Cluster, namespace: str, fake_metrics: Any, api_client: k8s.ApiClient, tmp_path: Path,
    managers: list[Manager],
) -> None:
    a, b, holder = _scaled_up_with_two_managers(cluster, namespace, tmp_path, managers, fake_metrics)
    woke: list[float] = []

    def wake_the_old_leader() -> None:
        # a few seconds after the standby took over, still inside the window: the old leader's lease
        # is long past its renew deadline. It may try to renew (refused with a conflict); it must
        # write nothing -- not the target (its own window elapses before the test ends), not status,
        # not events, not the lease. A lost lease exits the process.
        time.sleep(3)
        woke.append(time.time())
        a.signal(signal.SIGCONT)

    _, problems = _drop_fail_and_watch(cluster, namespace, api_client, fake_metrics, a, b, holder,
                                       signal.SIGSTOP, on_takeover=wake_the_old_leader)
    with contextlib.suppress(subprocess.TimeoutExpired):  # still running is allowed, writing is not
        a.proc.wait(5)
    writes = AuditLog.of(cluster).writes(users=a.user, after=woke[0])
    if writes:
        problems.append(f"the old leader wrote after it woke: {_describe(writes)}")
    refused = AuditLog.of(cluster).writes(users=a.user, after=woke[0], successful=False)
    sys.stderr.write(f"\n[e2e] frozen leader after SIGCONT: exit code {a.proc.poll()}, {len(writes)} writes, "
                     f"{len(refused)} refused: {_describe(refused)}\n")
    assert not problems, "\n".join(problems)
    assert replicas(cluster, namespace, "llm") == LOW
