"""Shared helpers of the ElasticScaler e2e scenarios (``test_es_*.py``; usable from
``test_elasticscaler.py`` too).

* ``start_manager``: ``python -m escaler manager`` as a subprocess, as a user runs it, polling
  MetricsTrigger scalers every 2 s, running as **its own client-certificate user** so the API
  server's audit log tells its writes apart from the test's ``kubectl`` (admin) and from another
  manager's. ``ESCALER_E2E_SRC`` points the manager at another checkout of the package (e.g. a
  ``git archive`` of the commit before a change, to watch a regression test fail on it).
* ``AuditLog``: the writes of the local control plane's audit log (``hack/cluster.py`` records
  every create/update/patch/delete with its user), filtered by user, namespace, resource,
  subresource, name and position in the log; ``scale_writes`` counts replica writes (``/scale``
  and ``update``/``patch`` of the workload itself).
* ``generation``: a workload's ``metadata.generation`` (it moves on every spec change, a replica
  write included).
* Builders for Deployments (with kwok's delayed readiness, ``ready_after``), StatefulSets, GPU
  pods, ElasticScalers and HPAs; ``ReplicaRecorder`` samples ``spec.replicas`` of a namespace's
  Deployments in the background; ``SeriesFeeder`` plays a noisy External metric series.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import EllipsisType
from typing import Any

from kubernetes import client as k8s

from .conftest import Cluster, eventually, source_dir
from .webhook import free_port

GROUP = "elasticscaler.io/v1alpha1"
# hack/cluster.py's kwok stage: Running-but-not-Ready, then Ready this long after startTime
READY_AFTER = "escaler.test/ready-after"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# workload writes that change replicas: the /scale subresource, or the object itself
SCALE_VERBS = frozenset({"update", "patch"})
POLL = "2s"

# small metric window, latest sample: a step in the load is seen by the next poll (2 s)
QUICK = {
    "elasticscaler.io/metrics.windowSeconds": "4",
    "elasticscaler.io/metrics.aggregationType": "Latest",
}


# --- the manager --------------------------------------------------------------------------------


@dataclass
class Manager:
    """One ``python -m escaler manager`` subprocess."""

    proc: subprocess.Popen[bytes]
    log: Path
    # the client-certificate user it runs as (the audit log's user.username)
    user: str
    # base URL of its signal/decision API ("" when disabled)
    api: str
    args: list[str] = field(default_factory=list)

    def output(self, tail: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-tail:] if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (SIGCONT first, in case it is stopped), then SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


# what start_manager re-allows by default: the fake servers of the tests listen on loopback
LOOPBACK_NETWORKS = "127.0.0.0/8"


def has_endpoint_policy(src: Path) -> bool:
    """Whether the manager in ``src`` has the SSRF address policy (``--allow-endpoint-networks``)."""
    return (src / "escaler" / "signals" / "netpolicy.py").exists()


def sa_kubeconfig(cluster: Cluster, work: Path, namespace: str, sa: str) -> Path:
    """A kubeconfig holding a TokenRequest token of ServiceAccount ``namespace/sa``: the API server
    sees exactly the pod's identity (user and groups), as it would in the cluster."""
    local = cluster.require_local()
    eventually(lambda: cluster.kubectl("get", "serviceaccount", sa, "-n", namespace, "-o", "name",
                                       check=False), what=f"ServiceAccount {namespace}/{sa}")
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").strip()
    ca = base64.b64encode((local.pki / "ca.crt").read_bytes()).decode()
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": sa,
           "clusters": [{"name": "local",
                         "cluster": {"server": local.server, "certificate-authority-data": ca}}],
           "users": [{"name": sa, "user": {"token": token}}],
           "contexts": [{"name": sa, "context": {"cluster": "local", "user": sa, "namespace": namespace}}]}
    path = work / f"{namespace}-{sa}.kubeconfig"
    path.write_text(json.dumps(cfg))
    return path


