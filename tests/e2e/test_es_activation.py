"""metricsTrigger.activation on the real control plane (issue 16, docs/design.md#beyond-the-seeds): one
MetricsTrigger ElasticScaler (minReplicas 0, activation.value 0) on the fake Prometheus (ExternalServer,
AverageValue 10, 2 s poll, the QUICK window) takes its Deployment 0 -> 1 -> N -> 0:

* at 0 with no load it stays at 0, ScalingActive=True saying "below activation": sampled every
  0.25 s over ``STAY_SECONDS`` (two polls and 0.5 s) from the first decision, every sample at 0 with
  the Deployment's generation unchanged, and the manager made no replica write at all (audit log);
* a load of 5 (above 0) wakes it to 1 at once (the activation step, boundBy Activation). "At once"
  is measured: the load is raised ``AFTER_POLL_SECONDS`` after a poll (the fake Prometheus sees the
  query), and the API server must receive the manager's replica write within
  ``WAKE_BUDGET_SECONDS`` (3 s: the next poll, at most one 2 s poll interval later, plus 1 s to read,
  decide and write) of the change: a wake that waited for a second poll comes at least 3.7 s after;
* a load of 40 scales it 1 -> 4 on load as usual (apa: 40 / 10 per replica);
* the load drops to 0: the scale-down window (8 s) holds the count first
  (AbleToScale=ScaleDownStabilized), then the target goes to 0 with the message "below
  activation", and ``escaler explain`` shows the activation as its own step.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import (
    QUICK,
    AuditLog,
    apply,
    cond,
    deployment,
    es,
    generation,
    replicas,
    scaler,
    seen_scale_writes,
    start_manager,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
USER = "escaler-activation"
DOWN_WINDOW = 8
POLL_SECONDS = 2
ANNOTATIONS = {**QUICK, "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(DOWN_WINDOW)}
# "stays at 0" is sampled over this long: two polls and a half second
STAY_SECONDS = 2 * POLL_SECONDS + 0.5
# the load is raised this long after a poll's query (that poll's sync is over by then)...
AFTER_POLL_SECONDS = 0.3
# ...and the wake must be written within this long of it: the next poll (at most one interval
# away, in fact POLL_SECONDS - AFTER_POLL_SECONDS) plus 1 s to read, decide and write; a wake one
# poll later would come 2 * POLL_SECONDS - AFTER_POLL_SECONDS = 3.7 s after the change
WAKE_BUDGET_SECONDS = POLL_SECONDS + 1.0


def _received(ev: dict[str, Any]) -> float:
    """When the API server received an audited request (``time.time()`` scale)."""
    return datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def _trigger(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {
        "scalingAlgorithm": "apa", "activation": {"value": "0"},
        "metrics": [{"type": "ExternalServer",
                     "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                                        "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def test_metrics_trigger_goes_0_1_n_0(cluster: Cluster, namespace: str, prometheus: PrometheusServer,
                                      managers: list[Any], tmp_path: Path) -> None:
    query = f'requests{{namespace="{namespace}"}}'
    prometheus.set(query, 0.0)
    apply(cluster, namespace, deployment("act", 0))
    apply(cluster, namespace, scaler("act", "act", _trigger(prometheus.url, query), minr=0, maxr=8,
                                     annotations=ANNOTATIONS))
    audit = AuditLog.of(cluster)
    since = audit.offset()
    manager = start_manager(cluster, tmp_path, user=USER, namespace=namespace)
    managers.append(manager)

    def below() -> bool:
        status, reason, message = cond(es(cluster, namespace, "act"), "ScalingActive")
        return (status, reason) == ("True", "MetricsAvailable") and "below activation" in message

    eventually(below, timeout=60, what=f"the first decision at 0; log:\n{manager.output()}")
    message = cond(es(cluster, namespace, "act"), "ScalingActive")[2]
    assert "activation.value 0): the target goes to 0" in message, message
    # stays at 0: every sample over more than two polls, and no write in between (a wake and a
    # return to 0 between two samples would move the generation and show in the audit log)
    gen0 = generation(cluster, namespace, "act")
    samples: list[tuple[int, int]] = []
    until = time.monotonic() + STAY_SECONDS
    while time.monotonic() < until:
        obj = cluster.kubectl_json("get", "deployment", "act", "-n", namespace)
        samples.append((obj["spec"]["replicas"], obj["metadata"]["generation"]))
        time.sleep(0.25)
    assert samples and all(s == (0, gen0) for s in samples), f"not at 0 all along: {samples}"
    assert audit.scale_writes(USER, namespace, "act", since=since) == [], "a replica write at 0 with no load"
    assert below(), cond(es(cluster, namespace, "act"), "ScalingActive")

    # 0 -> 1: any load above the value wakes it, at the next poll
    seen = prometheus.queries.count(query)
    eventually(lambda: prometheus.queries.count(query) > seen, timeout=3 * POLL_SECONDS, interval=0.01,
               what="a poll")
    time.sleep(AFTER_POLL_SECONDS)
    since = audit.offset()
    raised = time.time()
    prometheus.set(query, 5.0)
    eventually(lambda: replicas(cluster, namespace, "act") == 1, timeout=30, interval=0.2,
               what=f"the wake; log:\n{manager.output()}")
    [wake] = seen_scale_writes(audit, USER, namespace, "act", since=since)
    took = _received(wake) - raised
    sys.stderr.write(f"\n[e2e] wake written {took:.3f}s after the load rose\n")
    assert took <= WAKE_BUDGET_SECONDS, (
        f"the wake was written {took:.3f}s after the load rose (budget {WAKE_BUDGET_SECONDS}s); log:\n"
        f"{manager.output()}")
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
