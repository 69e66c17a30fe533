"""ElasticScaler latency and idle write cost, on the real local control plane.

Starts ``hack/cluster.py``'s control plane and one ``python -m escaler manager`` (as its own
client-certificate user, so the audit log attributes its writes), then measures:

* apa: a metric step on the fake Prometheus → the target's ``spec.replicas`` written (p50/p99);
  bounded below by ``--metrics-trigger-poll-interval`` (1 s here), which is the point of the row;
  each step is sent at a random phase of the poll interval (a uniform wait of up to one interval
  after the previous write), so the row is not locked to the interval;
* StateTrigger: a source's ``status.desiredReplicas`` patched → target written (p50/p99);
* SignalTrigger: an authenticated ``POST /signal/...`` → target written (p50/p99);
* 100 idle scalers whose metric is *noisy* (20 +-4 %, AverageValue 10 at 2 replicas: inside apa's
  10 % tolerance, so nothing scales) left alone for ``BENCH_IDLE_SECONDS`` (default 300): every
  API write the manager's user made in that window (all of them, whatever the object), counted
  from the audit log (goal: 0), and the number of queries the fake Prometheus answered in it (the
  row fails if the manager died or never queried).

``BENCH_TRIALS`` (default 100) trials per latency row. The clock is read before the change is sent
(the metric set, the source patched, the signal posted, each over one persistent connection); the
write is observed through ONE watch on the namespace's Deployments (``benchkube.Watch``), not a
``kubectl`` process or a GET per sample.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT / "bench"))

from benchkube import Api, Watch  # noqa: E402
from cluster import LocalCluster  # noqa: E402
from fake_metrics import PrometheusServer  # noqa: E402

TITLE = "ElasticScaler: decision-to-write latency and idle API writes (real control plane)"
NOTES = """
`make bench` runs this against a fresh local control plane (about 10 minutes with the idle phase;
set `BENCH_IDLE_SECONDS` and `BENCH_TRIALS` to shorten it). Conditions: one scaler per latency row,
alone on its target, with a 1 s metric window, `Latest` aggregation and no scale-down
stabilization; 4 reconcile workers; the write is seen through one watch on the Deployments (the
clock is read before the change is sent over a persistent connection). apa latency is dominated by
the 1 s poll interval used here: a metric change is only seen at the scaler's next poll
(production default 30 s, spread over the interval), and each step is sent at a random phase of
that interval. StateTrigger and SignalTrigger are event-driven (a watch event or the push enqueues
the scaler at once). The idle row is a fleet: 100 scalers on a noisy metric (+-4 %, inside the
10 % tolerance), every write of the manager's user in the window counted from the audit log
(status, targets, Events, anything), with the fake Prometheus's query count (the idle scalers
share one query string, which the manager sends about once per poll tick for all of them).
"""

TRIALS = int(os.environ.get("BENCH_TRIALS", "100"))
POLL_SECONDS = 1.0
IDLE_NOISE = 0.04
IDLE_SECONDS = float(os.environ.get("BENCH_IDLE_SECONDS", "300"))
IDLE_SCALERS = int(os.environ.get("BENCH_IDLE_SCALERS", "100"))
NS = "bench"
MANAGER_USER = "escaler-manager"


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


class Bench:
    def __init__(self, workers: int | None = 4) -> None:
        # --max-concurrent-reconciles of the manager (None: the manager's default)
        self.work = Path(tempfile.mkdtemp(prefix="escaler-bench-"))
        self.cluster = LocalCluster(self.work / "cluster").start()
        for f in sorted((ROOT / "manifests" / "crds").glob("*.yaml")):
            self.kubectl("apply", "--server-side", "-f", str(f))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all")
        self.kubectl("create", "namespace", NS)
        self.api = Api(self.cluster)
        self.noise_rng = random.Random(10)
        self.prom = PrometheusServer(value_fn=self.noisy, keep_alive=True).start()
        # when each Deployment's spec.replicas last changed, and to what (one watch)
        self.seen: dict[str, tuple[int, float]] = {}
        self.seen_cond = threading.Condition()
        Watch(self.api, f"/apis/apps/v1/namespaces/{NS}/deployments", self.on_deployment).start()
        self.api_port = _free_port()
        kc = self.cluster.user_kubeconfig("escaler-manager")
        self.log = open(self.work / "manager.log", "wb")  # noqa: SIM115
        self.mgr = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "escaler",
                "manager",
                f"--kubeconfig={kc}",
                "--webhook-port=0",
                "--metrics-trigger-poll-interval=1s",
                "--metrics-bind-address=127.0.0.1:0",
                "--health-probe-bind-address=127.0.0.1:0",
                f"--api-bind-address=127.0.0.1:{self.api_port}",
                *([f"--max-concurrent-reconciles={workers}"] if workers is not None else []),
                "--log-format=json",
                # the fake Prometheus listens on loopback, which endpoints may not reach by default
                "--allow-endpoint-networks=127.0.0.0/8",
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def close(self) -> None:
        self.mgr.terminate()
        self.mgr.wait(30)
        self.prom.stop()
        self.cluster.stop()

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return self.cluster.kubectl(*args, input=input)

    def apply_cluster(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(obj))

    def noisy(self, query: str) -> float | None:
        """Idle scalers' series (``sum(bench_idle...)``): 20 +-4 %; other queries: unset = empty."""
        if query.startswith("sum(bench_idle"):
            return 20 * (1 + self.noise_rng.uniform(-IDLE_NOISE, IDLE_NOISE))
        return None

    def on_deployment(self, key: str, obj: dict[str, Any], t: float) -> None:
        name = key.split("/", 1)[1]
        r = int((obj.get("spec") or {}).get("replicas") or 0)
        with self.seen_cond:
            if self.seen.get(name, (None, 0.0))[0] != r:
                self.seen[name] = (r, t)
                self.seen_cond.notify_all()

    def wait_replicas(self, name: str, want: int, t0: float | None = None, timeout: float = 60) -> float:
        """Seconds from ``t0`` (monotonic; default now) to the watch showing ``want`` replicas."""
        t0 = time.monotonic() if t0 is None else t0
        deadline = time.monotonic() + timeout
        with self.seen_cond:
            while True:
                r, t = self.seen.get(name, (None, 0.0))
                if r == want:
                    return max(0.0, t - t0)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{name} never reached {want} replicas; see {self.work}/manager.log")
                self.seen_cond.wait(left)

    def deployment(self, name: str, replicas: int) -> None:
        self.apply(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "m", "image": "x"}]},
                    },
                },
            }
        )

    def scaler(
        self,
        name: str,
        target_ref: dict[str, str],
        trigger: dict[str, Any],
        minr: int = 1,
        maxr: int = 20,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self.apply(
            {
                "apiVersion": "elasticscaler.io/v1alpha1",
                "kind": "ElasticScaler",
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {
                    "targetRef": target_ref,
                    "minReplicas": minr,
                    "maxReplicas": maxr,
                    "trigger": trigger,
                },
            }
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NO_STAB = {
    "elasticscaler.io/metrics.windowSeconds": "1",
    "elasticscaler.io/metrics.aggregationType": "Latest",
    "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0",
}


def bench_apa(b: Bench) -> list[float]:
    b.deployment("apa", 2)
    q = f'sum(bench_apa{{namespace="{NS}"}})'
    b.prom.set(q, 20)
    b.scaler(
        "apa",
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "apa"},
        {
            "type": "MetricsTrigger",
            "metricsTrigger": {
                "metrics": [
                    {
                        "type": "ExternalServer",
                        "externalServer": {
                            "endpoint": b.prom.url,
                            "query": q,
                            "target": {"type": "Value", "value": "10"},
                        },
                    }
                ]
            },
        },
        annotations=NO_STAB,
    )
    b.wait_replicas("apa", 2)
    rng = random.Random(1)
    out = []
    for i in range(TRIALS):
        want = 3 if i % 2 == 0 else 2
        time.sleep(rng.uniform(0, POLL_SECONDS))  # a random phase of the poll interval
        t0 = time.monotonic()
        b.prom.set(q, want * 10)
        out.append(b.wait_replicas("apa", want, t0))
    return out


def bench_state(b: Bench) -> list[float]:
    b.apply_cluster(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "replicasources.bench.escaler.io"},
            "spec": {
                "group": "bench.escaler.io",
                "scope": "Namespaced",
                "names": {"plural": "replicasources", "singular": "replicasource", "kind": "ReplicaSource"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "subresources": {"status": {}},
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
    )
    b.kubectl("wait", "--for=condition=Established", "crd/replicasources.bench.escaler.io")
    b.deployment("state", 1)
    b.apply(
        {
            "apiVersion": "bench.escaler.io/v1",
            "kind": "ReplicaSource",
            "metadata": {
                "name": "src",
                "labels": {"elasticscaler.io/name": "state", "elasticscaler.io/namespace": NS},
            },
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "state"}},
        }
    )
    b.scaler(
        "state",
        {"apiVersion": "bench.escaler.io/v1", "kind": "ReplicaSource", "name": "src"},
        {"type": "StateTrigger"},
        annotations=NO_STAB,
    )
    path = f"/apis/bench.escaler.io/v1/namespaces/{NS}/replicasources/src/status"
    out = []
    for i in range(TRIALS):
        want = 2 + i % 2
        t0 = time.monotonic()
        code, body = b.api.call("PATCH", path, {"status": {"desiredReplicas": want}},
                                ctype="application/merge-patch+json")
        assert code == 200, body
        out.append(b.wait_replicas("state", want, t0))
    return out


