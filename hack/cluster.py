#!/usr/bin/env python3
"""A real local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (fake nodes), from the binaries ``hack/build.sh`` caches.

Usable by hand and from tests:

    hack/cluster.py up [--dir DIR] [--nodes 2]   # start, print the kubeconfig path, stay up
    hack/cluster.py down --dir DIR                # stop a cluster started with --detach: each
                                                  # process waited for, SIGKILL after --grace 10
    hack/cluster.py up --detach --dir DIR         # start in the background and return

and from Python (tests/e2e/conftest.py): ``LocalCluster(workdir).start()`` / ``.stop()``.

What it sets up: a CA and certificates made with openssl (serving cert for 127.0.0.1/localhost,
client certs for admin (system:masters), controller-manager, scheduler; a front-proxy CA for
the aggregation layer, so APIService-registered servers work); a service-account signing key;
etcd on loopback with ``--unsafe-no-fsync``; kube-apiserver with RBAC authorization and an audit
log of every write (JSON lines, ``audit.log`` in the work directory); kube-controller-manager
with the deployment, replicaset, HPA (sync period 2 s; ``quick_hpa=False``: KCM's defaults),
garbage-collector, namespace and service-account controllers, each using its own
service-account credentials; kube-scheduler;
kwok managing ``--nodes`` fake nodes so Deployment/StatefulSet pods become Running and Ready.

Realistic pods (kwok's Stage configuration, ``ESCALER_STAGES`` below, loaded after kwok's own
"fast" stages): a pod annotated ``escaler.test/ready-after: "30s"`` (or ``"30"``; whole seconds)
becomes Running but *not Ready* at once, and Ready only 30 s after its ``status.startTime`` -- an
LLM server loading its weights. The delay is an absolute time computed from ``startTime``, so an
update of the pod in between does not restart it. Pods that request what no node offers (e.g.
``nvidia.com/gpu: 1``) are left to the real kube-scheduler: they stay Pending with
``PodScheduled=False/Unschedulable`` and the scheduler's message (kwok only touches pods bound to
its nodes). ``add_node()`` adds a kwok node with extra allocatable resources, labels and taints
(e.g. a GPU node of a test's own) and ``delete_node()`` removes it.
Every port is picked free at start, so two clusters on one machine do not collide. ``stop()``
(also called at interpreter exit) kills every process it started.

Watch-cache note: ConfigMaps are served without the API server's watch cache
(``--watch-cache-sizes=configmaps#0``) so that an etcd compaction makes an old watch
resourceVersion answer 410 Gone, as tests of the informers' relist path need.

Only the standard library is used, so this runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HACK = Path(__file__).resolve().parent
SERVICE_CIDR = "10.96.0.0/16"
STARTUP_TIMEOUT = 120.0
DEFAULT_NODES = 2


# free_port() picks below the kernel's ephemeral range (Linux: 32768-60999): a port it returns is
# bound by its user a moment later, and in between an outgoing connection of any process (a test
# worker's, a manager's) may take an ephemeral port as its source port, so a port picked there can
# be in use by the time it is bound (seen with parallel e2e workers: EADDRINUSE). Ports here are
# only ever taken by an explicit bind.
FREE_PORT_RANGE = (20000, 32768)
# A port free_port() returned is reserved for this long, across every process of this user (a file
# per port in PORT_RESERVATIONS): between the pick and its user's bind (a process start, seconds on
# a loaded machine) another process must not be handed the same port. Without it two parallel e2e
# workers (or the serial tier beside them) could both pick a port nothing had bound yet, and a test
# then talk to another test's server (CI of f78e1b0: an SLO API's /readyz answered 200 and its
# /config a body of another kind).
PORT_RESERVATION_SECONDS = 600.0
PORT_RESERVATIONS = Path(tempfile.gettempdir()) / f"escaler-ports-{os.getuid()}"


def _reserve(port: int) -> bool:
    """Reserve ``port`` for PORT_RESERVATION_SECONDS; False if another reservation holds it."""
    PORT_RESERVATIONS.mkdir(mode=0o700, exist_ok=True)
    path = PORT_RESERVATIONS / str(port)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return True
    except FileExistsError:
        pass
    try:
        if time.time() - path.stat().st_mtime < PORT_RESERVATION_SECONDS:
            return False
        # a stale reservation: exactly one claimant's rename succeeds
        path.rename(path.with_name(f"{port}.stale.{os.getpid()}.{random.getrandbits(32)}"))
    except FileNotFoundError:
        return False
    for stale in PORT_RESERVATIONS.glob(f"{port}.stale.*"):
        stale.unlink(missing_ok=True)
    return _reserve(port)


def free_port() -> int:
    """A loopback TCP port nothing listens on now, outside the ephemeral range, that no other call
    of this user's processes returned in the last PORT_RESERVATION_SECONDS (see above)."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(*FREE_PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _reserve(port):
            return port
    raise RuntimeError(f"no free port in {FREE_PORT_RANGE} after 200 tries")


