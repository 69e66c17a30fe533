#!/usr/bin/env python3
"""``make demo``: the toolkit on a real local control plane, narrated step by step.

1. builds (once, cached) and starts the local control plane of ``hack/cluster.py``;
2. runs two replicas of the ``examples/keycount`` operator with leader election on one Lease;
3. creates a ConfigMap and shows the leader annotating it, and the standby staying quiet;
4. ``kill -9``s the leader and shows the standby taking over and reconciling a change;
5. starts ``python -m escaler manager`` and scales an LLM Deployment with an ElasticScaler on
   (fake) Prometheus load: up on traffic, held by the stabilization window, then down, with
   ``escaler explain`` showing why;
6. tears everything down. Every step prints the kubectl command a user would type.

It exits by itself (about a minute with warm caches); non-zero if a step does not happen.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
from cluster import LocalCluster  # noqa: E402

NS = "demo"


def step(msg: str) -> None:
    print(f"\n\033[1m==> {msg}\033[0m", flush=True)


def wait(pred: Callable[[], bool], what: str, timeout: float = 60) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.2)
    raise SystemExit(f"demo failed: timed out waiting for {what}")


def elastic_scaler_demo(
    c: LocalCluster, work: Path, kubectl: Callable[..., str], procs: dict[str, subprocess.Popen[bytes]]
) -> None:
    """An LLM Deployment scaled by an ElasticScaler on (fake) Prometheus load."""
    from fake_metrics import PrometheusServer

    step("ElasticScaler: install the CRDs and start `python -m escaler manager`")
    kubectl("apply", "--server-side", "-f", str(ROOT / "manifests" / "crds"), show=False)
    kubectl("wait", "--for=condition=Established", "crd", "--all", show=False)
    kubectl("get", "crd", "-o", "name")
    prom = PrometheusServer().start()
    query = 'sum(vllm:num_requests_running{model="llama"})'
    prom.set(query, 16)  # 16 requests running: 2 replicas at 8 each
    log = open(work / "manager.log", "wb")  # noqa: SIM115
    procs["manager"] = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "escaler",
            "manager",
            f"--kubeconfig={c.kubeconfig}",
            "--webhook-port=0",
            "--metrics-trigger-poll-interval=2s",
            "--api-bind-address=0",
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
            # the fake Prometheus listens on loopback, which endpoints may not reach by default
            "--allow-endpoint-networks=127.0.0.0/8",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )

    def replicas() -> int:
        out = c.kubectl("get", "deploy", "llama", "-n", NS, "-o", "jsonpath={.spec.replicas}", check=False)
        return int(out or 0)

    step("a vLLM-style Deployment (kwok runs its pods) and an ElasticScaler on Prometheus load")
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "llama"}},
            "template": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
            },
        },
    }
    es = {
        "apiVersion": "elasticscaler.io/v1alpha1",
        "kind": "ElasticScaler",
        "metadata": {
            "name": "llama",
            "annotations": {
                "elasticscaler.io/metrics.windowSeconds": "4",
                "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "20",
            },
        },
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
            "minReplicas": 1,
            "maxReplicas": 10,
            "trigger": {
                "type": "MetricsTrigger",
                "metricsTrigger": {
                    "scalingAlgorithm": "apa",
                    "metrics": [
                        {
                            "type": "ExternalServer",
                            "externalServer": {
                                "endpoint": prom.url,
                                "query": query,
                                "target": {"type": "AverageValue", "averageValue": "8"},
                            },
                        }
                    ],
                },
            },
        },
    }
    kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(deploy))
    kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(es))
    wait(
        lambda: "MetricsAvailable" in c.kubectl("get", "es", "llama", "-n", NS, "-o", "yaml", check=False),
        "the scaler to read its metric",
    )
    kubectl("get", "es", "llama", "-n", NS)

    step("traffic triples: 48 requests running -> apa scales to 6 (at most x2 per step)")
    prom.set(query, 48)
    wait(lambda: replicas() == 6, "scale up to 6")
    kubectl("get", "es,deploy", "llama", "-n", NS)

    step("traffic drops to 8: the scale-down is held by the 20 s stabilization window")
    prom.set(query, 8)
    wait(
        lambda: "ScaleDownStabilized" in c.kubectl("get", "es", "llama", "-n", NS, "-o", "yaml", check=False),
        "ScaleDownStabilized",
    )
    kubectl("get", "es", "llama", "-n", NS)
    print(f"$ python -m escaler explain -n {NS} llama")
    print(
        subprocess.run(
            [sys.executable, "-m", "escaler", "explain", "-n", NS, "llama", f"--kubeconfig={c.kubeconfig}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout
    )
    wait(lambda: replicas() < 6, "scale down after the window", timeout=60)
    kubectl("get", "es,deploy", "llama", "-n", NS)
    prom.stop()


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="escaler-demo-"))
    step("starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
    c = LocalCluster(work / "cluster").start()
    print(f"ready in {c.startup_seconds:.1f}s; export KUBECONFIG={c.kubeconfig}")
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def kubectl(*args: str, input: str | None = None, show: bool = True) -> str:
        if show:
            print(f"$ kubectl {' '.join(args)}")
        out = c.kubectl(*args, input=input, check=False)
        if show and out.strip():
            print(out.rstrip())
        return out

    def holder() -> str:
        return c.kubectl(
            "get", "lease", "keycount", "-n", NS, "-o", "jsonpath={.spec.holderIdentity}", check=False
        ).strip()

    def count() -> str:
        return c.kubectl(
            "get",
            "cm",
            "models",
            "-n",
            NS,
            "-o",
            "jsonpath={.metadata.annotations.examples\\.escaler\\.io/key-count}",
            check=False,
        )

    try:
        kubectl("create", "namespace", NS)
        for ident in ("keycount-a", "keycount-b"):
            step(f"starting operator replica {ident} (python -m examples.keycount --leader-elect)")
            log = open(work / f"{ident}.log", "wb")  # noqa: SIM115
            procs[ident] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "examples.keycount",
                    f"--kubeconfig={c.kubeconfig}",
                    f"--namespace={NS}",
                    "--leader-elect",
                    f"--identity={ident}",
                    "--metrics-bind-address=127.0.0.1:0",
                    "--health-probe-bind-address=127.0.0.1:0",
                ],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            if ident == "keycount-a":
                wait(lambda: holder() == "keycount-a", "keycount-a to lead")
        kubectl("get", "lease", "keycount", "-n", NS)

        step("a ConfigMap with 3 keys: the leader mirrors the count into an annotation")
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "models"},
            "data": {"llama": "8b", "qwen": "7b", "mistral": "7b"},
        }
        kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(cm))
        wait(lambda: count() == "3", "key-count 3")
        kubectl("get", "cm", "models", "-n", NS, "-o", "jsonpath={.metadata.annotations}")
        print()

        step("kill -9 the leader; the standby takes the Lease when it expires (15 s)")
        procs["keycount-a"].send_signal(signal.SIGKILL)
        took = wait(lambda: holder() == "keycount-b", "keycount-b to take over", timeout=40)
        print(f"keycount-b leads after {took:.1f}s")
        kubectl("get", "lease", "keycount", "-n", NS)

        step("a fourth key: the new leader reconciles it")
        cm["data"]["phi"] = "3b"
        kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(cm))
        wait(lambda: count() == "4", "key-count 4")
        kubectl("get", "cm", "models", "-n", NS, "-o", "jsonpath={.metadata.annotations}")
        print()
        elastic_scaler_demo(c, work, kubectl, procs)
        step("done: ElasticScaler and the toolkit under it, on a real API server")
        return 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        c.stop()
        print(f"(cluster stopped; logs kept in {work})")


if __name__ == "__main__":
    raise SystemExit(main())