def bench_signal(b: Bench) -> list[float]:
    b.deployment("signal", 1)
    b.scaler(
        "signal",
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "signal"},
        {"type": "SignalTrigger", "signalTrigger": {"idleTimeoutSeconds": 3600}},
        minr=0,
        annotations=NO_STAB,
    )
    b.kubectl("create", "serviceaccount", "pusher", "-n", NS)
    b.kubectl(
        "create",
        "clusterrolebinding",
        "bench-pusher",
        "--clusterrole=cluster-admin",
        f"--serviceaccount={NS}:pusher",
    )
    token = b.kubectl("create", "token", "pusher", "-n", NS, "--audience", "escaler").strip()
    # the signal API's default: HTTPS with a self-signed certificate (loopback here, so unverified)
    tls = ssl.create_default_context()
    tls.check_hostname = False
    tls.verify_mode = ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", b.api_port, context=tls, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    out = []
    for i in range(TRIALS):
        want = 2 + i % 2
        t0 = time.monotonic()
        try:
            conn.request("POST", f"/signal/v1/namespaces/{NS}/elasticscalers/signal",
                         body=json.dumps({"replicas": want}).encode(), headers=headers)
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):  # the server closed the connection: reopen
            conn.close()
            conn.request("POST", f"/signal/v1/namespaces/{NS}/elasticscalers/signal",
                         body=json.dumps({"replicas": want}).encode(), headers=headers)
            conn.getresponse().read()
        out.append(b.wait_replicas("signal", want, t0))
    conn.close()
    return out