def binaries() -> dict[str, str]:
    """Build (if needed) and locate every binary via hack/build.sh --print."""
    out = subprocess.run(
        ["bash", str(HACK / "build.sh"), "--print", "k8s", "etcd", "kwok"],
        check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


def make_pki(d: Path) -> None:
    """CA, serving and client certificates, front-proxy CA, service-account key pair."""
    d.mkdir(parents=True, exist_ok=True)
    if (d / ".done").exists():
        return

    def ca(name: str, cn: str) -> None:
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                 "-out", f"{name}.crt", "-days", "3650", "-subj", f"/CN={cn}", cwd=d)

    def cert(name: str, ca_name: str, subj: str, sans: str | None = None,
             usage: str = "clientAuth") -> None:
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", subj, cwd=d)
        ext = d / f"{name}.ext"
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment",
                 f"extendedKeyUsage={usage}"]
        if sans:
            lines.append(f"subjectAltName={sans}")
        ext.write_text("\n".join(lines) + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca_name}.crt", "-CAkey",
                 f"{ca_name}.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", "3650",
                 "-extfile", ext.name, cwd=d)

    ca("ca", "escaler-local-ca")
    ca("front-proxy-ca", "escaler-front-proxy-ca")
    sans = ("IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")
    cert("apiserver", "ca", "/CN=kube-apiserver", sans, usage="serverAuth")
    cert("admin", "ca", "/O=system:masters/CN=escaler-admin")
    cert("kcm", "ca", "/CN=system:kube-controller-manager")
    cert("scheduler", "ca", "/CN=system:kube-scheduler")
    cert("front-proxy-client", "front-proxy-ca", "/CN=front-proxy-client")
    # serving certificate for the fake metric backends registered as APIServices
    # (the aggregator verifies it as <service>.<namespace>.svc; see hack/fake_metrics.py)
    cert("metrics-server", "ca", "/CN=localhost",
         "DNS:localhost,IP:127.0.0.1,DNS:fake-metrics.escaler-metrics.svc", usage="serverAuth")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    (d / ".done").write_text("ok\n")


def kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "escaler-local",
        "clusters": [{"name": "escaler-local", "cluster": {
            "server": server, "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": user, "user": {
            "client-certificate-data": b64(f"{user}.crt"), "client-key-data": b64(f"{user}.key")}}],
        "contexts": [{"name": "escaler-local", "context": {"cluster": "escaler-local", "user": user}}],
    }
    path.write_text(json.dumps(cfg, indent=2))  # JSON is valid YAML; kubectl reads it


AUDIT_POLICY = textwrap.dedent("""\
    apiVersion: audit.k8s.io/v1
    kind: Policy
    omitStages: [RequestReceived]
    rules:
      # every write, with who made it: the reliability tests read this
      - level: Metadata
        verbs: [create, update, patch, delete, deletecollection]
      - level: None
    """)


