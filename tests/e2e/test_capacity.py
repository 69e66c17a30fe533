"""A reduced capacity run (issue 10): structure that must hold at any fleet size, not tight times.

One manager (its own user, 15 s poll) and MetricsTrigger scalers (apa, one ExternalServer query
each, every annotation at its default) on targets of a ``/scale``-only CRD (no pods), spread over
three namespaces. The fake Prometheus answers each query after ``QUERY_DELAY`` (200 ms), as a real
one under load does: collecting 300 series one after the other takes 60 s, four poll intervals.

* **Threads do not grow with N.** The manager's thread count (``/proc/<pid>/status``) with 300
  scalers is within ``THREAD_SLACK`` of its count with 30 (same namespaces, same kinds): no thread,
  handler or watch per scaler.
* **One handler per watched kind.** ``py-spy dump`` names the manager's Python threads; every
  informer's delivery threads (``informer-<name>-handler``, one per registered handler) are
  counted per informer: the same set and counts at 30 and at 300 scalers, at most
  ``MAX_HANDLERS_PER_INFORMER`` each.
* **A fleet-wide surge is written within two poll intervals.** Every series doubles at once; one
  watch on the targets sees every target's spec.replicas rise within 2 x 15 s (+ ``SLACK`` for the
  watch and the API server) of the step. A serial collector (one query at a time) needs 60 s per
  round and fails this.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from .conftest import Cluster, eventually
from .es_helpers import Manager, start_manager

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
from fake_metrics import PrometheusServer

# serial tier (docs/testing.md): it measures a fleet's capacity on the control plane alone
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

GROUP = "capacity.escaler.io"
PLURAL = "scalables"
POLL_SECONDS = 15.0
QUERY_DELAY = 0.2
SMALL, LARGE = 30, 300
NAMESPACES = 3
START, BASE_LOAD, AVERAGE_VALUE = 3, 30.0, 10
NOISE = 0.04
# threads a manager may add between 30 and 300 scalers (lazily started pools, an HTTP connection)
THREAD_SLACK = 10
# one delivery thread per (controller, watch) registered on a kind, never per scaler: the
# ElasticScaler informer carries the ElasticScaler controller's own watch and its claim watch, and
# the Tidal's and the ResourceScalingGroup's conflict watches (4); a handler per scaler would add
# 270 between 30 and 300 scalers (the equality check above catches that on its own)
MAX_HANDLERS_PER_INFORMER = 6
SLACK = 5.0


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"plural": PLURAL, "singular": "scalable", "kind": "Scalable"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}},
                               "subresources": {"scale": {"specReplicasPath": ".spec.replicas",
                                                          "statusReplicasPath": ".status.replicas",
                                                          "labelSelectorPath": ".status.selector"}}}]},
    }


def objects(ns: str, name: str, endpoint: str) -> list[dict[str, Any]]:
    target = {"apiVersion": f"{GROUP}/v1", "kind": "Scalable", "metadata": {"name": name, "namespace": ns},
              "spec": {"replicas": START}, "status": {"replicas": START, "selector": f"app={name}"}}
    metric = {"type": "ExternalServer", "externalServer": {
        "endpoint": endpoint, "query": f'sum(rate(requests_total{{namespace="{ns}",service="{name}"}}[1m]))',
        "target": {"type": "AverageValue", "averageValue": str(AVERAGE_VALUE)}}}
    scaler = {"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
              "metadata": {"name": name, "namespace": ns},
              "spec": {"targetRef": {"apiVersion": f"{GROUP}/v1", "kind": "Scalable", "name": name},
                       "minReplicas": 1, "maxReplicas": 20,
                       "trigger": {"type": "MetricsTrigger",
                                   "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [metric]}}}}
    return [target, scaler]


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError(f"no Threads line for {pid}")


def py_spy() -> str:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    # a dev dependency (`make` installs it): its absence fails the test, never skips it
    assert Path(spy).exists(), "py-spy is not installed (pip install -e '.[dev]')"
    return spy


def handler_threads(pid: int) -> Counter[str]:
    """Delivery threads per informer name (namespaces folded), from the manager's thread names."""
    r = subprocess.run([py_spy(), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"py-spy dump failed: {r.stderr}"
    names = re.findall(r'^Thread \S+ \([^)]*\): "(.*)"$', r.stdout, re.M)
    assert names, r.stdout[:2000]
    return Counter(n for n in names if n.startswith("informer-") and n.endswith("-handler"))


def collected(api: k8s.CustomObjectsApi, namespaces: list[str]) -> int:
    n = 0
    for ns in namespaces:
        scalers = api.list_namespaced_custom_object("elasticscaler.io", "v1alpha1", ns, "elasticscalers")
        for o in scalers["items"]:
            st = o.get("status") or {}
            if st.get("currentMetrics") or any(c.get("type") == "ScalingActive" and c.get("status") == "True"
                                               for c in st.get("conditions") or []):
                n += 1
    return n


class FirstRise:
    """One watch on the targets of a namespace set: when each one's spec.replicas first rose."""

    def __init__(self, api: k8s.CustomObjectsApi, namespaces: list[str]) -> None:
        self.api, self.namespaces = api, set(namespaces)
        self.armed_at: float | None = None
        self.first: dict[str, float] = {}
        self.early: list[str] = []
        self._w = k8s_watch.Watch()
        self._thread = threading.Thread(target=self._run, daemon=True, name="first-rise")

    def start(self) -> FirstRise:
        self._thread.start()
        return self

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            events = self._w.stream(self.api.list_cluster_custom_object, GROUP, "v1", PLURAL,
                                    timeout_seconds=600)
            for ev in events:
                t = time.monotonic()
                obj = ev["object"]
                meta = obj["metadata"]
                if meta["namespace"] not in self.namespaces:
                    continue
                key = f"{meta['namespace']}/{meta['name']}"
                if int(obj["spec"].get("replicas") or 0) > START:
                    if self.armed_at is None:
                        self.early.append(key)
                    else:
                        self.first.setdefault(key, t)

    def stop(self) -> None:
        self._w.stop()


@pytest.fixture
def capacity_namespaces(cluster: Cluster) -> Iterator[list[str]]:
    cluster.apply(crd())
    cluster.wait_established(f"{PLURAL}.{GROUP}")
    tag = f"{random.randrange(16**5):05x}"
    names = [f"e2e-capacity-{tag}-{i}" for i in range(NAMESPACES)]
    for ns in names:
        cluster.kubectl("create", "namespace", ns)
    yield names
    for ns in names:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_a_fleet_costs_no_thread_per_scaler_and_a_surge_is_written_within_two_polls(
    cluster: Cluster, capacity_namespaces: list[str], managers: list[Manager], api_client: k8s.ApiClient,
    tmp_path: Path,
) -> None:
    load = {"scale": 1.0}
    rng = random.Random(10)

    def value(_query: str) -> float:
        return BASE_LOAD * load["scale"] * (1 + rng.uniform(-NOISE, NOISE))

    prom = PrometheusServer(value_fn=value, record=False, keep_alive=True, delay=QUERY_DELAY).start()
    try:
        m = start_manager(cluster, tmp_path, user="escaler-capacity", poll=f"{POLL_SECONDS:.0f}s")
        managers.append(m)
        pid = m.proc.pid
        api = k8s.CustomObjectsApi(api_client)
        nss = capacity_namespaces
        fleet = [(nss[i % NAMESPACES], f"s-{i:03d}") for i in range(LARGE)]

        def create(part: list[tuple[str, str]]) -> None:
            items = [o for ns, name in part for o in objects(ns, name, prom.url)]
            cluster.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                     "items": items}))

        def all_collected(n: int) -> None:
            try:
                eventually(lambda: collected(api, nss) >= n, timeout=30 + n / 2, interval=2,
                           what=f"{n} scalers showing a collection")
            except AssertionError as e:
                raise AssertionError(f"{e}; manager log:\n{m.output(3000)}") from None
            assert m.alive(), m.output()
            time.sleep(POLL_SECONDS)  # a full poll round after the last first collection

        create(fleet[:SMALL])
        all_collected(SMALL)
        small_threads, small_handlers = threads(pid), handler_threads(pid)
        create(fleet[SMALL:])
        all_collected(LARGE)
        large_threads, large_handlers = threads(pid), handler_threads(pid)
        report = (f"threads {small_threads} at {SMALL} scalers, {large_threads} at {LARGE}; handler threads "
                  f"{dict(small_handlers)} -> {dict(large_handlers)}")
        sys.stderr.write(f"\n[e2e] capacity: {report}\n")
        assert large_threads - small_threads <= THREAD_SLACK, report
        assert large_handlers == small_handlers, report
        assert all(c <= MAX_HANDLERS_PER_INFORMER for c in large_handlers.values()), report

        # the surge, at a random phase of the poll interval
        watch = FirstRise(api, nss).start()
        try:
            time.sleep(2 + rng.uniform(0, POLL_SECONDS))
            watch.armed_at = t0 = time.monotonic()
            load["scale"] = 2.0
            deadline = 2 * POLL_SECONDS + SLACK
            with contextlib.suppress(AssertionError):
                eventually(lambda: len(watch.first) >= LARGE, timeout=deadline + 10, interval=0.5)
        finally:
            watch.stop()
        late = sorted((t - t0, k) for k, t in watch.first.items() if t - t0 > deadline)
        missing = sorted({f"{ns}/{name}" for ns, name in fleet} - set(watch.first))
        times = sorted(t - t0 for t in watch.first.values())
        summary = (f"{len(times)}/{LARGE} targets written after the surge; slowest "
                   f"{[round(x, 1) for x in times[-5:]]} s; {len(late)} later than {deadline:.0f} s "
                   f"{late[:5]}; never: {missing[:5]}; before the step: {watch.early[:5]}")
        sys.stderr.write(f"[e2e] capacity surge: {summary}\n")
        assert not watch.early, summary
        assert not missing and not late, f"{summary}; manager log:\n{m.output(2000)}"
        assert m.alive(), m.output()
    finally:
        prom.stop()
