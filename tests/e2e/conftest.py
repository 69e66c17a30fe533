"""E2E fixtures: a real control plane for the whole session.

By default the session builds (cached) and starts the local control plane of ``hack/cluster.py``
and prints its start-to-ready time. With ``ESCALER_E2E_KUBECONFIG`` set, the suite runs against
that cluster instead (e.g. kind); tests that need to kill the API server, compact etcd or read
its audit log require the local control plane and say so when it is absent.

``manifests/crds/`` is applied once per session when it holds CRDs.

Parallel tier (docs/testing.md): under pytest-xdist (``-n N``) the controller process starts one
local control plane and one fake metrics server before the workers start, and every worker
attaches to them (``ESCALER_E2E_CLUSTER_DIR``, ``ESCALER_E2E_FAKE_METRICS``): tests share the API
server and each owns its namespace (and the manager it starts, which watches only that
namespace). Tests that need the whole cluster (they kill or restart the API server, compact
etcd, register a cluster-wide webhook, delete a shipped CRD, run a manager over every namespace,
measure capacity or leader failover timing) carry ``pytest.mark.serial`` and run in the serial
tier, ``-m serial`` without ``-n``, on a control plane of their own; a worker refuses to run one.

``ESCALER_E2E_CLUSTER_DIR`` set by hand attaches a run to a control plane started with
``hack/cluster.py up --detach --dir DIR``: one test or one file runs without a fresh start.

``ESCALER_E2E_SRC`` names another checkout of the project (e.g. ``git archive`` of the commit
before a change, unpacked somewhere): its CRDs are applied, and ``es_helpers.start_manager`` runs
its ``escaler`` package, so a regression test can be watched failing on the old code while the
test code, ``hack/`` and these fixtures stay current.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config

ROOT = Path(__file__).resolve().parents[2]


def source_dir() -> Path:
    """The checkout whose CRDs and ``escaler`` package the e2e run uses (``ESCALER_E2E_SRC`` or the repo)."""
    return Path(os.environ.get("ESCALER_E2E_SRC") or ROOT).resolve()


sys.path.insert(0, str(ROOT / "hack"))

from cluster import LocalCluster, binaries, free_port  # noqa: E402, F401 (free_port: for the helpers)
from fake_metrics import (  # noqa: E402
    MetricsAPIClient,
    MetricsAPIServer,
    PrometheusServer,
    apiservice_manifests,
    kubectl_pod_lister,
)

# a control plane to attach to instead of starting one (set by hand, or by the xdist controller)
CLUSTER_DIR_ENV = "ESCALER_E2E_CLUSTER_DIR"
# "PORT:TOKEN" of the fake metrics server the xdist controller serves for every worker
FAKE_METRICS_ENV = "ESCALER_E2E_FAKE_METRICS"
# set by the xdist controller for its workers: the shared plane is ready, CRDs applied
SHARED_ENV = "ESCALER_E2E_SHARED"


@dataclass
class _SharedPlane:
    """What the xdist controller started for its workers; stopped at the end of the run."""

    cluster: LocalCluster
    metrics: MetricsAPIServer


_shared: _SharedPlane | None = None


def _is_xdist_controller(config: pytest.Config) -> bool:
    if hasattr(config, "workerinput"):
        return False
    n = getattr(config.option, "numprocesses", None)
    return bool(n) and getattr(config.option, "dist", "no") != "no"


def pytest_configure(config: pytest.Config) -> None:
    # issue 15: the chaos tests run reduced in every e2e run and in full under `make chaos`
    # (ESCALER_CHAOS=full); each reports what it measured with record_property, which
    # bench/chaos.py reads from the JUnit XML
    config.addinivalue_line("markers",
                            "chaos: a fault or hostile-input test; `make chaos` runs its full form")
    config.addinivalue_line("markers",
                            "serial: needs the whole control plane; the serial tier runs it "
                            "(-m serial, no -n)")
    if (_is_xdist_controller(config) and not config.option.collectonly
            and not os.environ.get("ESCALER_E2E_KUBECONFIG") and not os.environ.get(CLUSTER_DIR_ENV)):
        _start_shared_plane()


def pytest_unconfigure(config: pytest.Config) -> None:
    global _shared
    if _shared is not None:
        _shared.metrics.stop()
        _shared.cluster.stop()
        _shared = None


def _start_shared_plane() -> None:
    """The xdist controller's control plane, CRDs and fake metrics server, handed to the workers
    through the environment they inherit."""
    global _shared
    import tempfile

    local = LocalCluster(Path(tempfile.mkdtemp(prefix="escaler-e2e-")))
    try:
        local.start()
        kubectl = binaries()["kubectl"]
        _apply_crds(Cluster(local.kubeconfig, kubectl, local))
        srv = MetricsAPIServer(local.pki / "metrics-server.crt", local.pki / "metrics-server.key",
                               kubectl_pod_lister(kubectl, str(local.kubeconfig))).start()
    except Exception:
        local.stop()
        raise
    _shared = _SharedPlane(local, srv)
    c = Cluster(local.kubeconfig, kubectl, local)
    _register_fake_metrics(c, srv.port)
    msg = (f"\n[e2e] shared control plane for the parallel tier ready in {local.startup_seconds:.1f}s "
           f"at {local.server}; logs in {local.workdir}\n")
    sys.stderr.write(msg)
    (ROOT / ".e2e-startup.txt").write_text(msg)
    os.environ[CLUSTER_DIR_ENV] = str(local.workdir)
    os.environ[FAKE_METRICS_ENV] = f"{srv.port}:{srv.control_token}"
    os.environ[SHARED_ENV] = "1"


def _apply_crds(c: Cluster) -> None:
    """The README's command, verbatim (``kubectl apply --server-side -k manifests/crds/``: the folder
    holds a kustomization, which ``-f`` would read as an object and refuse); file by file for a source
    tree without one (``ESCALER_E2E_SRC``)."""
    folder = source_dir() / "manifests" / "crds"
    crds = sorted(folder.glob("*.yaml"))
    if (folder / "kustomization.yml").is_file():
        c.kubectl("apply", "--server-side", "-k", f"{folder}/")
    else:
        for f in crds:
            c.kubectl("apply", "--server-side", "-f", str(f))
    if crds:
        c.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def _register_fake_metrics(c: Cluster, port: int) -> None:
    local = c.require_local()
    c.apply(apiservice_manifests(port, (local.pki / "ca.crt").read_bytes()))
    for name in ("v1beta1.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io",
                 "v1beta1.external.metrics.k8s.io"):
        c.kubectl("wait", "--for=condition=Available", "--timeout=60s", f"apiservice/{name}")


def pytest_collection_finish(session: pytest.Session) -> None:
    # after -m/-k deselection: what is left is what this worker would run
    if not os.environ.get(SHARED_ENV):
        return
    serial = [i.nodeid for i in session.items if i.get_closest_marker("serial")]
    if serial:
        raise pytest.UsageError(
            f"{len(serial)} serial test(s) selected on parallel workers (e.g. {serial[0]}): they need the "
            "whole control plane; deselect them with -m 'not serial' and run them with -m serial, "
            "without -n (docs/testing.md)")


@dataclass
class Cluster:
    """What a test sees of the cluster: a kubeconfig, kubectl, and the local control plane if any."""

    kubeconfig: Path
    kubectl_bin: str
    local: LocalCluster | None

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                kubeconfig: Path | None = None) -> str:
        r = subprocess.run([self.kubectl_bin, f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
                           input=input, capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def kubectl_json(self, *args: str) -> Any:
        """``kubectl ARGS -o json``. The commonest form, one named object (``get KIND NAME -n NS``),
        which tests poll several times a second, is read with one in-process GET instead of a
        kubectl process (a tenth of the CPU; the same object, the same error on a miss): on 2 cores
        shared by the parallel tier's workers, kubectl processes were most of the suite's CPU."""
        got = _reader(self).get(args)
        if got is not None:
            return got
        return json.loads(self.kubectl(*args, "-o", "json"))

    def apply(self, obj: dict[str, Any] | list[dict[str, Any]]) -> str:
        doc = obj if isinstance(obj, dict) else {"apiVersion": "v1", "kind": "List", "items": obj}
        return self.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def wait_established(self, crd: str, timeout: float = 60.0) -> None:
        """Wait until CRD ``crd`` (``<plural>.<group>``) is Established. ``kubectl wait
        --for=condition=Established`` fails at once, instead of waiting, when it reads the CRD before
        the API server wrote any condition (".status.conditions accessor error: <nil>"): a race the
        loaded parallel tier lost once."""

        def established() -> bool:
            got = json.loads(self.kubectl("get", "crd", crd, "-o", "json", check=False) or "{}")
            conditions = (got.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

        eventually(established, timeout=timeout, interval=0.2, what=f"CRD {crd} Established")

    def require_local(self) -> LocalCluster:
        if self.local is None:
            pytest.fail("this test needs the local control plane of hack/cluster.py "
                        "(unset ESCALER_E2E_KUBECONFIG)")
        return self.local


@dataclass
class _Resource:
    # the object's URL path up to the name, with {ns} for a namespaced resource
    path: str
    namespaced: bool


class _ObjectReader:
    """``kubectl get KIND NAME -n NS -o json`` for one named object, in process: KIND is resolved
    like kubectl does (plural, singular, short name or kind, optionally ``.group``) from the API
    server's discovery, re-read once when a name is unknown (a CRD a test just made); anything
    else returns None and the caller runs kubectl."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = k8s.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        self._api = k8s.ApiClient(cfg)
        self._host = cfg.host
        token = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        self._headers = {"Accept": "application/json", **({"Authorization": token} if token else {})}
        # lower-case name (plural, singular, short, kind; each also as name.group) -> resource
        self._names: dict[str, _Resource] = {}
        self._lock = threading.Lock()

    def _raw(self, path: str) -> tuple[int, Any]:
        """(status, decoded body) of one GET."""
        r = self._api.call_api("GET", self._host + path, header_params=dict(self._headers),
                               _request_timeout=30)
        return r.status, json.loads(r.read() or b"null")

    def _discover(self) -> None:
        names: dict[str, _Resource] = {}
        groups = [("", "/api/v1")]
        status, doc = self._raw("/apis")
        for g in (doc.get("groups") or []) if status == 200 else []:
            pref = (g.get("preferredVersion") or {}).get("groupVersion")
            if pref:
                groups.append((g["name"], f"/apis/{pref}"))
        for group, base in groups:
            status, lst = self._raw(base)
            for r in (lst.get("resources") or []) if status == 200 else []:
                if "/" in r["name"] or "get" not in (r.get("verbs") or []):
                    continue
                res = _Resource(f"{base}/namespaces/{{ns}}/{r['name']}" if r["namespaced"]
                                else f"{base}/{r['name']}", bool(r["namespaced"]))
                for n in {r["name"], r.get("singularName") or "", r["kind"].lower(),
                          *(r.get("shortNames") or [])} - {""}:
                    names.setdefault(n, res)  # core and the preferred group first, as kubectl
                    if group:
                        names.setdefault(f"{n}.{group}", res)
        self._names = names

    def _resolve(self, kind: str) -> _Resource | None:
        with self._lock:
            if kind.lower() not in self._names:
                self._discover()
            return self._names.get(kind.lower())

    def get(self, args: tuple[str, ...]) -> Any:
        if len(args) != 5 or args[0] != "get" or args[3] not in ("-n", "--namespace"):
            return None
        kind, name, ns = args[1], args[2], args[4]
        if "," in kind or "/" in kind or "/" in name or name.startswith("-") or ns.startswith("-"):
            return None
        res = self._resolve(kind)
        if res is None:
            return None
        status, obj = self._raw(res.path.format(ns=ns) + "/" + name)
        if status != 200:
            st = obj if isinstance(obj, dict) else {}
            raise AssertionError(f"kubectl {' '.join(args)} -o json failed (1): Error from server "
                                 f"({st.get('reason', status)}): {st.get('message', obj)}")
        return obj


