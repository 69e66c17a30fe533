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
  transition (delays printed), up, across a rule handover, and back at the last rule's end; the
  manager is restarted in the middle of the first rule and the Tidal's state never flips (same
  status, no status write) while the new manager handles the next transitions. The managers run on
  a test clock (``--unsafe-test-clock-file``, ``tests/e2e/testclock.py``) instead of the wall clock:
  the boundaries are whole minutes of *manager* time, and before each the test steps the clock to
  ``LEAD_SECONDS`` before it, so each is seconds of real time away (no wait for a real minute); a
  transition's delay is measured from the real instant at which the manager's clock reaches it.
  The restarted manager is given the same clock file, so it runs on the same time;
* a Tidal without the binding labels reports ``Ready=False/MissingRequiredLabels`` and still
  computes ``desiredReplicas``;
* a Tidal rule of 0 replicas takes a follower with ``minReplicas: 0`` to 0, and back up when the
  rule's count is raised.

kwok pods become Ready at once; readiness does not matter here (StateTrigger writes are not held by
a rollout guard when the Deployment is settled).
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
from kubernetes import client as k8s

from escaler.scaling.schedule import parse_schedule
from escaler.scaling.tidal import RuleSchedule, evaluate

from .conftest import ROOT, Cluster, eventually
from .es_helpers import Manager, apply, cond, deployment, hold, start_manager
from .testclock import ManagerClock

pytestmark = pytest.mark.e2e

TIDAL_API = "tidal.io/v1alpha1"
NO_SCALE_DOWN_WINDOW = {"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}
# SPEC/issue 11: the Deployment follows a transition within this long
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


def expected_now(tidal: dict[str, Any], now: datetime) -> tuple[int | None, tuple[str, ...]]:
    spec = tidal["spec"]
    rules = [RuleSchedule(r["name"], parse_schedule(r["start"]), parse_schedule(r["end"]), r["replicas"])
             for r in spec["rules"]]
    ev = evaluate(rules, spec.get("defaultReplicas"), now)
    return ev.desired_replicas, ev.active_rules


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
    desired, active = expected_now(tidal, datetime.now(UTC))
    st = obj["status"]
    assert (st.get("desiredReplicas"), tuple(st.get("activeRules") or ())) == (desired, active)
    assert datetime.fromisoformat(st["nextTransitionTime"].replace("Z", "+00:00")) > datetime.now(UTC)
    table = cluster.kubectl("get", "tidals", "-n", ns)
    header = table.splitlines()[0].split()
    assert header[:7] == ["NAME", "TARGET", "DESIRED", "ACTIVE", "RULES", "NEXT", "TRANSITION"], table
    assert target in table.splitlines()[1]
    sys.stderr.write(f"\n[e2e] kubectl get tidals:\n{table}")
    assert desired is not None
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
    clock.step_to(t1 - timedelta(seconds=LEAD_SECONDS), mgr)
    delays = [_wait_transition(apps, namespace, "web", 3, clock.real(t1), "utc rule starts")]
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
    clock.step_to(t2 - timedelta(seconds=LEAD_SECONDS), mgr2)
    delays.append(_wait_transition(apps, namespace, "web", 4, clock.real(t2), "utc ends, kathmandu starts"))
    assert _state(cluster, namespace, "plan")[:2] == (4, ("kathmandu",))
    clock.step_to(t3 - timedelta(seconds=LEAD_SECONDS), mgr2)
    delays.append(_wait_transition(apps, namespace, "web", 1, clock.real(t3), "kathmandu ends"))
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
    desired, _ = expected_now(obj, datetime.now(UTC))
    assert obj["status"]["desiredReplicas"] == desired


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
    obj = cluster.kubectl_json("get", "es", "quiet-es", "-n", namespace)
    assert cond(obj, "ScalingLimited")[:2] == ("False", "DesiredWithinRange"), obj.get("status")
    cluster.kubectl("patch", "tidal", "quiet-hours", "-n", namespace, "--type=json", "-p",
                    '[{"op": "replace", "path": "/spec/rules/0/replicas", "value": 3}]')
    eventually(lambda: replicas() == 3, timeout=30, what="quiet back at 3 replicas")
