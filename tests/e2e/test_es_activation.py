"""metricsTrigger.activation on the real control plane (issue 16, SPEC §14): one MetricsTrigger
ElasticScaler (minReplicas 0, activation.value 0) on the fake Prometheus (ExternalServer,
AverageValue 10, 2 s poll, the QUICK window) takes its Deployment 0 -> 1 -> N -> 0:

* at 0 with no load it stays at 0, ScalingActive=True saying "below activation";
* a load of 5 (above 0) wakes it to 1 at once (the activation step, boundBy Activation);
* a load of 40 scales it 1 -> 4 on load as usual (apa: 40 / 10 per replica);
* the load drops to 0: the scale-down window (8 s) holds the count first
  (AbleToScale=ScaleDownStabilized), then the target goes to 0 with the message "below
  activation", and ``escaler explain`` shows the activation as its own step.
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
USER = "escaler-activation"
DOWN_WINDOW = 8
ANNOTATIONS = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(DOWN_WINDOW)}


def _trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {
        "scalingAlgorithm": "apa", "activation": {"value": "0"},
        "metrics": [{"type": "ExternalServer",
                     "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                                        "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def test_metrics_trigger_goes_0_1_n_0(cluster: Cluster, namespace: str, prometheus: PrometheusServer,
                                      managers: list[Any], tmp_path: Path) -> None:
    query = f'requests{{ns="{namespace}"}}'
    prometheus.set(query, 0.0)
    apply(cluster, namespace, deployment("act", 0))
    apply(cluster, namespace, scaler("act", "act", _trigger(prometheus.url, query), minr=0, maxr=8,
                                     annotations=ANNOTATIONS))
    manager = start_manager(cluster, tmp_path, user=USER, namespace=namespace)
    managers.append(manager)

    def below() -> bool:
        status, reason, message = cond(es(cluster, namespace, "act"), "ScalingActive")
        return (status, reason) == ("True", "MetricsAvailable") and "below activation" in message

    eventually(below, timeout=60, what=f"the first decision at 0; log:\n{manager.output()}")
    assert replicas(cluster, namespace, "act") == 0
    message = cond(es(cluster, namespace, "act"), "ScalingActive")[2]
    assert "activation.value 0): the target goes to 0" in message, message

    # 0 -> 1: any load above the value wakes it
    prometheus.set(query, 5.0)
    eventually(lambda: replicas(cluster, namespace, "act") == 1, timeout=30, interval=0.2,
               what=f"the wake; log:\n{manager.output()}")
    # the status is written after the target: wait for the decision to show in it
    obj = eventually(lambda: (o := es(cluster, namespace, "act"))["status"].get("desiredReplicas") == 1 and o,
                     timeout=15, interval=0.1, what="status.desiredReplicas 1 after the wake")
    woke = obj["status"]["recentDecisions"][-1]
    assert (woke["from"], woke["to"], woke.get("boundBy")) == (0, 1, "Activation"), woke
    assert "above activation" in woke["reason"], woke

    # 1 -> N on load, as usual
    prometheus.set(query, 40.0)
    eventually(lambda: replicas(cluster, namespace, "act") == 4, timeout=60, interval=0.2,
               what=f"the scale-up on load; log:\n{manager.output()}")

    # N -> 0: below activation, through the scale-down window
    dropped_at = time.monotonic()
    prometheus.set(query, 0.0)
    stabilized: list[float] = []

    def at_zero() -> bool:
        obj = es(cluster, namespace, "act")
        able = cond(obj, "AbleToScale")
        if able[1] == "ScaleDownStabilized" and replicas(cluster, namespace, "act") == 4:
            stabilized.append(time.monotonic())
        return replicas(cluster, namespace, "act") == 0

    eventually(at_zero, timeout=60, interval=0.2, what=f"the scale to zero; log:\n{manager.output()}")
    down_after = time.monotonic() - dropped_at
    assert stabilized, "the scale-down window never held the count on the way to 0"
    assert down_after >= DOWN_WINDOW - 2 * 2, f"went to 0 {down_after:.1f}s after the load dropped"
    obj = eventually(lambda: (o := es(cluster, namespace, "act"))["status"].get("desiredReplicas") == 0 and o,
                     timeout=15, interval=0.1, what="status.desiredReplicas 0 after the scale to zero")
    last = obj["status"]["recentDecisions"][-1]
    assert (last["from"], last["to"], last.get("boundBy")) == (4, 0, "Activation"), last
    assert "below activation" in last["reason"], last
    assert "below activation" in cond(obj, "ScalingActive")[2]

    out = subprocess.run([sys.executable, "-m", "escaler", "explain", "-n", namespace, "act",
                          f"--kubeconfig={cluster.kubeconfig}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    step = out.stdout.split("2c. Activation", 1)[1].split("3. Stabilization", 1)[0]
    assert "value 0" in step and "below activation" in step, out.stdout
    assert manager.alive(), manager.output()