_readers: dict[Path, _ObjectReader] = {}


def _reader(c: Cluster) -> _ObjectReader:
    if c.kubeconfig not in _readers:
        _readers[c.kubeconfig] = _ObjectReader(c.kubeconfig)
    return _readers[c.kubeconfig]


def eventually(pred: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2,
               what: str = "condition") -> Any:
    """Poll ``pred`` until it returns a truthy value (returned) or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def wait_synced(proc: subprocess.Popen[bytes], log: Path, timeout: float = 90.0) -> None:
    """Block until the manager ``proc`` (logging to ``log``) has synced its caches, so a test's own
    deadlines start when the manager can act, not while it imports and lists on a loaded machine
    (a per-test manager, parallel tier); fail with the log's tail if it exits first."""
    def synced() -> bool:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise AssertionError(f"the manager exited ({proc.returncode}) before its caches synced:\n{tail}")
        return log.exists() and "caches synced" in log.read_text(errors="replace")

    eventually(synced, timeout=timeout, interval=0.1, what=f"the manager's caches to sync ({log})")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    external = os.environ.get("ESCALER_E2E_KUBECONFIG")
    attach = os.environ.get(CLUSTER_DIR_ENV)
    if external:
        kubectl = os.environ.get("KUBECTL", "kubectl")
        c = Cluster(Path(external), kubectl, None)
    elif attach:
        local = LocalCluster.attach(Path(attach))
        c = Cluster(local.kubeconfig, local.bins["kubectl"], local)
    else:
        t0 = time.monotonic()
        bins = binaries()
        built = time.monotonic() - t0
        local = LocalCluster(tmp_path_factory.mktemp("cluster"))
        try:
            local.start()
        except Exception:
            local.stop()
            raise
        msg = (f"\n[e2e] local control plane ready in {local.startup_seconds:.1f}s "
               f"(binaries checked/built in {built:.1f}s) at {local.server}; logs in {local.workdir}\n")
        sys.stderr.write(msg)
        (ROOT / ".e2e-startup.txt").write_text(msg)
        c = Cluster(local.kubeconfig, bins["kubectl"], local)
    if not os.environ.get(SHARED_ENV):  # the xdist controller applied them once for every worker
        _apply_crds(c)
    try:
        yield c
    finally:
        if c.local is not None:
            c.local.stop()