# Annotation that makes a pod Running-but-not-Ready first and Ready after a delay (whole seconds,
# with or without an "s" suffix), counted from the pod's status.startTime.
READY_AFTER_ANNOTATION = "escaler.test/ready-after"

# kwok Stages added to the "fast" ones hack/build.sh ships. Both carry weight 1: when several stages
# match a pod, kwok picks among those with a weight > 0 (the shipped "pod-ready" stage has weight 0),
# so an annotated pod always takes these and never the instant pod-ready. Selector keys are jq.
ESCALER_STAGES = textwrap.dedent("""\
    apiVersion: kwok.x-k8s.io/v1alpha1
    kind: Stage
    metadata:
      name: escaler-pod-start-unready
    spec:
      resourceRef:
        apiGroup: v1
        kind: Pod
      selector:
        matchExpressions:
        - key: '.metadata.deletionTimestamp'
          operator: 'DoesNotExist'
        - key: '.metadata.annotations["escaler.test/ready-after"]'
          operator: 'Exists'
        - key: '.status.phase'
          operator: 'In'
          values:
          - 'Pending'
      weight: 1
      next:
        statusTemplate: |
          {{ $now := Now }}
          conditions:
          - lastTransitionTime: {{ $now | Quote }}
            status: "True"
            type: PodReadyToStartContainers
          - lastTransitionTime: {{ $now | Quote }}
            status: "True"
            type: Initialized
          - lastTransitionTime: {{ $now | Quote }}
            message: 'containers with unready status: [{{ range .spec.containers }}{{ .name }} {{ end }}]'
            reason: ContainersNotReady
            status: "False"
            type: Ready
          - lastTransitionTime: {{ $now | Quote }}
            message: 'containers with unready status: [{{ range .spec.containers }}{{ .name }} {{ end }}]'
            reason: ContainersNotReady
            status: "False"
            type: ContainersReady
          containerStatuses:
          {{ range .spec.containers }}
          - image: {{ .image | Quote }}
            name: {{ .name | Quote }}
            ready: false
            restartCount: 0
            started: true
            state:
              running:
                startedAt: {{ $now | Quote }}
          {{ end }}
          {{ $hostIPs := NodeIPsWith .spec.nodeName }}
          {{ with $hostIPs }}
          hostIP: {{ index . 0 | Quote }}
          hostIPs:
          {{ range . }}
          - ip: {{ . | Quote }}
          {{ end }}
          {{ end }}
          {{ $uid := or .metadata.uid "" }}
          {{ $name := or .metadata.name "" }}
          {{ $ns := or .metadata.namespace "" }}
          {{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) $uid $name $ns }}
          {{ with $podIPs }}
          podIP: {{ index . 0 | Quote }}
          podIPs:
          {{ range . }}
          - ip: {{ . | Quote }}
          {{ end }}
          {{ end }}
          phase: Running
          startTime: {{ $now | Quote }}
    ---
    apiVersion: kwok.x-k8s.io/v1alpha1
    kind: Stage
    metadata:
      name: escaler-pod-ready-after
    spec:
      resourceRef:
        apiGroup: v1
        kind: Pod
      selector:
        matchExpressions:
        - key: '.metadata.deletionTimestamp'
          operator: 'DoesNotExist'
        - key: '.metadata.annotations["escaler.test/ready-after"]'
          operator: 'Exists'
        - key: '.status.phase'
          operator: 'In'
          values:
          - 'Running'
        - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
          operator: 'In'
          values:
          - 'False'
      weight: 1
      delay:
        # an RFC 3339 time: kwok waits until then (startTime + the annotation's seconds)
        durationFrom:
          expressionFrom: >-
            (.status.startTime | fromdateiso8601)
            + (.metadata.annotations["escaler.test/ready-after"] | rtrimstr("s") | tonumber)
            | todate
      next:
        statusTemplate: |
          {{ $now := Now }}
          conditions:
          - lastTransitionTime: {{ $now | Quote }}
            message: ''
            reason: ''
            status: "True"
            type: Ready
          - lastTransitionTime: {{ $now | Quote }}
            message: ''
            reason: ''
            status: "True"
            type: ContainersReady
          containerStatuses:
          {{ range .status.containerStatuses }}
          - image: {{ .image | Quote }}
            name: {{ .name | Quote }}
            ready: true
            restartCount: 0
            started: true
            state:
              running:
                startedAt: {{ .state.running.startedAt | Quote }}
          {{ end }}
    """)


