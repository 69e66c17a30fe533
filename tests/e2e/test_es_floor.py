"""spec.floorFrom on the real control plane (issue 16, docs/design.md#beyond-the-seeds): a MetricsTrigger
ElasticScaler on the fake Prometheus (ExternalServer, AverageValue 10, low load 5: one replica; 2 s poll, the
QUICK window, an 8 s scale-down window) names a floor Tidal in its namespace (no elasticscaler.io labels,
its targetRef the same Deployment, no StateTrigger follows it). Rule times are UTC.

* ``test_floor_lifts_at_the_rule_start_and_releases_at_its_end``: a rule starting at a whole minute
  and ending a minute later lifts the Deployment 1 -> 4 at its start (not before: the API server
  received the manager's one replica write at or after the real instant at which the manager's clock
  reached the start, audit log; ScheduleFloor=True/FloorActive, recentDecisions boundBy Floor) and,
  after its end, the scale-down
  window holds the 4 (AbleToScale=ScaleDownStabilized) before the count comes back to 1; the Tidal
  reports Ready (a floor Tidal needs no labels and is no conflict), and ``escaler explain`` shows the
  floor step. The manager runs on a test clock (``--unsafe-test-clock-file``,
  ``tests/e2e/testclock.py``): the start and the end are whole minutes of *manager* time at least a
  minute ahead, and the test steps the clock to ``LEAD_SECONDS`` before each, so neither is more
  than seconds of real time away; "before the start", "after the end" and the window's hold are
  measured from the real instants at which the manager's clock reaches them;
* ``test_an_excluded_date_does_not_lift``: a rule active now with today's date (UTC) in
  ``excludeDates`` leaves the Deployment at 1 (ScheduleFloor=False/NoActiveRule) over three polls
  (every sample at 1, and the manager made no replica write at all: audit log); dropping the date
  lifts it to 4 at once (the Tidal's spec change wakes the scaler). "At once" is measured: the test
  drops the date ``AFTER_POLL_SECONDS`` after a poll (the fake Prometheus sees the scaler's query),
  so the next poll is at least 1.5 s away, and the API server must receive the manager's replica
  write within ``WAKE_BUDGET_SECONDS`` (1 s, half the 2 s poll interval) of the Tidal's spec write
  (both audit log timestamps): a scaler that only saw the change at its next poll misses it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import (
    QUICK,
    AuditLog,
    apply,
    cond,
    deployment,
    es,
    hold,
    replicas,
    scaler,
    seen_scale_writes,
    start_manager,
)
from .testclock import ManagerClock

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DOWN_WINDOW = 8
POLL_SECONDS = 2
ANNOTATIONS = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(DOWN_WINDOW)}
FLOOR = 4
# the test steps the manager's clock to this many seconds before the rule's start and end
LEAD_SECONDS = 4.0
# the excluded date is dropped this long after a poll's query (the poll's sync is over by then)...
AFTER_POLL_SECONDS = 0.3
# ...and the replica write must follow the Tidal's spec write within this long: half the poll
# interval, while the next poll is POLL_SECONDS - AFTER_POLL_SECONDS away
WAKE_BUDGET_SECONDS = POLL_SECONDS / 2


def _trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {
        "scalingAlgorithm": "apa",
        "metrics": [{"type": "ExternalServer",
                     "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                                        "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def _cron(at: datetime) -> str:
    return f"CRON_TZ=UTC {at.minute} {at.hour} {at.day} {at.month} *"


def _tidal(name: str, target: str, start: datetime, end: datetime,
           exclude: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"name": "launch", "start": _cron(start), "end": _cron(end), "replicas": FLOOR}
    if exclude is not None:
        rule["excludeDates"] = exclude
    return {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "rules": [rule]}}


def _setup(cluster: Cluster, namespace: str, prometheus: PrometheusServer, name: str,
           tidal: dict[str, Any]) -> str:
    query = f'requests{{namespace="{namespace}",app="{name}"}}'
    prometheus.set(query, 5.0)  # one replica on load alone
    apply(cluster, namespace, deployment(name, 1))
    apply(cluster, namespace, tidal)
    apply(cluster, namespace, scaler(name, name, _trigger(prometheus.url, query), minr=1, maxr=8,
                                     annotations=ANNOTATIONS, floorFrom={"name": tidal["metadata"]["name"]}))
    return query


def _floor(cluster: Cluster, namespace: str, name: str) -> tuple[str, str, str]:
    return cond(es(cluster, namespace, name), "ScheduleFloor")


def _received(ev: dict[str, Any]) -> datetime:
    """When the API server received an audited request."""
    return datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))


def _after_a_poll(prometheus: PrometheusServer, query: str, timeout: float = 3 * POLL_SECONDS) -> None:
    """Returns ``AFTER_POLL_SECONDS`` after the scaler's next query of ``query`` (its poll)."""
    seen = prometheus.queries.count(query)
    deadline = time.monotonic() + timeout
    while prometheus.queries.count(query) == seen:
        assert time.monotonic() < deadline, f"no poll of {query} in {timeout}s"
        time.sleep(0.01)
    time.sleep(AFTER_POLL_SECONDS)


