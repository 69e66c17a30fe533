"""ElasticScaler side by side with the real HPA controller of kube-controller-manager, on the same
pods and the same metrics (issue 8, items 2 and 12).

* Pending pods and CPU utilization (item 2): two identical Deployments, each with 2 Running pods
  at 140 % of their CPU request and 2 Pending (one pod per node, two kwok nodes), target 70 %. HPA's
  rules count the Pending pods as 0 % on a scale-up, so (140 + 140 + 0 + 0) / 4 = 70 %: it keeps 4.
  The ElasticScaler must reach the same count and hold it (averaging over the reporting pods only
  and multiplying by spec.replicas gives 8).
* A surge on one External metric series (item 12): HPA (sync every 2 s in this control plane)
  and an ElasticScaler polling every 2 s, both with a 10 s scale-down window and every other
  setting at its default, follow load 40 -> 120 -> 60 -> 20 (AverageValue 10, +-8 % seeded noise).
  The ElasticScaler must reach the needed count after the 3x surge no later than the HPA (plus one
  poll), spend no longer below the needed count, and change replicas no more often.

Metrics come from ``hack/fake_metrics.py`` behind the metrics.k8s.io / external.metrics.k8s.io
APIServices, so both controllers read them through the API server. One manager (its own user)
serves the module.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from .conftest import Cluster, eventually, wait_synced
from .es_helpers import (
    QUICK,
    Manager,
    ReplicaRecorder,
    SeriesFeeder,
    anti_affinity,
    apply,
    changes,
    cond,
    cpu_utilization,
    deployment,
    es,
    external_metric,
    hold,
    hpa,
    metrics_trigger,
    pods,
    replicas,
    scaler,
    scaler_state,
    start_manager,
    time_below,
    unschedulable,
    wait_cond,
    wait_ready,
    wait_scheduler_words_reported,
)

pytestmark = pytest.mark.e2e

# the manager's poll interval, and the HPA controller's sync period (hack/cluster.py
# --horizontal-pod-autoscaler-sync-period=2s)
POLL_SECONDS = 2.0


@pytest.fixture
def manager(cluster: Cluster, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Manager]:
    m = start_manager(cluster, tmp_path_factory.mktemp("es-vs-hpa"), user="escaler-vs-hpa",
                      namespace=namespace)
    wait_synced(m.proc, m.log)
    try:
        yield m
    finally:
        m.stop()


def hpa_obj(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "hpa", name, "-n", ns))


def hpa_cond(obj: dict[str, Any], ctype: str) -> tuple[str, str]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c["status"], c["reason"]
    return "", ""


def test_pending_pods_count_like_the_hpa_counts_them(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager
) -> None:
    names = ("by-es", "by-hpa")
    for name in names:
        apply(cluster, namespace, deployment(name, 4, affinity=anti_affinity(name)))

    def two_and_two() -> bool:
        for name in names:
            ps = pods(cluster, namespace, f"app={name}")
            running = [p for p in ps if p["status"].get("phase") == "Running"]
            if len(running) != 2 or len([p for p in ps if unschedulable(p)]) != 2:
                return False
        return True

    eventually(two_and_two, timeout=40, what="2 Running and 2 Unschedulable pods per Deployment")
    for name in names:
        wait_ready(cluster, namespace, name, 2)
    fake_metrics.set_pod_usage(namespace, "*", cpu=0.7, memory=1e8)  # 700m of 500m: 140 %, Running pods only
    apply(cluster, namespace, hpa("by-hpa", "by-hpa", [cpu_utilization(70)], maxr=10))
    apply(cluster, namespace, scaler("by-es", "by-es", metrics_trigger(cpu_utilization(70)), maxr=10,
                                     annotations=QUICK))
    # The HPA ignores a pod's CPU sample for one metric window (30 s here) after it turned Ready,
    # so it reports metrics only after that.
    h = eventually(lambda: (o := hpa_obj(cluster, namespace, "by-hpa"))
                   and hpa_cond(o, "ScalingActive") == ("True", "ValidMetricFound") and o,
                   timeout=90, what="the HPA evaluating the CPU metric")
    # the utilization the HPA reports is the Running pods' average
    assert h["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] == 140
    wait_cond(cluster, namespace, "by-es", "ScalingActive", "True", "MetricsAvailable", manager, timeout=60)

    def both_at_4() -> tuple[int, int] | None:
        counts = (replicas(cluster, namespace, "by-es"), replicas(cluster, namespace, "by-hpa"))
        return counts if counts == (4, 4) else None

    # held for 10 HPA syncs / 10 polls
    try:
        hold(both_at_4, seconds=20, interval=1.0, what="both Deployments at 4")
    except AssertionError as e:
        obj = es(cluster, namespace, "by-es")
        raise AssertionError(
            f"{e}: by-es={replicas(cluster, namespace, 'by-es')}, "
            f"by-hpa={replicas(cluster, namespace, 'by-hpa')}; "
            f"escaler currentMetrics={obj['status'].get('currentMetrics')}") from None
    assert hpa_obj(cluster, namespace, "by-hpa")["status"]["desiredReplicas"] == 4
    # and the escaler decided 4 (not merely held a larger count back); its Pending pods have waited
    # longer than the grace period, so it reports them with the scheduler's message
    # (docs/concepts.md#the-decision-pipeline step 5)
    obj = es(cluster, namespace, "by-es")
    state = scaler_state(cluster, namespace, "by-es")
    assert (obj["status"]["desiredReplicas"], cond(obj, "AbleToScale")[:2]) == (
        4, ("True", "InsufficientCapacity")), state
    waiting = [p for p in pods(cluster, namespace, "app=by-es") if unschedulable(p)]
    assert len(waiting) == 2
    wait_scheduler_words_reported(cluster, namespace, "by-es", "app=by-es")
    assert [m.get("recommendedReplicas") for m in obj["status"]["currentMetrics"]] == [4], \
        obj["status"]["currentMetrics"]


# --- item 12 ------------------------------------------------------------------------------------

TARGET = 10
# (load, seconds): the first phase is the starting point (4 replicas already fit it)
PHASES = [(40.0, 30.0), (120.0, 40.0), (60.0, 40.0), (20.0, 40.0)]
NOISE = 0.08
SEED = 8


def _table(rec: ReplicaRecorder, feeder: SeriesFeeder, t0: float) -> str:
    rows = ["   t(s)   load  escaler  hpa"]
    loads = feeder.values
    for t, s in rec.samples:
        if t < t0:
            continue
        load = next((v for tv, v in reversed(loads) if tv <= t), float("nan"))
        rows.append(f"{t - t0:7.1f} {load:6.1f} {s.get('es-llm', -1):8d} {s.get('hpa-llm', -1):4d}")
    return "\n".join(rows)


def test_surge_is_followed_at_least_as_fast_as_by_the_hpa(
    cluster: Cluster, namespace: str, fake_metrics: Any, manager: Manager, api_client: k8s.ApiClient,
    tmp_path: Path,
) -> None:
    for name in ("es-llm", "hpa-llm"):
        apply(cluster, namespace, deployment(name, 4))
    for name in ("es-llm", "hpa-llm"):
        wait_ready(cluster, namespace, name, 4)
    fake_metrics.set_external(namespace, "load", PHASES[0][0])
    # both: 10 s scale-down window, everything else default
    metric = external_metric("load", str(TARGET))
    apply(cluster, namespace, hpa("hpa-llm", "hpa-llm", [metric], minr=1, maxr=20,
                                  behavior={"scaleDown": {"stabilizationWindowSeconds": 10}}))
    apply(cluster, namespace, scaler(
        "es-llm", "es-llm", metrics_trigger(metric), minr=1, maxr=20,
        annotations={"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "10"}))
    eventually(lambda: hpa_cond(hpa_obj(cluster, namespace, "hpa-llm"), "ScalingActive")[0] == "True",
               timeout=60, what="the HPA evaluating the metric")
    wait_cond(cluster, namespace, "es-llm", "ScalingActive", "True", "MetricsAvailable", manager, timeout=30)
    assert (replicas(cluster, namespace, "es-llm"), replicas(cluster, namespace, "hpa-llm")) == (4, 4)

    rec = ReplicaRecorder(api_client, namespace, interval=0.5).start()
    feeder = SeriesFeeder(fake_metrics, namespace, "load", PHASES, noise=NOISE, seed=SEED).start()
    try:
        feeder.join()
    finally:
        rec.stop()
    starts = [*feeder.phase_starts, feeder.phase_starts[-1] + PHASES[-1][1]]
    t0, surge, surge_end, end = starts[0], starts[1], starts[2], starts[-1]
    need = {load: math.ceil(load / TARGET) for load, _ in PHASES}  # 4, 12, 6, 2

    def stats(name: str) -> dict[str, float]:
        series = rec.series(name)
        hit = rec.first_time(name, lambda n: n >= need[120.0], after=surge)
        bounds = zip(PHASES, itertools.pairwise(starts), strict=True)
        below = sum(time_below(series, need[load], a, b) for (load, _), (a, b) in bounds)
        rs = sum(n * (t2 - t1) for (t1, n), (t2, _) in itertools.pairwise(series) if t1 >= t0)
        return {"time_to_need": (hit - surge) if hit is not None else math.inf,
                "time_below_need": below,
                "surge_time_below_need": time_below(series, need[120.0], surge, surge_end),
                "changes": changes([(t, n) for t, n in series if t0 <= t <= end]),
                "replica_seconds": rs}

    ours, theirs = stats("es-llm"), stats("hpa-llm")
    table = _table(rec, feeder, t0)
    summary = "\n".join(f"{k:22s} escaler {ours[k]:8.1f}   hpa {theirs[k]:8.1f}" for k in ours)
    report = (f"load {' -> '.join(str(int(p[0])) for p in PHASES)} at AverageValue {TARGET}, "
              f"+-{NOISE:.0%} noise (seed {SEED}); phases start at "
              f"{', '.join(f'{s - t0:.1f}' for s in starts[:-1])} s\n{summary}\n{table}\n")
    (tmp_path / "es-vs-hpa.txt").write_text(report)
    sys.stderr.write(f"\n[e2e] escaler vs HPA ({tmp_path / 'es-vs-hpa.txt'}):\n{report}")

    # One poll of slack: the escaler polls every 2 s and the HPA controller syncs every 2 s, each on
    # its own phase, so either may see the surge up to one interval after the other.
    assert ours["time_to_need"] <= theirs["time_to_need"] + POLL_SECONDS, summary
    # Time below the needed count is, in this series, the time to need after the surge (plus any dip):
    # the same one-poll slack applies.
    assert ours["time_below_need"] <= theirs["time_below_need"] + POLL_SECONDS, summary
    assert ours["changes"] <= theirs["changes"], summary