def start_manager(
    cluster: Cluster,
    work: Path,
    *,
    user: str,
    poll: str = POLL,
    namespace: str = "",
    leader_elect: bool = False,
    leader_election_id: str = "escaler-e2e",
    leader_election_namespace: str = "",
    api: bool = True,
    extra_args: Sequence[str] = (),
    groups: tuple[str, ...] = ("system:masters",),
    allow_endpoint_networks: str | None = LOOPBACK_NETWORKS,
    extra_env: Mapping[str, str] | None = None,
    test_clock_file: Path | None = None,
    kubeconfig: Path | None = None,
) -> Manager:
    """Start a manager as client-certificate user ``user`` (in ``groups``, system:masters unless
    told otherwise) of the local control plane — or with ``kubeconfig`` (e.g. a ServiceAccount's
    token), ``user`` then only naming it; its log goes to ``work/<user>.log``.

    The fake Prometheus servers listen on 127.0.0.1, which a manager refuses to reach by default
    (SSRF guard): ``allow_endpoint_networks`` is passed as ``--allow-endpoint-networks`` (default
    ``127.0.0.0/8``; ``None`` passes nothing, the production default), and only to a source tree
    that has the flag (``ESCALER_E2E_SRC`` may select an older one). ``test_clock_file`` runs the
    manager on the test clock of that offset file (``--unsafe-test-clock-file``; tests/e2e/testclock.py)."""
    local = cluster.require_local()
    kubeconfig = kubeconfig if kubeconfig is not None else local.user_kubeconfig(user, groups)
    api_port = free_port() if api else 0
    args = [
        sys.executable, "-m", "escaler", "manager",
        f"--kubeconfig={kubeconfig}",
        "--webhook-port=0",
        f"--metrics-trigger-poll-interval={poll}",
        "--metrics-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
        f"--api-bind-address=127.0.0.1:{api_port}" if api else "--api-bind-address=0",
        "--log-format=json",
    ]
    if namespace:
        args.append(f"--namespace={namespace}")
    if leader_elect:
        args += ["--leader-elect", f"--leader-election-id={leader_election_id}",
                 f"--leader-election-namespace={leader_election_namespace or namespace}"]
    src = source_dir()
    if allow_endpoint_networks is not None and has_endpoint_policy(src):
        args.append(f"--allow-endpoint-networks={allow_endpoint_networks}")
    if test_clock_file is not None:
        args.append(f"--unsafe-test-clock-file={test_clock_file}")
    args += list(extra_args)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {}),
           "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)}
    log = work / f"{user}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(args, cwd=src, stdout=f, stderr=subprocess.STDOUT, env=env)
    # the API serves HTTPS by default (self-signed here: no --api-cert-dir)
    return Manager(proc, log, user, f"https://127.0.0.1:{api_port}" if api else "", args)


def lease_holder(cluster: Cluster, namespace: str, name: str) -> str:
    out = cluster.kubectl("get", "lease", name, "-n", namespace, "-o",
                          "jsonpath={.spec.holderIdentity}", check=False)
    return out.strip()