def bench_idle(b: Bench) -> dict[str, Any]:
    q = f'sum(bench_idle{{namespace="{NS}"}})'  # answered by Bench.noisy: 20 +-4 %
    items = []
    for i in range(IDLE_SCALERS):
        n = f"idle-{i:03d}"
        items.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": n, "namespace": NS},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": n}},
                    "template": {
                        "metadata": {"labels": {"app": n}},
                        "spec": {"containers": [{"name": "m", "image": "x"}]},
                    },
                },
            }
        )
        items.append(
            {
                "apiVersion": "elasticscaler.io/v1alpha1",
                "kind": "ElasticScaler",
                "metadata": {"name": n, "namespace": NS, "annotations": NO_STAB},
                "spec": {
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": n},
                    "minReplicas": 1,
                    "maxReplicas": 10,
                    "trigger": {
                        "type": "MetricsTrigger",
                        "metricsTrigger": {
                            "metrics": [
                                {
                                    "type": "ExternalServer",
                                    "externalServer": {
                                        "endpoint": b.prom.url,
                                        "query": q,
                                        "target": {"type": "Value", "value": "10"},
                                    },
                                }
                            ]
                        },
                    },
                },
            }
        )
    b.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    # settled: every scaler has written its status once (deployments already at 2 = target)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        objs = json.loads(b.kubectl("get", "es", "-n", NS, "-o", "json"))["items"]
        done = [
            o
            for o in objs
            if o["metadata"]["name"].startswith("idle-")
            and (o.get("status") or {}).get("desiredReplicas") == 2
        ]
        if len(done) == IDLE_SCALERS:
            break
        time.sleep(1)
    time.sleep(10)  # let any in-flight write land before the count starts
    offset = b.cluster.audit_log.stat().st_size
    q0, start = b.prom.query_count, time.time()
    time.sleep(IDLE_SECONDS)
    q1, end = b.prom.query_count, time.time()
    if b.mgr.poll() is not None:
        raise RuntimeError(f"the manager died during the idle window; see {b.work}/manager.log")
    if q1 == q0:
        raise RuntimeError(f"the manager made no query in the idle window; see {b.work}/manager.log")
    time.sleep(2)  # audit lines of requests received before the end
    writes: dict[str, int] = {}
    with open(b.cluster.audit_log, "rb") as f:
        f.seek(offset)
        for line in f:
            ev = json.loads(line)
            # every write of the manager's user, whatever the object (not a name prefix)
            if ev.get("user", {}).get("username") != MANAGER_USER or ev.get("stage") != "ResponseComplete":
                continue
            if ev.get("verb") not in ("create", "update", "patch", "delete", "deletecollection"):
                continue
            ts = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if start <= ts < end:
                ref = ev.get("objectRef") or {}
                what = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                writes[what] = writes.get(what, 0) + 1
    if writes:
        print(f"idle writes by resource: {writes}", flush=True)
    return {
        "scalers": IDLE_SCALERS,
        "seconds": IDLE_SECONDS,
        "api writes": sum(writes.values()),
        "queries": q1 - q0,
        "writes per scaler-hour": round(sum(writes.values()) / IDLE_SCALERS / (IDLE_SECONDS / 3600), 3),
    }


def run() -> list[dict[str, Any]]:
    b = Bench()
    rows: list[dict[str, Any]] = []
    try:
        for name, fn in (
            ("apa metric step → write (poll 1 s)", bench_apa),
            ("StateTrigger source change → write", bench_state),
            ("SignalTrigger push → write", bench_signal),
        ):
            xs = fn(b)
            rows.append(
                {
                    "measurement": name,
                    "trials": len(xs),
                    "p50 s": round(statistics.median(xs), 3),
                    "p99 s": round(pct(xs, 99), 3),
                    "max s": round(max(xs), 3),
                }
            )
        idle = bench_idle(b)
        rows.append(
            {
                "measurement": f"{idle['scalers']} idle scalers, noisy metric (+-4 %), "
                f"{idle['seconds']:.0f} s",
                "trials": 1,
                "p50 s": "",
                "p99 s": "",
                "max s": "",
                "api writes": idle["api writes"],
                "queries": idle["queries"],
            }
        )
    finally:
        b.close()
    return rows


def main() -> int:
    sys.path.insert(0, str(ROOT / "bench"))
    from run import table

    print(table(run()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
