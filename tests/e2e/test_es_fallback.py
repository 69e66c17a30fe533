"""spec.fallback on the real control plane (issue 16, docs/design.md#beyond-the-seeds): a MetricsTrigger
ElasticScaler on the fake Prometheus (ExternalServer, 2 s poll, the QUICK window) holds its Deployment at 3
while the series is on target; when Prometheus starts answering 503 the scaler holds 3 for the first
failureThreshold - 1 failed polls (``status.fallback`` counting), then scales to
``fallback.replicas`` with ScalingActive=False/DecisionUnavailable saying the fallback is engaged,
and ``escaler explain`` shows it as its own step; when Prometheus heals with a load that wants
fewer replicas, the count clears and the scale-down window (8 s) still holds the fallback count
(AbleToScale=ScaleDownStabilized) before the Deployment comes back down.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import QUICK, apply, cond, deployment, es, replicas, scaler, start_manager

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
USER = "escaler-fallback"
START, FALLBACK, THRESHOLD = 3, 6, 3
DOWN_WINDOW = 8
ANNOTATIONS = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(DOWN_WINDOW)}


def _trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [{
        "type": "ExternalServer",
        "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                           "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def _status(cluster: Cluster, ns: str) -> dict[str, Any]:
    return dict(es(cluster, ns, "fb").get("status") or {})


def test_fallback_engages_after_n_failed_polls_and_recovers_through_the_window(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, managers: list[Any], tmp_path: Path
) -> None:
    query = f'load{{namespace="{namespace}"}}'
    prometheus.set(query, 10.0 * START)  # on target at 3 replicas
    apply(cluster, namespace, deployment("fb", START))
    apply(cluster, namespace, scaler("fb", "fb", _trigger(prometheus.url, query), annotations=ANNOTATIONS,
                                     fallback={"failureThreshold": THRESHOLD, "replicas": FALLBACK}))
    manager = start_manager(cluster, tmp_path, user=USER, namespace=namespace)
    managers.append(manager)
    first = ("True", "MetricsAvailable")
    eventually(lambda: cond(es(cluster, namespace, "fb"), "ScalingActive")[:2] == first,
               timeout=60, what=f"the scaler's first decision; log:\n{manager.output()}")
    assert replicas(cluster, namespace, "fb") == START

    # the metric source dies: N-1 failed polls hold the count while status.fallback counts them
    prometheus.fail(503, "prometheus is down")
    counted: set[int] = set()

    def engaged() -> bool:
        # one read: the count and the desired replicas come from the same status patch (a separate
        # read of the target could see the Nth poll's scale next to an earlier read's count)
        st = es(cluster, namespace, "fb").get("status") or {}
        failures = (st.get("fallback") or {}).get("failures", 0)
        desired = st.get("desiredReplicas")
        if 0 < failures < THRESHOLD:
            counted.add(failures)
            assert desired == START, f"desired {desired} after only {failures} failed polls"
        return replicas(cluster, namespace, "fb") == FALLBACK

    eventually(engaged, timeout=60, interval=0.1, what=f"the fallback count; log:\n{manager.output()}")
    assert counted, "no intermediate count was ever observed"
    # the Nth poll writes the target first and its status after: wait for the status (run F saw
    # the fallback count on the Deployment while the status still said 2 failures)
    eventually(lambda: ((es(cluster, namespace, "fb").get("status") or {}).get("fallback") or {})
               .get("failures") == THRESHOLD, timeout=15, interval=0.1,
               what=f"status.fallback.failures == {THRESHOLD}; log:\n{manager.output()}")
    obj = es(cluster, namespace, "fb")
    assert obj["status"]["fallback"]["failures"] == THRESHOLD
    status, reason, message = cond(obj, "ScalingActive")
    assert (status, reason) == ("False", "DecisionUnavailable")
    assert message.startswith(f"fallback engaged: {THRESHOLD} consecutive metric polls without a usable "
                              f"signal since "), message
    assert f"recommending fallback.replicas {FALLBACK}" in message and "503" in message
    last = obj["status"]["recentDecisions"][-1]
    assert (last["from"], last["to"]) == (START, FALLBACK)
    out = subprocess.run([sys.executable, "-m", "escaler", "explain", "-n", namespace, "fb",
                          f"--kubeconfig={cluster.kubeconfig}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    step = out.stdout.split("2b. Fallback", 1)[1].split("3. Stabilization", 1)[0]
    assert "ENGAGED" in step and f"{FALLBACK} replicas is the recommendation" in step, out.stdout

    # the source heals with a load that wants 2 replicas: the count clears, and the scale-down
    # window (which saw the fallback count) holds 6 for a while — no cliff — then lets it go
    healed_at = time.monotonic()
    prometheus.set(query, 20.0)
    prometheus.heal()
    stabilized: list[float] = []

    def scaled_down() -> bool:
        st = _status(cluster, namespace)
        n = replicas(cluster, namespace, "fb")
        active = next((c for c in st.get("conditions") or [] if c["type"] == "ScalingActive"), {})
        able = next((c for c in st.get("conditions") or [] if c["type"] == "AbleToScale"), {})
        if active.get("status") == "True" and able.get("reason") == "ScaleDownStabilized" and n == FALLBACK:
            stabilized.append(time.monotonic())
        return n < FALLBACK

    eventually(scaled_down, timeout=60, interval=0.1, what=f"the scale-down; log:\n{manager.output()}")
    down_after = time.monotonic() - healed_at
    assert stabilized, "the window never held the fallback count after the heal"
    assert down_after >= DOWN_WINDOW - 2 * 2, f"scaled down {down_after:.1f}s after the heal"
    # the status is written after the target (a reader can see the scale first)
    eventually(lambda: "fallback" not in _status(cluster, namespace)
               and cond(es(cluster, namespace, "fb"), "ScalingActive")[:2] == ("True", "MetricsAvailable"),
               timeout=15, what=f"the status after the scale-down; log:\n{manager.output()}")
    assert manager.alive(), manager.output()