def test_floor_lifts_at_the_rule_start_and_releases_at_its_end(
        cluster: Cluster, namespace: str, prometheus: PrometheusServer, managers: list[Any],
        tmp_path: Path) -> None:
    audit = AuditLog.of(cluster)
    clock = ManagerClock(tmp_path / "clock")
    # far enough in manager time that the start does not pass before the test steps to it
    start = clock.next_minute(margin=60)
    end = start + timedelta(minutes=1)
    _setup(cluster, namespace, prometheus, "fl", _tidal("fl-floor", "fl", start, end))
    manager = start_manager(cluster, tmp_path, user="escaler-floor", namespace=namespace,
                            test_clock_file=clock.path)
    managers.append(manager)

    eventually(lambda: _floor(cluster, namespace, "fl")[:2] == ("False", "NoActiveRule"), timeout=60,
               what=f"the first decision, no floor yet; log:\n{manager.output()}")
    assert replicas(cluster, namespace, "fl") == 1

    def ready() -> bool:  # a floor Tidal: no labels needed, no conflict with the scaler it floors
        return cond(cluster.kubectl_json("get", "tidal", "fl-floor", "-n", namespace), "Ready")[:2] == (
            "True", "Scheduled")

    eventually(ready, timeout=30, what="the floor Tidal Ready")

    # held at 1 until the rule's start (the real instant at which the manager's clock shows it)
    since = audit.offset()
    clock.step_to(start - timedelta(seconds=LEAD_SECONDS), manager)
    start_real = clock.real(start)
    until_start = (start_real - datetime.now(UTC)).total_seconds()
    hold(lambda: replicas(cluster, namespace, "fl") == 1, max(0.0, until_start - 1), interval=0.5,
         what="1 replica before the rule's start")
    eventually(lambda: replicas(cluster, namespace, "fl") == FLOOR, timeout=until_start + 20, interval=0.2,
               what=f"the lift at the rule's start; log:\n{manager.output()}")
    lifted = datetime.now(UTC)
    assert (lifted - start_real).total_seconds() < 5, f"lifted at {lifted}, rule start {start_real} (real)"
    # not before the start: the write itself (the API server's receipt), not when the test saw it
    writes = seen_scale_writes(audit, "escaler-floor", namespace, "fl", since=since)
    assert len(writes) == 1, [e["requestReceivedTimestamp"] for e in writes]
    assert _received(writes[0]) >= start_real, (
        f"the lift was written at {writes[0]['requestReceivedTimestamp']}, before the rule's start "
        f"{start_real} (real)")
    # the status is written after the target (a reader can see the scale first)
    eventually(lambda: _floor(cluster, namespace, "fl")[1] == "FloorActive", timeout=15,
               what=f"the ScheduleFloor condition after the lift; log:\n{manager.output()}")
    obj = es(cluster, namespace, "fl")
    status, reason, message = cond(obj, "ScheduleFloor")
    assert (status, reason) == ("True", "FloorActive"), message
    assert message == f"Tidal fl-floor: floor {FLOOR} replicas (rules launch)", message
    last = obj["status"]["recentDecisions"][-1]
    assert (last["from"], last["to"], last.get("boundBy")) == (1, FLOOR, "Floor"), last
    assert "raised to 4 by the schedule floor" in last["reason"], last

    out = subprocess.run([sys.executable, "-m", "escaler", "explain", "-n", namespace, "fl",
                          f"--kubeconfig={cluster.kubeconfig}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    step = out.stdout.split("2d. Floor", 1)[1].split("3. Stabilization", 1)[0]
    assert "Tidal fl-floor" in step and "IN FORCE" in step, out.stdout

    # held at 4 until the end, then the scale-down window, then back to 1
    clock.step_to(end - timedelta(seconds=LEAD_SECONDS), manager)
    end_real = clock.real(end)
    until_end = (end_real - datetime.now(UTC)).total_seconds()
    hold(lambda: replicas(cluster, namespace, "fl") == FLOOR, max(0.0, until_end - 1), interval=0.5,
         what="the floor until the rule's end")
    stabilized: list[float] = []

    def released() -> bool:
        obj = es(cluster, namespace, "fl")
        at_floor = replicas(cluster, namespace, "fl") == FLOOR
        if cond(obj, "AbleToScale")[1] == "ScaleDownStabilized" and at_floor:
            stabilized.append(time.time())
        return replicas(cluster, namespace, "fl") == 1

    eventually(released, timeout=until_end + DOWN_WINDOW + 40, interval=0.2,
               what=f"the release after the rule's end; log:\n{manager.output()}")
    released_after = time.time() - end_real.timestamp()
    assert stabilized, "the scale-down window never held the floor's count after the rule's end"
    # the window counts from the last sync that saw the floor: at most one poll before the end
    assert released_after >= DOWN_WINDOW - POLL_SECONDS - 1, f"released {released_after:.1f}s after the end"
    eventually(lambda: _floor(cluster, namespace, "fl")[:2] == ("False", "NoActiveRule"), timeout=15,
               what=f"the ScheduleFloor condition after the release; log:\n{manager.output()}")
    assert manager.alive(), manager.output()


def test_an_excluded_date_does_not_lift(cluster: Cluster, namespace: str, prometheus: PrometheusServer,
                                        managers: list[Any], tmp_path: Path, api_client: Any) -> None:
    now = datetime.now(UTC)
    start = now.replace(second=0, microsecond=0)  # fired already, today (UTC)
    end = start + timedelta(minutes=30)
    today = start.date().isoformat()
    tidal = _tidal("fx-floor", "fx", start, end, exclude=[today])
    query = _setup(cluster, namespace, prometheus, "fx", tidal)
    audit = AuditLog.of(cluster)
    since = audit.offset()
    user = "escaler-floor-excluded"
    manager = start_manager(cluster, tmp_path, user=user, namespace=namespace)
    managers.append(manager)

    eventually(lambda: _floor(cluster, namespace, "fx")[:2] == ("False", "NoActiveRule"), timeout=60,
               what=f"the first decision; log:\n{manager.output()}")
    hold(lambda: replicas(cluster, namespace, "fx") == 1, 3 * POLL_SECONDS, interval=0.5,
         what="1 replica on an excluded date")
    # nothing written in between either (a lift and a release between two samples)
    assert audit.scale_writes(user, namespace, "fx", since=since) == []

    # the same rule without the exclusion is active now: the spec change wakes the scaler, at once
    _after_a_poll(prometheus, query)
    since = audit.offset()
    # a merge patch (replaces the list) through the client already connected: no kubectl start-up
    k8s.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        "tidal.io", "v1alpha1", namespace, "tidals", "fx-floor",
        {"spec": {"rules": _tidal("fx-floor", "fx", start, end, exclude=[])["spec"]["rules"]}})
    eventually(lambda: replicas(cluster, namespace, "fx") == FLOOR, timeout=30, interval=0.2,
               what=f"the lift once the date is no longer excluded; log:\n{manager.output()}")
    # the test's own patch (the manager writes only the Tidal's status)
    [spec_write] = [e for e in audit.writes(namespace=namespace, resource="tidals", subresource=None,
                                            name="fx-floor", since=since) if e["user"]["username"] != user]
    [lift] = seen_scale_writes(audit, user, namespace, "fx", since=since)
    took = (_received(lift) - _received(spec_write)).total_seconds()
    sys.stderr.write(f"\n[e2e] floor lift {took:.3f}s after the Tidal's spec change\n")
    assert 0 <= took <= WAKE_BUDGET_SECONDS, (
        f"the lift came {took:.3f}s after the Tidal's spec change (budget {WAKE_BUDGET_SECONDS}s: the "
        f"next poll was {POLL_SECONDS - AFTER_POLL_SECONDS}s away); log:\n{manager.output()}")
    eventually(lambda: _floor(cluster, namespace, "fx")[:2] == ("True", "FloorActive"), timeout=15,
               what=f"the ScheduleFloor condition after the lift (written after the target); log:\n"
                    f"{manager.output()}")
    assert manager.alive(), manager.output()