@dataclass
class Proc:
    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as f:
            self.popen = subprocess.Popen(self.args, stdout=f, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(5)


@dataclass
class LocalCluster:
    """One local control plane in ``workdir``. ``start()`` returns once it is usable."""

    workdir: Path
    nodes: int = DEFAULT_NODES
    # name -> process, in start order; stop() goes in reverse
    procs: dict[str, Proc] = field(default_factory=dict)
    bins: dict[str, str] = field(default_factory=dict)
    etcd_port: int = 0
    apiserver_port: int = 0
    startup_seconds: float = 0.0
    # the HPA controller's settings: the tests' quick ones (sync every 2 s, 10 s scale-down window);
    # False runs kube-controller-manager's defaults (15 s sync, 5 workers, 5 min) -- benchmarks
    quick_hpa: bool = True

    # True: started by another process (``attach``); this object cannot stop or kill its processes
    attached: bool = False

    @classmethod
    def attach(cls, workdir: Path) -> LocalCluster:
        """The running control plane another process started in ``workdir`` (its ``cluster.json``):
        kubeconfigs, users, nodes and etcd work; stopping, killing or restarting its processes do
        not (they belong to the process that started it)."""
        info = json.loads((workdir / "cluster.json").read_text())
        c = cls(workdir, attached=True)
        c.bins = binaries()
        c.apiserver_port = int(str(info["server"]).rsplit(":", 1)[1])
        c.etcd_port = int(str(info["etcd"]).rsplit(":", 1)[1])
        c.startup_seconds = float(info.get("startup_seconds", 0.0))
        return c

    def _owned(self, what: str) -> None:
        if self.attached:
            raise RuntimeError(f"cannot {what}: this control plane was started by another process "
                               f"({self.workdir}); a test that needs it belongs in the serial tier "
                               "(pytest.mark.serial, docs/testing.md)")

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalCluster:
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bins = binaries()
        make_pki(self.pki)
        self.etcd_port, peer = free_port(), free_port()
        self.apiserver_port = free_port()
        kubeconfig(self.kubeconfig, self.server, self.pki, "admin")
        kubeconfig(self.workdir / "kcm.kubeconfig", self.server, self.pki, "kcm")
        kubeconfig(self.workdir / "scheduler.kubeconfig", self.server, self.pki, "scheduler")
        (self.workdir / "audit-policy.yaml").write_text(AUDIT_POLICY)
        atexit.register(self.stop)
        self._start_etcd(peer)
        self._wait(lambda: self._http_ok(f"{self.etcd_url}/health"), "etcd")
        self._start_apiserver()
        self._wait(self._apiserver_ready, "kube-apiserver /readyz")
        self._start_kcm()
        self._start_scheduler()
        self._start_kwok()
        self._create_nodes()
        self._wait(self._default_sa_ready, "default service account")
        self.startup_seconds = time.monotonic() - t0
        (self.workdir / "cluster.json").write_text(json.dumps({
            "kubeconfig": str(self.kubeconfig), "server": self.server, "etcd": self.etcd_url,
            "pids": {n: p.popen.pid for n, p in self.procs.items() if p.popen},
            # what `down` checks before it signals a PID (hack/cluster.py down: PID reuse)
            "procs": {n: _process_record(p.popen.pid, p.args[0])
                      for n, p in self.procs.items() if p.popen},
            "startup_seconds": round(self.startup_seconds, 2)}, indent=2))
        return self

    def stop(self) -> None:
        if self.attached:
            return
        for p in reversed(list(self.procs.values())):
            p.stop()

    def _start_etcd(self, peer: int) -> None:
        data = self.workdir / "etcd-data"
        self._run("etcd", [
            self.bins["etcd"], "--name", "escaler", "--data-dir", str(data),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"escaler=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync", "--log-level", "warn", "--quota-backend-bytes", str(2 << 30)])

    def apiserver_args(self) -> list[str]:
        p = self.pki
        return [
            self.bins["kube-apiserver"],
            "--advertise-address=127.0.0.1", "--bind-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--etcd-servers={self.etcd_url}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=RBAC",
            f"--client-ca-file={p / 'ca.crt'}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            # aggregation layer (metrics.k8s.io & co. served by APIService-registered servers)
            f"--requestheader-client-ca-file={p / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-username-headers=X-Remote-User",
            f"--proxy-client-cert-file={p / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={p / 'front-proxy-client.key'}",
            f"--audit-policy-file={self.workdir / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--watch-cache-sizes=configmaps#0",
            "--allow-privileged=true", "--profiling=false", "--v=1",
        ]

    def _start_apiserver(self) -> None:
        self._run("kube-apiserver", self.apiserver_args())

    def kill_apiserver(self) -> None:
        """SIGKILL the API server (reliability tests)."""
        self._owned("kill the API server")
        self.procs["kube-apiserver"].stop(signal.SIGKILL)

    def restart_apiserver(self) -> None:
        self._owned("restart the API server")
        self._start_apiserver()
        self._wait(self._apiserver_ready, "kube-apiserver /readyz after restart")

    def _start_kcm(self) -> None:
        p = self.pki
        kc = self.workdir / "kcm.kubeconfig"
        self._run("kube-controller-manager", [
            self.bins["kube-controller-manager"], f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--controllers=deployment-controller,replicaset-controller,"
            "horizontal-pod-autoscaler-controller,garbage-collector-controller,namespace-controller,"
            "serviceaccount-controller,serviceaccount-token-controller,statefulset-controller",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p / 'sa.key'}", f"--root-ca-file={p / 'ca.crt'}",
            *(["--horizontal-pod-autoscaler-sync-period=2s",
               "--horizontal-pod-autoscaler-downscale-stabilization=10s"] if self.quick_hpa else []),
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
            "--v=1"])

    def _start_scheduler(self) -> None:
        kc = self.workdir / "scheduler.kubeconfig"
        self._run("kube-scheduler", [
            self.bins["kube-scheduler"], f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}", "--v=1"])

    def _start_kwok(self) -> None:
        stages = self.workdir / "kwok-escaler-stages.yaml"
        stages.write_text(ESCALER_STAGES)
        self._run("kwok", [
            self.bins["kwok"], f"--kubeconfig={self.kubeconfig}", f"--config={self.bins['kwok-stages']}",
            f"--config={stages}",
            "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.244.0.0/16", "--node-ip=10.244.0.1", f"--server-address=127.0.0.1:{free_port()}"])

    def _create_nodes(self) -> None:
        for i in range(self.nodes):
            self._apply_node(f"kwok-node-{i}", labels={"type": "kwok"})
        self._wait(self._nodes_ready, f"{self.nodes} kwok nodes Ready")

    def _apply_node(self, name: str, resources: dict[str, str] | None = None,
                    labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> None:
        alloc = {"cpu": "64", "memory": "256Gi", "pods": "250", **(resources or {})}
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", **(labels or {})}},
            "spec": {"taints": taints} if taints else {},
            "status": {"allocatable": alloc, "capacity": dict(alloc)},
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(node))
        # The TaintNodesByCondition admission plugin taints every new node not-ready; the
        # node-lifecycle controller (not run here: kwok nodes have no kubelet to watch) would
        # lift it once the node reports Ready, so lift it ourselves.
        self.kubectl("taint", "nodes", name, "node.kubernetes.io/not-ready:NoSchedule-", check=False)

    def add_node(self, name: str, resources: dict[str, str] | None = None,
                 labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
                 timeout: float = 60.0) -> None:
        """Add a kwok node (64 CPUs, 256Gi, 250 pods, plus ``resources``, e.g.
        ``{"nvidia.com/gpu": "2"}``) with extra ``labels`` and ``taints``; return once it is Ready.
        Give it a taint its own pods tolerate to keep other tests' pods off it."""
        self._apply_node(name, resources, labels, taints)

        def ready() -> bool:
            doc = self._get(f"/api/v1/nodes/{name}")
            conds = (doc or {}).get("status", {}).get("conditions", [])  # type: ignore[union-attr]
            return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

        self._wait(ready, f"node {name} Ready", timeout=timeout)

    def delete_node(self, name: str) -> None:
        self.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false", check=False)

    def user_kubeconfig(self, user: str, groups: tuple[str, ...] = ("system:masters",),
                        server: str | None = None) -> Path:
        """A kubeconfig for a distinct client-certificate user (so the audit log tells writers apart),
        optionally pointing at another ``server`` URL (e.g. a test proxy)."""
        subj = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        key, csr, crt = (self.pki / f"user-{user}.{ext}" for ext in ("key", "csr", "crt"))
        name = f"user-{user}" if server is None else f"user-{user}-{abs(hash(server)) % 10**8}"
        path = self.workdir / f"{name}.kubeconfig"
        # parallel test workers share this directory (and the CA's serial file): one at a time
        with open(self.pki / ".users.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not crt.exists():
                _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key.name, "-out", csr.name,
                         "-subj", subj, cwd=self.pki)
                ext = self.pki / "client.ext"
                ext.write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
                _openssl("x509", "-req", "-in", csr.name, "-CA", "ca.crt", "-CAkey", "ca.key",
                         "-CAcreateserial", "-out", crt.name, "-days", "3650", "-extfile", ext.name,
                         cwd=self.pki)
            kubeconfig(path, server or self.server, self.pki, f"user-{user}")
        return path

    # --- helpers -------------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        r = subprocess.run([self.bins["kubectl"], f"--kubeconfig={self.kubeconfig}", *args],
                           input=input, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def _run(self, name: str, args: list[str]) -> None:
        p = Proc(name, args, self.workdir / f"{name}.log")
        p.start()
        self.procs[name] = p

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _http_ok(self, url: str, ctx: ssl.SSLContext | None = None) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _apiserver_ready(self) -> bool:
        return self._http_ok(f"{self.server}/readyz", self._ssl())

    def _get(self, path: str) -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(f"{self.server}{path}", timeout=5, context=self._ssl()) as r:
                return json.loads(r.read())  # type: ignore[no-any-return]
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _nodes_ready(self) -> bool:
        doc = self._get("/api/v1/nodes?labelSelector=type%3Dkwok")
        items = doc.get("items", []) if doc else []
        ready = 0
        for n in items:  # type: ignore[union-attr]
            for c in n.get("status", {}).get("conditions", []):
                if c.get("type") == "Ready" and c.get("status") == "True":
                    ready += 1
        return ready >= self.nodes

    def _default_sa_ready(self) -> bool:
        return self._get("/api/v1/namespaces/default/serviceaccounts/default") is not None

    def _wait(self, pred: object, what: str, timeout: float = STARTUP_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.procs.values():
                if not p.alive():
                    tail = p.log.read_text(errors="replace")[-3000:] if p.log.exists() else ""
                    raise RuntimeError(f"{p.name} exited while waiting for {what}:\n{tail}")
            if pred():  # type: ignore[operator]
                return
            time.sleep(0.25)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {self.workdir}")

    # --- etcd v3 JSON gateway (compaction for the 410 tests) -----------------------------------

    def etcd_revision(self) -> int:
        body = json.dumps({"key": base64.b64encode(b"/").decode()}).encode()
        req = urllib.request.Request(f"{self.etcd_url}/v3/kv/range", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(json.loads(r.read())["header"]["revision"])

    def etcd_compact(self, revision: int | None = None) -> int:
        rev = revision if revision is not None else self.etcd_revision()
        body = json.dumps({"revision": str(rev), "physical": True}).encode()
        req = urllib.request.Request(f"{self.etcd_url}/v3/kv/compaction", data=body, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        return rev


# --- `down`: stop a detached control plane from another process ---------------------------------
#
# `up --detach` returns and leaves the processes running; `down` is not their parent, so it cannot
# wait(2) for them: it polls /proc (Linux) until each is gone, and a zombie counts as gone (an
# orphan's zombie lingers until its new parent reaps it, and some container inits never do).
# A PID in cluster.json may by now belong to another process, so `down` signals a PID only while
# /proc/PID/stat's start time (and /proc/PID/cmdline's binary) still match what start() recorded.

# seconds a process has after SIGTERM before its process group gets SIGKILL (`down --grace`)
DOWN_GRACE_SECONDS = 10.0
# seconds to wait for the process group to go after SIGKILL before giving up on it
DOWN_KILL_WAIT_SECONDS = 5.0
_DOWN_POLL_SECONDS = 0.05


@dataclass(frozen=True)
class _ProcStat:
    state: str  # R, S, D, Z (zombie), X (dead), ...
    pgid: int
    starttime: int  # clock ticks after boot: with the PID, names one process for good


def _proc_stat(pid: int) -> _ProcStat | None:
    """The state, process group and start time of ``pid`` from /proc/PID/stat; None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # FileNotFoundError, or ESRCH while it is being torn down
        return None
    # "PID (COMM) STATE PPID PGRP ... STARTTIME ...": COMM may hold spaces and parentheses
    fields = raw[raw.rindex(")") + 2:].split()
    return _ProcStat(state=fields[0], pgid=int(fields[2]), starttime=int(fields[19]))


def _running(st: _ProcStat | None) -> bool:
    return st is not None and st.state not in ("Z", "X")


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _process_record(pid: int, argv0: str) -> dict[str, object]:
    """What cluster.json keeps of one started process, for ``down`` to recognise it later."""
    st = _proc_stat(pid)
    return {"pid": pid, "exe": argv0, "starttime": st.starttime if st else None}


def _group_members(pgid: int) -> list[int]:
    """The PIDs of every running (not zombie) process in process group ``pgid``."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _proc_stat(int(entry.name))
            if _running(st) and st is not None and st.pgid == pgid:
                out.append(int(entry.name))
    return sorted(out)


def _is_recorded(name: str, rec: dict[str, object], st: _ProcStat) -> tuple[bool, str]:
    """Whether the running process with ``rec["pid"]`` is still the one ``up`` started; if not, why."""
    pid = int(rec["pid"])  # type: ignore[call-overload]
    argv = _cmdline(pid)
    have = argv[0] if argv else "?"
    # a cluster.json written before the binary was recorded: the binary is named like the process
    exe = str(rec.get("exe") or name)
    if have != exe and os.path.basename(have) != os.path.basename(exe):
        return False, f"PID {pid} is now {' '.join(argv)[:120] or '?'!r}, not {exe}"
    started = rec.get("starttime")
    if started is not None and int(started) != st.starttime:  # type: ignore[call-overload]
        return False, f"PID {pid} is a later {os.path.basename(have)} (start time {st.starttime}, " \
                      f"recorded {started})"
    return True, ""


def _signal(pid: int, group: bool, sig: int) -> None:
    if group:
        os.killpg(pid, sig)
    else:
        os.kill(pid, sig)


def _wait_gone(pid: int, group: bool, timeout: float) -> bool:
    """Poll until ``pid`` (and, for a group leader, every process of its group) has exited."""
    deadline = time.monotonic() + timeout
    while True:
        gone = not _group_members(pid) if group else not _running(_proc_stat(pid))
        if gone or time.monotonic() >= deadline:
            return gone
        time.sleep(_DOWN_POLL_SECONDS)


def stop_recorded(name: str, rec: dict[str, object], grace: float = DOWN_GRACE_SECONDS,
                  kill_wait: float = DOWN_KILL_WAIT_SECONDS) -> tuple[bool, str]:
    """Stop one process ``up`` recorded: SIGTERM, wait up to ``grace`` seconds, then SIGKILL and
    wait up to ``kill_wait`` more. Returns (stopped, what happened, for the user).

    A process started by ``Proc.start`` leads its own process group (``start_new_session``); the
    group is signalled and waited for then, so a child it left behind does not outlive it. A
    process that is not a group leader (some other launcher) is signalled alone: its PID is not a
    group, and its group may hold processes that are none of ours.
    """
    pid = int(rec["pid"])  # type: ignore[call-overload]
    st = _proc_stat(pid)
    if not _running(st) or st is None:
        return True, f"{name} ({pid}) was not running"
    ours, why = _is_recorded(name, rec, st)
    if not ours:
        return True, f"{name} ({pid}) was not running ({why}; left it alone)"
    group = st.pgid == pid
    t0 = time.monotonic()
    try:
        _signal(pid, group, signal.SIGTERM)
    except ProcessLookupError:
        return True, f"{name} ({pid}) was not running"
    except PermissionError:
        return False, f"could not stop {name} ({pid}): not permitted to signal it"
    if _wait_gone(pid, group, grace):
        return True, f"stopped {name} ({pid}) in {time.monotonic() - t0:.1f}s"
    leader_alive = _running(_proc_stat(pid))
    left = "still running" if leader_alive else \
        f"exited, but its process group ({', '.join(map(str, _group_members(pid)))}) was still running"
    with contextlib.suppress(ProcessLookupError):
        _signal(pid, group, signal.SIGKILL)
    if _wait_gone(pid, group, kill_wait):
        return True, f"killed {name} ({pid}): {left} {grace:g}s after SIGTERM"
    return False, (f"could not stop {name} ({pid}): {left} {grace:g}s after SIGTERM and still "
                   f"running {kill_wait:g}s after SIGKILL")


def down_cluster(workdir: Path, grace: float = DOWN_GRACE_SECONDS,
         kill_wait: float = DOWN_KILL_WAIT_SECONDS) -> int:
    """Stop the processes of ``workdir/cluster.json`` in reverse start order (dependents first),
    each waited for before the next; print what happened to each. 0 when every one is gone."""
    info = json.loads((workdir / "cluster.json").read_text())
    # "procs" ({name: {pid, exe, starttime}}) since `down` waits; "pids" alone in older files
    recs: dict[str, dict[str, object]] = info.get("procs") or {
        n: {"pid": pid} for n, pid in info["pids"].items()}
    ok = True
    for name, rec in reversed(list(recs.items())):
        stopped, what = stop_recorded(name, rec, grace, kill_wait)
        print(what, flush=True)
        ok = ok and stopped
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a local control plane")
    up.add_argument("--dir", default=None, help="work directory (default: a new temp dir)")
    up.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    up.add_argument("--detach", action="store_true", help="leave it running and return")
    down = sub.add_parser("down", help="stop a detached control plane")
    down.add_argument("--dir", required=True)
    down.add_argument("--grace", type=float, default=DOWN_GRACE_SECONDS, metavar="SECONDS",
                      help="how long each process has to exit after SIGTERM before SIGKILL "
                           f"(default {DOWN_GRACE_SECONDS:g})")
    args = ap.parse_args()
    if args.cmd == "down":
        return down_cluster(Path(args.dir), args.grace)
    workdir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="escaler-cluster-"))
    c = LocalCluster(workdir, nodes=args.nodes)
    try:
        c.start()
    except Exception:
        c.stop()
        raise
    print(f"control plane ready in {c.startup_seconds:.1f}s")
    print(f"export KUBECONFIG={c.kubeconfig}")
    sys.stdout.flush()
    if args.detach:
        atexit.unregister(c.stop)
        return 0
    stop = False

    def _sig(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _sig)
    signal.signal(signal.SIGINT, _sig)
    while not stop:
        time.sleep(0.5)
    c.stop()
    if not args.dir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
