"""E2E fixtures: a real control plane for the whole session.

By default the session builds (cached) and starts the local control plane of ``hack/cluster.py``
and prints its start-to-ready time. With ``ESCALER_E2E_KUBECONFIG`` set, the suite runs against
that cluster instead (e.g. kind); tests that need to kill the API server, compact etcd or read
its audit log require the local control plane and say so when it is absent.

``manifests/crds/`` is applied once per session when it holds CRDs.

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

from cluster import LocalCluster, binaries  # noqa: E402
from fake_metrics import (  # noqa: E402
    MetricsAPIServer,
    PrometheusServer,
    apiservice_manifests,
    kubectl_pod_lister,
)


def pytest_configure(config: pytest.Config) -> None:
    # issue 15: the chaos tests run reduced in every e2e run and in full under `make chaos`
    # (ESCALER_CHAOS=full); each reports what it measured with record_property, which
    # bench/chaos.py reads from the JUnit XML
    config.addinivalue_line("markers",
                            "chaos: a fault or hostile-input test; `make chaos` runs its full form")


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
        return json.loads(self.kubectl(*args, "-o", "json"))

    def apply(self, obj: dict[str, Any] | list[dict[str, Any]]) -> str:
        doc = obj if isinstance(obj, dict) else {"apiVersion": "v1", "kind": "List", "items": obj}
        return self.kubectl("apply", "-f", "-", input=json.dumps(doc))

    def require_local(self) -> LocalCluster:
        if self.local is None:
            pytest.fail("this test needs the local control plane of hack/cluster.py "
                        "(unset ESCALER_E2E_KUBECONFIG)")
        return self.local


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


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    external = os.environ.get("ESCALER_E2E_KUBECONFIG")
    if external:
        kubectl = os.environ.get("KUBECTL", "kubectl")
        c = Cluster(Path(external), kubectl, None)
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
    crds = sorted((source_dir() / "manifests" / "crds").glob("*.yaml"))
    if crds:
        for f in crds:
            c.kubectl("apply", "--server-side", "-f", str(f))
        c.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
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
    eventually(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False),
               what=f"default service account in {name}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def fake_metrics(cluster: Cluster) -> Iterator[MetricsAPIServer]:
    """metrics.k8s.io, custom.metrics.k8s.io and external.metrics.k8s.io, registered as APIServices."""
    local = cluster.require_local()
    srv = MetricsAPIServer(local.pki / "metrics-server.crt", local.pki / "metrics-server.key",
                           kubectl_pod_lister(cluster.kubectl_bin, str(cluster.kubeconfig))).start()
    cluster.apply(apiservice_manifests(srv.port, (local.pki / "ca.crt").read_bytes()))
    for name in ("v1beta1.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io",
                 "v1beta1.external.metrics.k8s.io"):
        cluster.kubectl("wait", "--for=condition=Available", "--timeout=60s", f"apiservice/{name}")
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