@pytest.fixture(scope="session")
def api_client(cluster: Cluster) -> k8s.ApiClient:
    """The official Python client, configured from the cluster's kubeconfig (as a user would)."""
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=cfg)
    return k8s.ApiClient(cfg)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"e2e-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    cluster.kubectl("create", "namespace", name)
    # made by kube-controller-manager, which may still be in its watch backoff after a serial test
    # restarted the API server: a wait, not a bound on anything under test
    eventually(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False),
               timeout=120, interval=0.5, what=f"default service account in {name}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def fake_metrics(cluster: Cluster) -> Iterator[MetricsAPIServer | MetricsAPIClient]:
    """metrics.k8s.io, custom.metrics.k8s.io and external.metrics.k8s.io, registered as APIServices
    (on a parallel worker: the controller's server, scripted through ``MetricsAPIClient``; each test
    scripts only its own namespace)."""
    local = cluster.require_local()
    shared = os.environ.get(FAKE_METRICS_ENV)
    if shared:
        port, token = shared.split(":", 1)
        yield MetricsAPIClient(int(port), token, local.pki / "ca.crt")
        return
    srv = MetricsAPIServer(local.pki / "metrics-server.crt", local.pki / "metrics-server.key",
                           kubectl_pod_lister(cluster.kubectl_bin, str(cluster.kubeconfig))).start()
    _register_fake_metrics(cluster, srv.port)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def managers() -> Iterator[list[Any]]:
    """Managers a test started (``es_helpers.Manager``); each is stopped when the test ends,
    whatever happened (thawed first if it was frozen)."""
    started: list[Any] = []
    try:
        yield started
    finally:
        for m in started:
            m.stop()


@pytest.fixture
def prometheus() -> Iterator[PrometheusServer]:
    srv = PrometheusServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def slo_apis() -> Iterator[list[Any]]:
    """SLO API processes a test started (``sloapi_helpers.start_slo_api``), stopped at its end."""
    started: list[Any] = []
    try:
        yield started
    finally:
        for api in started:
            api.stop()