# --- the audit log ------------------------------------------------------------------------------


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class AuditLog:
    """The local control plane's audit log (JSON lines, every write with its user).

    ``offset()`` marks the current end; pass it as ``since`` to look only at later writes. The API
    server writes in blocking mode, so a write is in the log before its response reaches the
    client — but not before its *effect* can be read: the write's ResponseComplete event is
    appended after its handler returns, after the change is in etcd, so a test that saw the change
    through its own GET can read the log a moment too early (CI-like run of 317ecf6:
    ``test_es_activation`` saw the Deployment at 1 and found no write in the log). Such a test
    waits for the write with ``seen_scale_writes``."""

    path: Path

    @classmethod
    def of(cls, cluster: Cluster) -> AuditLog:
        return cls(cluster.require_local().audit_log)

    def offset(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        with open(self.path, "rb") as f:
            f.seek(since)
            data = f.read()
        out = []
        for line in data.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line being written right now
        return out

    def writes(
        self,
        *,
        users: str | Iterable[str] | None = None,
        namespace: str | None = None,
        resource: str | None = None,
        subresource: str | EllipsisType | None = ...,
        name: str | None = None,
        verbs: Iterable[str] = WRITE_VERBS,
        since: int = 0,
        after: float | None = None,
        successful: bool | None = True,
    ) -> list[dict[str, Any]]:
        """Completed writes matching every filter given. ``subresource=None`` means the object
        itself, ``...`` (default) any; ``after`` is a ``time.time()`` the request was received after;
        ``successful`` True keeps 2xx answers, False keeps the refused ones, None keeps both."""
        wanted = {users} if isinstance(users, str) else (set(users) if users is not None else None)
        verbs = set(verbs)
        out = []
        for ev in self.events(since):
            ref = ev.get("objectRef") or {}
            code = int((ev.get("responseStatus") or {}).get("code") or 0)
            if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in verbs:
                continue
            if wanted is not None and (ev.get("user") or {}).get("username") not in wanted:
                continue
            if namespace is not None and ref.get("namespace") != namespace:
                continue
            if resource is not None and ref.get("resource") != resource:
                continue
            if subresource is not ... and ref.get("subresource") != subresource:
                continue
            if name is not None and ref.get("name") != name:
                continue
            if after is not None and _ts(ev["requestReceivedTimestamp"]) <= after:
                continue
            if successful is not None and (200 <= code < 300) != successful:
                continue
            out.append(ev)
        return out

    def scale_writes(self, user: str, namespace: str, name: str | None = None, *,
                     resource: str = "deployments", since: int = 0) -> list[dict[str, Any]]:
        """Successful replica writes by ``user`` to ``resource`` (``/scale`` or the object itself)."""
        return [ev for ev in self.writes(users=user, namespace=namespace, resource=resource, name=name,
                                         verbs=SCALE_VERBS, since=since)
                if (ev["objectRef"].get("subresource") or "scale") == "scale"]


def seen_scale_writes(audit: AuditLog, user: str, namespace: str, name: str | None = None, *,
                      resource: str = "deployments", since: int = 0,
                      timeout: float = 10.0) -> list[dict[str, Any]]:
    """``audit.scale_writes(...)`` once it holds at least one write: for a test that saw a write's
    effect through a GET, before its audit event may be in the log (``AuditLog``'s docstring)."""
    found: list[dict[str, Any]] = eventually(
        lambda: audit.scale_writes(user, namespace, name, resource=resource, since=since),
        timeout=timeout, interval=0.05,
        what=f"a replica write by {user} to {namespace}/{name} in the audit log")
    return found


def count_scale_writes(cluster: Cluster, user: str, namespace: str, name: str | None = None, *,
                       resource: str = "deployments", since: int = 0) -> int:
    """How many replica writes ``user`` made to ``resource`` in ``namespace`` (optionally one object)."""
    return len(AuditLog.of(cluster).scale_writes(user, namespace, name, resource=resource, since=since))


def generation(cluster: Cluster, namespace: str, name: str, kind: str = "deployment") -> int:
    """``metadata.generation`` of a workload (+1 on every spec change, replica writes included)."""
    return int(cluster.kubectl_json("get", kind, name, "-n", namespace)["metadata"]["generation"])


# --- objects ------------------------------------------------------------------------------------


def pod_template(app: str, *, ready_after: str | None = None, gpus: int = 0, cpu: str = "500m",
                 annotations: dict[str, str] | None = None, **pod_spec: Any) -> dict[str, Any]:
    ann = dict(annotations or {})
    if ready_after is not None:
        ann[READY_AFTER] = ready_after
    resources: dict[str, Any] = {"requests": {"cpu": cpu}}
    if gpus:
        # extended resources cannot be overcommitted: requests must equal limits
        resources = {"requests": {"cpu": cpu, "nvidia.com/gpu": str(gpus)},
                     "limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"labels": {"app": app}, "annotations": ann},
        "spec": {"containers": [{"name": "main", "image": "registry.local/llm:1", "resources": resources}],
                 "terminationGracePeriodSeconds": 0, **pod_spec},
    }


def deployment(name: str, replicas: int, *, paused: bool = False, **template: Any) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods; ``template`` goes to ``pod_template`` (``ready_after="30s"``
    for pods that load for 30 s, ``gpus=1`` for a GPU request, pod-spec fields by name)."""
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                            "template": pod_template(name, **template)}
    if paused:
        spec["paused"] = True
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": spec}


def statefulset(name: str, replicas: int, *, partition: int | None = None, **template: Any) -> dict[str, Any]:
    strategy: dict[str, Any] = {"type": "RollingUpdate"}
    if partition is not None:
        strategy["rollingUpdate"] = {"partition": partition}
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
        "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
                 "updateStrategy": strategy, "selector": {"matchLabels": {"app": name}},
                 "template": pod_template(name, **template)},
    }


def anti_affinity(app: str) -> dict[str, Any]:
    """At most one pod of ``app`` per node: with the two kwok nodes, pods beyond two stay Pending
    (PodScheduled=False/Unschedulable)."""
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}}


def external_metric(metric: str, average_value: str = "10") -> dict[str, Any]:
    target = {"type": "AverageValue", "averageValue": average_value}
    return {"type": "External", "external": {"metric": {"name": metric}, "target": target}}


def cpu_utilization(percent: int) -> dict[str, Any]:
    return {"type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": percent}}}


def metrics_trigger(*metrics: dict[str, Any], algorithm: str = "apa") -> dict[str, Any]:
    return {"type": "MetricsTrigger",
            "metricsTrigger": {"scalingAlgorithm": algorithm, "metrics": list(metrics)}}


def scaler(name: str, target: str, trigger: dict[str, Any], *, kind: str = "Deployment", minr: int = 1,
           maxr: int = 10, annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GROUP, "kind": "ElasticScaler",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
                 "minReplicas": minr, "maxReplicas": maxr, "trigger": trigger, **spec},
    }


def hpa(name: str, target: str, metrics: list[dict[str, Any]], *, minr: int = 1, maxr: int = 10,
        behavior: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                            "minReplicas": minr, "maxReplicas": maxr, "metrics": metrics}
    if behavior is not None:
        spec["behavior"] = behavior
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": spec}


def gpu_node_pool(namespace: str) -> tuple[str, dict[str, Any]]:
    """(node name, pod-spec fields) of a GPU node pool private to one test: pods with these fields
    go only to that node, which no other pod tolerates."""
    key = "escaler.test/gpu-pool"
    return f"gpu-{namespace}", {
        "nodeSelector": {key: namespace},
        "tolerations": [{"key": key, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}],
    }


def add_gpu_node(cluster: Cluster, namespace: str, gpus: int) -> str:
    key = "escaler.test/gpu-pool"
    node, _ = gpu_node_pool(namespace)
    cluster.require_local().add_node(node, resources={"nvidia.com/gpu": str(gpus)}, labels={key: namespace},
                                     taints=[{"key": key, "value": namespace, "effect": "NoSchedule"}])
    return node


# --- reading what a user sees -------------------------------------------------------------------


def apply(cluster: Cluster, ns: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))


def workload(cluster: Cluster, ns: str, name: str, kind: str = "deployment") -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", kind, name, "-n", ns))


def replicas(cluster: Cluster, ns: str, name: str, kind: str = "deployment") -> int:
    return int(workload(cluster, ns, name, kind)["spec"]["replicas"])


def es(cluster: Cluster, ns: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", "es", name, "-n", ns))


def cond(obj: dict[str, Any], ctype: str) -> tuple[str, str, str]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c["status"], c["reason"], c.get("message", "")
    return "", "", ""


def wait_cond(cluster: Cluster, ns: str, name: str, ctype: str, status: str, reason: str,
              manager: Manager | None = None, timeout: float = 40) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = es(cluster, ns, name)
        return obj if cond(obj, ctype)[:2] == (status, reason) else None

    try:
        return dict(eventually(check, timeout=timeout, what=f"{ctype}={status}/{reason} on {name}"))
    except AssertionError as e:
        now = cond(es(cluster, ns, name), ctype)
        log = f"; manager log:\n{manager.output(1500)}" if manager else ""
        raise AssertionError(f"{e} (now {ctype}={now[0]}/{now[1]}: {now[2]!r}){log}") from None


def scaler_state(cluster: Cluster, ns: str, name: str) -> str:
    """One line of what ``kubectl get es -o yaml`` shows about a scaler, for failure messages."""
    st = es(cluster, ns, name).get("status") or {}
    conds = "; ".join(f"{c['type']}={c['status']}/{c['reason']}: {c.get('message', '')!r}"
                      for c in st.get("conditions") or [])
    return (f"es/{name}: current={st.get('currentReplicas')} desired={st.get('desiredReplicas')} "
            f"deferredSince={st.get('deferredSince')} conditions: {conds or 'none'}")


def wait_replicas(cluster: Cluster, ns: str, target: str, n: int, *, scaler_name: str,
                  kind: str = "deployment", timeout: float = 30, interval: float = 0.2,
                  what: str = "") -> dict[str, Any]:
    """Wait until ``spec.replicas`` of ``kind/target`` is ``n`` (returns the workload); on timeout, say
    what the scaler reports."""
    def check() -> dict[str, Any] | None:
        w = workload(cluster, ns, target, kind)
        return w if w["spec"]["replicas"] == n else None

    try:
        return dict(eventually(check, timeout=timeout, interval=interval,
                               what=what or f"{kind}/{target} at {n} replicas"))
    except AssertionError as e:
        raise AssertionError(f"{e} (spec.replicas={replicas(cluster, ns, target, kind)}); "
                             f"{scaler_state(cluster, ns, scaler_name)}") from None


def pods(cluster: Cluster, ns: str, selector: str) -> list[dict[str, Any]]:
    return list(cluster.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"])


def pod_cond(pod: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return {}


def is_ready(pod: dict[str, Any]) -> bool:
    return pod_cond(pod, "Ready").get("status") == "True"


def unschedulable(pod: dict[str, Any]) -> bool:
    c = pod_cond(pod, "PodScheduled")
    return (pod.get("status") or {}).get("phase") == "Pending" and (c.get("status"), c.get("reason")) == (
        "False", "Unschedulable")


def wait_scheduler_words_reported(cluster: Cluster, ns: str, scaler_name: str, selector: str,
                                  timeout: float = 30) -> None:
    """Wait until the scaler's ``AbleToScale`` message carries the scheduler's message of one of the
    target's Unschedulable pods *as it reads now*: the scheduler rewrites it as nodes come and go
    (other tests add theirs to the shared cluster, so "0/3 nodes" becomes "0/4 nodes"), and the
    scaler follows on its next pass; a message read once and compared later races that."""
    def reported() -> bool:
        message = cond(es(cluster, ns, scaler_name), "AbleToScale")[2]
        return any(pod_cond(p, "PodScheduled").get("message", "\0") in message
                   for p in pods(cluster, ns, selector) if unschedulable(p))

    eventually(reported, timeout=timeout,
               what=f"{scaler_name}'s AbleToScale message to carry a waiting pod's current scheduler message")


def wait_ready(cluster: Cluster, ns: str, name: str, n: int, kind: str = "deployment",
               timeout: float = 60) -> None:
    eventually(lambda: (workload(cluster, ns, name, kind).get("status") or {}).get("readyReplicas") == n,
               timeout=timeout, what=f"{n} ready replicas of {kind}/{name}")


def hold(pred: Callable[[], Any], seconds: float, interval: float = 0.5, what: str = "condition") -> None:
    """Assert ``pred`` stays truthy for ``seconds`` (checked every ``interval``)."""
    deadline = time.monotonic() + seconds
    while True:
        value = pred()
        assert value, f"{what} stopped holding: {value!r}"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


# --- series -------------------------------------------------------------------------------------


@dataclass
class ReplicaRecorder:
    """Samples ``spec.replicas`` of every Deployment in ``namespace`` every ``interval`` seconds
    (official client, one list per sample) on a background thread. ``samples`` holds
    ``(time.monotonic(), {name: replicas})``."""

    api: k8s.ApiClient
    namespace: str
    interval: float = 0.5
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ReplicaRecorder:
        apps = k8s.AppsV1Api(self.api)

        def run() -> None:
            while not self._stop.is_set():
                t = time.monotonic()
                try:
                    items = apps.list_namespaced_deployment(self.namespace, _request_timeout=5).items
                    self.samples.append((t, {d.metadata.name: int(d.spec.replicas or 0) for d in items}))
                except Exception:
                    pass  # a missed sample is not a test failure
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - t)))

        self._thread = threading.Thread(target=run, name=f"recorder-{self.namespace}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def series(self, name: str) -> list[tuple[float, int]]:
        return [(t, s[name]) for t, s in self.samples if name in s]

    def first_time(self, name: str, pred: Callable[[int], bool], after: float = 0.0) -> float | None:
        for t, n in self.series(name):
            if t >= after and pred(n):
                return t
        return None


def changes(series: Sequence[tuple[float, int]]) -> int:
    """How many times the sampled count changed."""
    return sum(1 for (_, a), (_, b) in itertools.pairwise(series) if a != b)


def time_below(series: Sequence[tuple[float, int]], need: int, start: float, end: float) -> float:
    """Seconds in [start, end) during which the sampled count was below ``need`` (each sample holds
    until the next)."""
    total = 0.0
    for (t, n), (t_next, _) in zip(series, [*series[1:], (end, 0)], strict=False):
        lo, hi = max(t, start), min(t_next, end)
        if hi > lo and n < need:
            total += hi - lo
    return total


@dataclass
class SeriesFeeder:
    """Plays ``phases`` ``[(load, seconds), ...]`` into the fake external metric ``metric`` of
    ``namespace``, a new value every ``step`` seconds: load * (1 + uniform(-noise, +noise)) from a
    RNG seeded with ``seed``. ``phase_starts[i]`` is the ``time.monotonic()`` phase i began."""

    fake_metrics: Any
    namespace: str
    metric: str
    phases: Sequence[tuple[float, float]]
    noise: float = 0.08
    seed: int = 12
    step: float = 1.0
    phase_starts: list[float] = field(default_factory=list)
    values: list[tuple[float, float]] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def value(self, load: float, rng: random.Random) -> float:
        return round(load * (1 + rng.uniform(-self.noise, self.noise)), 3)

    def start(self) -> SeriesFeeder:
        rng = random.Random(self.seed)

        def run() -> None:
            for load, seconds in self.phases:
                start = time.monotonic()
                self.phase_starts.append(start)
                while not self._stop.is_set() and time.monotonic() - start < seconds:
                    v = self.value(load, rng)
                    self.fake_metrics.set_external(self.namespace, self.metric, v)
                    self.values.append((time.monotonic(), v))
                    self._stop.wait(self.step)

        self._thread = threading.Thread(target=run, name=f"feeder-{self.metric}", daemon=True)
        self._thread.start()
        return self

    def join(self) -> None:
        if self._thread:
            self._thread.join()

    def stop(self) -> None:
        self._stop.set()
        self.join()


# --- chaos (issue 15) ---------------------------------------------------------------------------

# ``ESCALER_CHAOS=full`` (set by ``make chaos``, ``bench/chaos.py``) runs the chaos tests
# (marker ``chaos``) in their full form; unset, the normal e2e run runs their reduced form
CHAOS_ENV = "ESCALER_CHAOS"


def chaos_full() -> bool:
    """Whether the chaos tests run in their full form (``ESCALER_CHAOS=full``)."""
    return os.environ.get(CHAOS_ENV, "") == "full"


def chaos_runs(reduced: int, full: int) -> int:
    """How many iterations a chaos test makes: ``full`` under ``make chaos``, else ``reduced``."""
    return full if chaos_full() else reduced


def peak_rss_mib(pid: int) -> float:
    """The peak resident set size (``VmHWM``) of a live process, in MiB; 0.0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0
