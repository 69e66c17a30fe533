"""ElasticScaler latency and idle write cost, on the real local control plane.

Starts ``hack/cluster.py``'s control plane and one ``python -m escaler manager`` (as its own
client-certificate user, so the audit log attributes its writes), then measures:

* apa: a metric step on the fake Prometheus → the target's ``spec.replicas`` written (p50/p99);
  bounded below by ``--metrics-trigger-poll-interval`` (1 s here), which is the point of the row;
* StateTrigger: a source's ``status.desiredReplicas`` patched → target written (p50/p99);
* SignalTrigger: an authenticated ``POST /signal/...`` → target written (p50/p99);
* 100 idle scalers (load at target) left alone for ``BENCH_IDLE_SECONDS`` (default 300): API
  writes made by the manager, counted from the audit log (goal: 0).

The write is observed by polling the Deployment every 10 ms through the API server, so each
latency includes up to ~10 ms of observation delay.
"""

from __future__ import annotations

import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))

from cluster import LocalCluster  # noqa: E402
from fake_metrics import PrometheusServer  # noqa: E402

TITLE = "ElasticScaler: decision-to-write latency and idle API writes (real control plane)"
NOTES = """
`make bench` runs this against a fresh local control plane (about 7 minutes with the idle phase; set
`BENCH_IDLE_SECONDS` to shorten it). apa latency is dominated by the 1 s poll interval used here: a
metric change is only seen at the scaler's next poll (production default 30 s, spread over the
interval). StateTrigger and SignalTrigger are event-driven (a watch event or the push enqueues the
scaler at once). Idle writes count every create/update/patch the manager's user made after the
100 scalers settled.
"""

TRIALS = int(os.environ.get("BENCH_TRIALS", "15"))
IDLE_SECONDS = float(os.environ.get("BENCH_IDLE_SECONDS", "300"))
IDLE_SCALERS = int(os.environ.get("BENCH_IDLE_SCALERS", "100"))
NS = "bench"


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


class Bench:
    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="escaler-bench-"))
        self.cluster = LocalCluster(self.work / "cluster").start()
        for f in sorted((ROOT / "manifests" / "crds").glob("*.yaml")):
            self.kubectl("apply", "--server-side", "-f", str(f))
        self.kubectl("wait", "--for=condition=Established", "crd", "--all")
        self.kubectl("create", "namespace", NS)
        self.prom = PrometheusServer().start()
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
                "--max-concurrent-reconciles=4",
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

    def replicas(self, name: str) -> int:
        out = self.kubectl("get", "deploy", name, "-n", NS, "-o", "jsonpath={.spec.replicas}")
        return int(out or 0)

    def wait_replicas(self, name: str, want: int, timeout: float = 60) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.replicas(name) == want:
                return time.monotonic() - t0
            time.sleep(0.01)
        raise TimeoutError(f"{name} never reached {want} replicas; see {self.work}/manager.log")

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
    q = "sum(bench_apa)"
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
    out = []
    for i in range(TRIALS):
        want = 3 if i % 2 == 0 else 2
        t0 = time.monotonic()
        b.prom.set(q, want * 10)
        b.wait_replicas("apa", want)
        out.append(time.monotonic() - t0)
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
    out = []
    for i in range(TRIALS):
        want = 2 + i % 2
        t0 = time.monotonic()
        b.kubectl(
            "patch",
            "replicasource",
            "src",
            "-n",
            NS,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"desiredReplicas": want}}),
        )
        b.wait_replicas("state", want)
        out.append(time.monotonic() - t0)
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
    out = []
    for i in range(TRIALS):
        want = 2 + i % 2
        t0 = time.monotonic()
        req = urllib.request.Request(
            f"https://127.0.0.1:{b.api_port}/signal/v1/namespaces/{NS}/elasticscalers/signal",
            data=json.dumps({"replicas": want}).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10, context=tls):
            pass
        b.wait_replicas("signal", want)
        out.append(time.monotonic() - t0)
    return out


def bench_idle(b: Bench) -> dict[str, Any]:
    q = "sum(bench_idle)"
    b.prom.set(q, 20)
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
    start = time.time()
    time.sleep(IDLE_SECONDS)
    writes = 0
    for line in b.cluster.audit_log.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("user", {}).get("username") != "escaler-manager" or ev.get("stage") != "ResponseComplete":
            continue
        if ev.get("verb") not in ("create", "update", "patch", "delete"):
            continue
        # writes on behalf of the idle scalers: their status, their targets, their Events
        # ("<scaler>.<suffix>"); the latency phases' own event flushes are not idle writes
        if not str(ev.get("objectRef", {}).get("name", "")).startswith("idle-"):
            continue
        ts = ev["stageTimestamp"].replace("Z", "+00:00")
        from datetime import datetime

        if datetime.fromisoformat(ts).timestamp() >= start:
            writes += 1
    return {
        "scalers": IDLE_SCALERS,
        "seconds": IDLE_SECONDS,
        "api writes": writes,
        "writes per scaler-hour": round(writes / IDLE_SCALERS / (IDLE_SECONDS / 3600), 3),
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
                "measurement": f"{idle['scalers']} idle scalers for {idle['seconds']:.0f} s",
                "trials": 1,
                "p50 s": "",
                "p99 s": "",
                "max s": "",
                "api writes": idle["api writes"],
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
