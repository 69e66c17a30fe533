"""Tidal on the real control plane (issue 11, Tidal acceptance), asserted on what ``kubectl get tidal``
and ``kubectl get deploy`` show:

* the shipped sample ``manifests/samples/tidal.yaml`` applied as it is (in ``default``, which its
  labels name), with the StateTrigger ElasticScaler of ``manifests/samples/elasticscaler.yaml`` that
  follows it and the Deployment they point at, reaches Ready, shows its columns, and the Deployment
  follows the schedule. The Deployment starts above every count the schedule gives, so following it
  is a scale-down, which must come at once (issue 28 item 3: with a 300 s scale-down window on the
  follower, as before, the Deployment would sit at its first count for 5 minutes);
* a Tidal whose rules start at a minute boundary (one rule in UTC, one in Asia/Kathmandu, +05:45)
  drives a StateTrigger ElasticScaler: the Deployment's replicas change within 1.5 s of each
  transition (delays printed), up, across a rule handover, and back at the last rule's end, and
  **not before it** (issue 28): the manager's write of the Tidal's status and its replica write are
  each the only one of the transition, and the API server received both at or after the real
  instant at which the manager's clock reached the boundary (audit log ``requestReceivedTimestamp``,
  microseconds); the manager is restarted in the middle of the first rule and the Tidal's state
  never flips (same status, no status write) while the new manager handles the next transitions.
  The managers run on a test clock (``--unsafe-test-clock-file``, ``tests/e2e/testclock.py``)
  instead of the wall clock: the boundaries are whole minutes of *manager* time, and before each
  the test steps the clock to ``LEAD_SECONDS`` before it, so each is seconds of real time away (no
  wait for a real minute); a transition's delay is measured from the real instant at which the
  manager's clock reaches it. The restarted manager is given the same clock file, so it runs on the
  same time. The expected counts are the rules' literal ``replicas``;
* a Tidal without the binding labels reports ``Ready=False/MissingRequiredLabels`` and still
  computes ``desiredReplicas`` (the expected count written out from the rule's dates);
* a Tidal rule of 0 replicas takes a follower with ``minReplicas: 0`` to 0, and back up when the
  rule's count is raised.

kwok pods become Ready at once; readiness does not matter here (StateTrigger writes are not held by
a rollout guard when the Deployment is settled).

The expectations never come from escaler's own schedule code (``escaler.scaling.schedule``,
``escaler.scaling.tidal``): the shipped sample's expected count, active rules and next transition
are computed here with croniter directly (``_sample_expectation``), the others are written out.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from croniter import croniter
from kubernetes import client as k8s

from .conftest import ROOT, Cluster, eventually
from .es_helpers import AuditLog, Manager, apply, cond, deployment, hold, seen_scale_writes, start_manager
from .testclock import ManagerClock

pytestmark = pytest.mark.e2e

TIDAL_API = "tidal.io/v1alpha1"
NO_SCALE_DOWN_WINDOW = {"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}
# issue 11: the Deployment follows a transition within this long
TRANSITION_BUDGET_SECONDS = 1.5
# the test steps the manager's clock to this many seconds before a boundary: real seconds to wait
LEAD_SECONDS = 3.0
# how long the restarted manager's workers must leave the Tidal and its Deployment alone
RESTART_HOLD_SECONDS = 5.0


def tidal_obj(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "tidal", name, "-n", ns))


def wait_tidal(cluster: Cluster, ns: str, name: str, status: str, reason: str, mgr: Manager,
               timeout: float = 40) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = tidal_obj(cluster, ns, name)
        return obj if cond(obj, "Ready")[:2] == (status, reason) else None

    try:
        return dict(eventually(check, timeout=timeout, what=f"Tidal {name} Ready={status}/{reason}"))
    except AssertionError as e:
        now = cond(tidal_obj(cluster, ns, name), "Ready")
        raise AssertionError(f"{e} (now {now}); manager log:\n{mgr.output(2000)}") from None


def follower(name: str, tidal: str, *, maxr: int = 12) -> dict[str, Any]:
    return {"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
            "metadata": {"name": name, "annotations": NO_SCALE_DOWN_WINDOW},
            "spec": {"targetRef": {"apiVersion": TIDAL_API, "kind": "Tidal", "name": tidal},
                     "minReplicas": 1, "maxReplicas": maxr, "trigger": {"type": "StateTrigger"}}}


def _fires(schedule: str, now: datetime) -> tuple[datetime, datetime]:
    """The last fire at or before ``now`` and the next one after it, by croniter alone (not escaler's
    schedule code). ``schedule`` is ``CRON_TZ=<zone> <five fields>``; croniter is handed ``now`` in
    that zone. Only for zones without daylight saving (the sample's Asia/Shanghai), where croniter's
    own handling of the zone is the whole answer. A fire exactly at ``now`` is the last one (fires
    are whole minutes: ``now`` is nudged past a whole minute)."""
    zone, fields = schedule.removeprefix("CRON_TZ=").split(" ", 1)
    local = now.astimezone(ZoneInfo(zone)) + timedelta(microseconds=1)
    last = croniter(fields, local).get_prev(datetime)
    following = croniter(fields, local).get_next(datetime)
    return last.astimezone(UTC), following.astimezone(UTC)


def _sample_expectation(tidal: dict[str, Any], now: datetime) -> tuple[int, tuple[str, ...], datetime]:
    """docs/guide/tidal.md for the sample, independently of escaler: a rule is active when its last start fire
    is later than its last end fire; the count is the highest active rule's, else ``defaultReplicas``;
    the next transition is the earliest start or end fire after ``now``."""
    spec = tidal["spec"]
    active = [r for r in spec["rules"] if _fires(r["start"], now)[0] > _fires(r["end"], now)[0]]
    desired = max((r["replicas"] for r in active), default=spec["defaultReplicas"])
    following = min(_fires(r[k], now)[1] for r in spec["rules"] for k in ("start", "end"))
    return desired, tuple(r["name"] for r in active), following


@pytest.fixture
def default_ns_sample(cluster: Cluster) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    tidal = yaml.safe_load((ROOT / "manifests" / "samples" / "tidal.yaml").read_text())
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "samples" / "elasticscaler.yaml").read_text()))
    es = next(d for d in docs if d and d["spec"]["targetRef"].get("kind") == "Tidal")
    try:
        yield tidal, es
    finally:
        for kind, name in (("tidal", tidal["metadata"]["name"]), ("es", es["metadata"]["name"]),
                           ("deployment", tidal["spec"]["targetRef"]["name"])):
            cluster.kubectl("delete", kind, name, "-n", "default", "--ignore-not-found", check=False)


def test_shipped_sample_reaches_ready_and_drives_its_deployment(
    cluster: Cluster, tmp_path: Path, managers: list[Manager],
    default_ns_sample: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    tidal, es = default_ns_sample
    ns = tidal["metadata"]["labels"]["elasticscaler.io/namespace"]
    target = tidal["spec"]["targetRef"]["name"]
    mgr = start_manager(cluster, tmp_path, user="escaler-tidal-sample", namespace=ns)
    managers.append(mgr)
    start = es["spec"]["maxReplicas"]
    assert max([r["replicas"] for r in tidal["spec"]["rules"]] + [tidal["spec"]["defaultReplicas"]]) < start
    apply(cluster, ns, deployment(target, start))  # above the schedule: following it is a scale-down
    cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / "samples" / "tidal.yaml"))
    apply(cluster, ns, es)
    obj = wait_tidal(cluster, ns, tidal["metadata"]["name"], "True", "Scheduled", mgr)
    desired, active, following = _sample_expectation(tidal, datetime.now(UTC))
    st = obj["status"]
    assert (st.get("desiredReplicas"), tuple(st.get("activeRules") or ())) == (desired, active)
    assert st["nextTransitionTime"] == following.strftime("%Y-%m-%dT%H:%M:%SZ"), (st, following)
    table = cluster.kubectl("get", "tidals", "-n", ns)
    header = table.splitlines()[0].split()
    assert header[:7] == ["NAME", "TARGET", "DESIRED", "ACTIVE", "RULES", "NEXT", "TRANSITION"], table
    assert target in table.splitlines()[1]
    sys.stderr.write(f"\n[e2e] kubectl get tidals:\n{table}")
    eventually(lambda: cluster.kubectl_json("get", "deployment", target, "-n", ns)["spec"]["replicas"]
               == max(1, min(12, desired)), timeout=30, what=f"{target} from {start} down to {desired}")


def _cron(t: datetime, zone: str) -> str:
    local = t.astimezone(ZoneInfo(zone))
    return f"CRON_TZ={zone} {local.minute} {local.hour} {local.day} {local.month} *"


def _wait_transition(apps: k8s.AppsV1Api, ns: str, name: str, want: int, at: datetime, what: str) -> float:
    """Seconds from the transition's real instant ``at`` (when the manager's clock shows it) to the
    Deployment showing ``want`` replicas (polled every 20 ms through one API client)."""
    deadline = time.time() + (at - datetime.now(UTC)).total_seconds() + 30
    while time.time() < deadline:
        if apps.read_namespaced_deployment(name, ns).spec.replicas == want:
            delay = time.time() - at.timestamp()
            sys.stderr.write(f"\n[e2e] Tidal transition ({what}) -> Deployment at {want}: {delay:.3f}s\n")
            return delay
        time.sleep(0.02)
    raise AssertionError(f"{name} never reached {want} replicas after the {what} transition at {at}")


def _not_early(audit: AuditLog, since: int, user: str, ns: str, at: datetime,
               what: str) -> None:
    """The transition at ``at`` (the real instant at which the manager's clock reaches the boundary)
    did not fire early: since the audit log offset ``since`` (taken before the clock was stepped to
    the boundary) the manager ``user`` wrote the Tidal's status once and the Deployment's replicas
    once, and the API server received both at or after ``at``. The Deployment was seen at its new
    count (through a GET: its write's audit event may follow a moment later, ``AuditLog``), and the
    status write completed before it (the follower reads the count from that status)."""
    scale = seen_scale_writes(audit, user, ns, "web", since=since)
    status = audit.writes(users=user, namespace=ns, resource="tidals", subresource="status", name="plan",
                          since=since)

    def received(evs: list[dict[str, Any]]) -> list[str]:
        return [e["requestReceivedTimestamp"] for e in evs]

    assert len(status) == 1 and len(scale) == 1, (
        f"{what}: one Tidal status write and one replica write expected, got {received(status)} and "
        f"{received(scale)}")
    boundary = at.timestamp()
    for kind, ev in (("Tidal status", status[0]), ("replica", scale[0])):
        got = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))
        sys.stderr.write(f"[e2e] {what}: {kind} write {got.timestamp() - boundary:+.3f}s from the boundary\n")
        assert got.timestamp() >= boundary, (
            f"{what}: the {kind} write came {boundary - got.timestamp():.3f}s before the boundary "
            f"({ev['requestReceivedTimestamp']} < {at.isoformat()} real)")


def _follower_settled(cluster: Cluster, ns: str, name: str) -> bool:
    """Whether the StateTrigger scaler ``name`` has reconciled its current spec (status conditions
    for its generation)."""
    obj = cluster.kubectl_json("get", "es", name, "-n", ns)
    st = obj.get("status") or {}
    return st.get("observedGeneration") == obj["metadata"]["generation"] and bool(st.get("conditions"))


def _state(cluster: Cluster, ns: str, name: str) -> tuple[Any, ...]:
    st = tidal_obj(cluster, ns, name).get("status") or {}
    return st.get("desiredReplicas"), tuple(st.get("activeRules") or ()), st.get("nextTransitionTime")


def _workers_started(mgr: Manager, *controllers: str) -> bool:
    out = mgr.output(200_000)
    return all(f"workers for controller {c}" in out for c in controllers)


def test_transitions_drive_a_state_trigger_scaler_within_budget_across_a_restart(
    cluster: Cluster, namespace: str, tmp_path: Path, managers: list[Manager], api_client: Any,
) -> None:
    apps = k8s.AppsV1Api(api_client)
    audit = AuditLog.of(cluster)
    clock = ManagerClock(tmp_path / "clock")
    mgr = start_manager(cluster, tmp_path, user="escaler-tidal-a", namespace=namespace,
                        test_clock_file=clock.path)
    managers.append(mgr)
    apply(cluster, namespace, deployment("web", 1))
    # far enough in manager time that no boundary passes before the test steps to it
    t1 = clock.next_minute(margin=60)
    t2, t3 = t1 + timedelta(minutes=1), t1 + timedelta(minutes=2)
    tidal = {
        "apiVersion": TIDAL_API, "kind": "Tidal",
        "metadata": {"name": "plan", "labels": {"elasticscaler.io/name": "follow",
                                                "elasticscaler.io/namespace": namespace}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "defaultReplicas": 1,
                 "rules": [{"name": "utc", "start": _cron(t1, "UTC"), "end": _cron(t2, "UTC"), "replicas": 3},
                           {"name": "kathmandu", "start": _cron(t2, "Asia/Kathmandu"),
                            "end": _cron(t3, "Asia/Kathmandu"), "replicas": 4}]},
    }
    apply(cluster, namespace, tidal)
    apply(cluster, namespace, follower("follow", "plan"))
    wait_tidal(cluster, namespace, "plan", "True", "Scheduled", mgr)
    assert _state(cluster, namespace, "plan") == (1, (), t1.strftime("%Y-%m-%dT%H:%M:%SZ"))
    # the budget is for a scaler that has reconciled, as it has long before a real transition;
    # stepping at once could time the scaler's own start-up instead
    eventually(lambda: _follower_settled(cluster, namespace, "follow"), timeout=60,
               what=f"the follower's first reconcile; log:\n{mgr.output(2000)}")
    since = audit.offset()
    clock.step_to(t1 - timedelta(seconds=LEAD_SECONDS), mgr)
    delays = [_wait_transition(apps, namespace, "web", 3, clock.real(t1), "utc rule starts")]
    _not_early(audit, since, "escaler-tidal-a", namespace, clock.real(t1), "utc rule starts")
    # restart the manager in the middle of the rule: the state must not flip, nor be rewritten
    during = _state(cluster, namespace, "plan")
    assert during[:2] == (3, ("utc",))
    rv = tidal_obj(cluster, namespace, "plan")["metadata"]["resourceVersion"]
    mgr.stop()
    mgr2 = start_manager(cluster, tmp_path, user="escaler-tidal-b", namespace=namespace,
                         test_clock_file=clock.path)
    managers.append(mgr2)

    def unchanged() -> bool:
        return (_state(cluster, namespace, "plan") == during
                and apps.read_namespaced_deployment("web", namespace).spec.replicas == 3)

    # unchanged while the new manager starts, syncs and its workers reconcile what they were handed
    eventually(lambda: not unchanged() or _workers_started(mgr2, "tidal", "elasticscaler"), timeout=60,
               what=f"the restarted manager's workers; log:\n{mgr2.output(2000)}")
    assert unchanged(), f"the Tidal's state changed across the restart: {_state(cluster, namespace, 'plan')}"
    hold(unchanged, seconds=RESTART_HOLD_SECONDS, what="Tidal state across a restart")
    assert clock.manager_now() < t2 - timedelta(seconds=LEAD_SECONDS)
    assert tidal_obj(cluster, namespace, "plan")["metadata"]["resourceVersion"] == rv, \
        "the restarted manager rewrote an unchanged Tidal status"
    since = audit.offset()
    clock.step_to(t2 - timedelta(seconds=LEAD_SECONDS), mgr2)
    handover = "utc ends, kathmandu starts"
    delays.append(_wait_transition(apps, namespace, "web", 4, clock.real(t2), handover))
    _not_early(audit, since, "escaler-tidal-b", namespace, clock.real(t2), handover)
    assert _state(cluster, namespace, "plan")[:2] == (4, ("kathmandu",))
    since = audit.offset()
    clock.step_to(t3 - timedelta(seconds=LEAD_SECONDS), mgr2)
    delays.append(_wait_transition(apps, namespace, "web", 1, clock.real(t3), "kathmandu ends"))
    _not_early(audit, since, "escaler-tidal-b", namespace, clock.real(t3), "kathmandu ends")
    assert _state(cluster, namespace, "plan")[:2] == (1, ())
    assert all(d <= TRANSITION_BUDGET_SECONDS for d in delays), (
        f"a transition took longer than {TRANSITION_BUDGET_SECONDS}s: {delays}; log:\n{mgr2.output(2000)}")


def test_a_tidal_without_labels_reports_missing_required_labels(
    cluster: Cluster, namespace: str, tmp_path: Path, managers: list[Manager],
) -> None:
    mgr = start_manager(cluster, tmp_path, user="escaler-tidal-labels", namespace=namespace)
    managers.append(mgr)
    apply(cluster, namespace, {
        "apiVersion": TIDAL_API, "kind": "Tidal", "metadata": {"name": "bare"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "defaultReplicas": 2,
                 "rules": [{"name": "always", "start": "CRON_TZ=UTC 0 0 1 1 *",
                            "end": "CRON_TZ=UTC 0 0 31 12 *", "replicas": 6}]},
    })
    obj = wait_tidal(cluster, namespace, "bare", "False", "MissingRequiredLabels", mgr)
    assert "elasticscaler.io/name" in cond(obj, "Ready")[2]
    # the rule runs from Jan 1 00:00 to Dec 31 00:00 UTC: 6 replicas, except on Dec 31 (the default, 2)
    now = datetime.now(UTC)
    assert obj["status"]["desiredReplicas"] == (6 if now < datetime(now.year, 12, 31, tzinfo=UTC) else 2)


def test_a_tidal_at_zero_takes_its_follower_to_zero_and_back(
    cluster: Cluster, namespace: str, tmp_path: Path, managers: list[Manager],
) -> None:
    """Issue 28 item 4: a rule of 0 replicas takes a follower with ``minReplicas: 0`` (and no
    annotations: no scale-down window either) to 0 at once, and a rule above 0 wakes it."""
    mgr = start_manager(cluster, tmp_path, user="escaler-tidal-zero", namespace=namespace)
    managers.append(mgr)
    apply(cluster, namespace, deployment("quiet", 3))
    rule = {"name": "closed", "start": "CRON_TZ=UTC 0 0 1 1 *", "end": "CRON_TZ=UTC 0 0 31 12 *",
            "replicas": 0}
    apply(cluster, namespace, {
        "apiVersion": TIDAL_API, "kind": "Tidal",
        "metadata": {"name": "quiet-hours", "labels": {"elasticscaler.io/name": "quiet-es",
                                                       "elasticscaler.io/namespace": namespace}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "quiet"},
                 "defaultReplicas": 0, "rules": [rule]},
    })
    es = follower("quiet-es", "quiet-hours")
    es["metadata"].pop("annotations")
    es["spec"]["minReplicas"] = 0
    apply(cluster, namespace, es)

    def replicas() -> int:
        return int(cluster.kubectl_json("get", "deployment", "quiet", "-n", namespace)["spec"]["replicas"])

    eventually(lambda: replicas() == 0, timeout=30, what="quiet at 0 replicas")
    # the status is written after the target: wait for the write's conditions
    def written() -> dict[str, Any] | None:
        o = dict(cluster.kubectl_json("get", "es", "quiet-es", "-n", namespace))
        return o if cond(o, "ScalingLimited")[0] else None

    obj = eventually(written, timeout=15, interval=0.1, what="the follower's conditions after the scale to 0")
    assert cond(obj, "ScalingLimited")[:2] == ("False", "DesiredWithinRange"), obj.get("status")
    cluster.kubectl("patch", "tidal", "quiet-hours", "-n", namespace, "--type=json", "-p",
                    '[{"op": "replace", "path": "/spec/rules/0/replicas", "value": 3}]')
    eventually(lambda: replicas() == 3, timeout=30, what="quiet back at 3 replicas")
