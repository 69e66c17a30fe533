"""The kustomize base, installed and run with the shipped ServiceAccounts' own permissions (issue 14).

``kubectl apply --server-side -k`` installs ``manifests/base`` into the local control plane, with
the one change docs/install.md tells a user to make for an External metric: an overlay granting
its name in ``escaler-manager-metrics``. The namespace enforces Pod Security "restricted", so the
API server admitting the Deployments' pods (kwok runs them; nothing executes) shows their security
settings pass it. Then:

* the manager runs as a local process with **exactly the args of the base's Deployment** (parsed by
  escaler's own parser; only the bind addresses, the poll interval and the Lease namespace — which
  in a pod comes from the ServiceAccount mount — are appended, the last value of a flag winning),
  authenticated by a TokenRequest token of ``system:serviceaccount:escaler-system:escaler-manager``:
  it leads on the Lease ``escaler-manager`` in ``escaler-system``, scales a Deployment from an
  External metric through ``/scale``, and nothing it asks is refused (no 403 for that user in the
  audit log of writes, no "forbidden" in its log; reads refused would show there);
* the SLO API runs the same way as ``escaler-slo-api`` with ``--auth token``, becomes ready (its
  informers list and watch both SLO kinds) and logs no "forbidden";
* ``kubectl auth can-i --list`` for both ServiceAccounts shows no ``*`` in a verb or a resource.

Beside it: the dev and production overlays and the chart pass a server-side dry run (Pod Security
silent), and ``helm install --wait`` / ``helm uninstall`` of the chart work on the same cluster.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from escaler.cli.main import build_parser

from .conftest import ROOT, Cluster, eventually, source_dir
from .es_helpers import (
    QUICK,
    AuditLog,
    Manager,
    apply,
    deployment,
    external_metric,
    lease_holder,
    metrics_trigger,
    replicas,
    sa_kubeconfig,
    scaler,
    seen_scale_writes,
    wait_cond,
)
from .tls_helpers import SERVING_SECRET, configmap_ca, verified_get
from .webhook import free_port

# serial tier (docs/testing.md): it installs the shipped ClusterRoles, webhook and chart cluster-wide
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

NS = "escaler-system"
MANAGER_SA = "escaler-manager"
SLO_API_SA = "escaler-slo-api"
LEASE = "escaler-manager"  # the flag's default, set explicitly by the base
METRIC = "install-queue"


def sa_user(sa: str) -> str:
    return f"system:serviceaccount:{NS}:{sa}"


def _overlay(work: Path) -> Path:
    """manifests/base plus the rule docs/install.md shows for one External metric."""
    d = work / "overlay"
    d.mkdir()
    (d / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "manifests" / "base", d)],  # kustomize wants it relative
        "patches": [{"patch": yaml.safe_dump({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "escaler-manager-metrics"},
            "rules": [{"apiGroups": ["external.metrics.k8s.io"], "resources": [METRIC],
                       "verbs": ["get", "list"]}]})}],
    }))
    return d


@pytest.fixture(scope="module")
def installed(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[dict[str, Any]]]:
    """The base applied once for this module (with the metric grant); everything but the CRDs
    deleted afterwards (the rest of the session uses them). Local control plane only: it reads the
    audit log and the cluster CA, and on kind (hack/kind.py) the chart already owns escaler-system."""
    cluster.require_local()
    overlay = _overlay(tmp_path_factory.mktemp("install"))
    objs = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", str(overlay))) if d]
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-k", str(overlay))
        yield objs
    finally:
        rest = [o for o in objs if o["kind"] != "CustomResourceDefinition"]
        cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rest}), check=False)


def _container_args(objs: list[dict[str, Any]], deployment_name: str) -> list[str]:
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == deployment_name)
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return list(args)


def _run(work: Path, name: str, args: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
    parser, _ = build_parser()
    parser.parse_args(args)  # exits (failing the test) on a flag escaler does not have
    src = source_dir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)}
    log = work / f"{name}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "escaler", *args], cwd=src, stdout=f,
                                stderr=subprocess.STDOUT, env=env)
    return proc, log


def _can_i_list(cluster: Cluster, user: str, namespace: str) -> list[dict[str, str]]:
    """``kubectl auth can-i --list`` as ``user``, one dict per row (columns cut at the header's
    positions: Resources, Non-Resource URLs, Resource Names, Verbs)."""
    out = cluster.kubectl("auth", "can-i", "--list", f"--as={user}", "-n", namespace)
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines[0]
    names = ["Resources", "Non-Resource URLs", "Resource Names", "Verbs"]
    starts = [header.index(n) for n in names]
    rows = []
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


def _wildcards(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in rows if "*" in r["Resources"] or "*" in r["Verbs"]]


def _vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def _memory_request_mb(objs: list[dict[str, Any]], deployment_name: str) -> float:
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == deployment_name)
    value = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"]
    assert value.endswith("Mi"), value
    return float(value[:-2])


def test_the_installed_base_runs_with_its_service_accounts_permissions(
        cluster: Cluster, installed: list[dict[str, Any]], namespace: str, tmp_path: Path,
        fake_metrics: Any, managers: list[Manager]) -> None:
    objs = installed
    # Pod Security "restricted" admitted both Deployments' pods (kwok marks them running)
    for component, want in (("manager", 2), ("slo-api", 1)):
        eventually(lambda c=component, n=want: len(cluster.kubectl_json(
            "get", "pods", "-n", NS, "-l", f"app.kubernetes.io/component={c}")["items"]) == n,
            timeout=60, what=f"{want} {component} pod(s) admitted in {NS}; events:\n"
                             + cluster.kubectl("get", "events", "-n", NS, check=False))

    audit = AuditLog.of(cluster)
    since = audit.offset()

    # the manager: the Deployment's args, then only what differs outside a pod
    args = _container_args(objs, "escaler-manager")
    assert args[0] == "manager" and "--leader-elect" in args
    kubeconfig = sa_kubeconfig(cluster, tmp_path, NS, MANAGER_SA)
    api_port = free_port()
    args += [f"--kubeconfig={kubeconfig}", f"--leader-election-namespace={NS}",
             "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
             f"--api-bind-address=127.0.0.1:{api_port}", "--metrics-trigger-poll-interval=2s"]
    proc, log = _run(tmp_path, "manager", args)
    m = Manager(proc, log, sa_user(MANAGER_SA), f"https://127.0.0.1:{api_port}", args)
    managers.append(m)
    eventually(lambda: lease_holder(cluster, NS, LEASE), timeout=40, what=f"the lease; log:\n{m.output()}")

    # it scales: an apa ElasticScaler on the External metric the overlay granted
    apply(cluster, namespace, deployment("llm", 1))
    fake_metrics.set_external(namespace, METRIC, 10)
    apply(cluster, namespace, scaler("s", "llm", metrics_trigger(external_metric(METRIC, "10")),
                                     annotations=QUICK))
    wait_cond(cluster, namespace, "s", "ScalingActive", "True", "MetricsAvailable", m)
    fake_metrics.set_external(namespace, METRIC, 30)
    eventually(lambda: replicas(cluster, namespace, "llm") >= 2, timeout=40,
               what=f"a scale-up; log:\n{m.output()}")
    # ... as the ServiceAccount, through /scale
    seen_scale_writes(audit, sa_user(MANAGER_SA), namespace, "llm", since=since)
    # the decision API of the base answers on the leader over HTTPS only (the unscoped route of
    # 0.1 is 410 naming the namespaced one)
    r = requests.get(f"{m.api}/decisions/none-such", timeout=10, verify=False)
    assert r.status_code == 410 and r.json()["error"]["code"] == "gone", r.text
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{api_port}/decisions/none-such", timeout=10)
    # ... with the serving certificate the manager made, as its ServiceAccount, in the Secret the
    # base names: a client trusting only that Secret's ca.crt verifies it for the Service's name
    secret = cluster.kubectl_json("get", "secret", SERVING_SECRET, "-n", NS)
    assert secret["type"] == "kubernetes.io/tls"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    assert verified_get(api_port, "/healthz", ca, f"escaler-manager.{NS}.svc")[0] == 200
    # ... and publishes that CA for clients in the ConfigMap the base names
    eventually(lambda: configmap_ca(cluster, NS) == ca, timeout=30,
               what=f"the ConfigMap escaler-ca; log:\n{m.output()}")
    logged = m.output(tail=2_000_000)
    assert "serving a self-signed one" not in logged

    # the SLO API as its ServiceAccount, --auth token as shipped
    slo_args = _container_args(objs, "escaler-slo-api")
    slo_port = free_port()
    # the Secret's pair where the pod mounts it (outside a pod: a directory of our own)
    certs = tmp_path / "slo-api-tls"
    certs.mkdir()
    for key in ("tls.crt", "tls.key"):
        (certs / key).write_bytes(base64.b64decode(secret["data"][key]))
    slo_args += [f"--kubeconfig={sa_kubeconfig(cluster, tmp_path, NS, SLO_API_SA)}",
                 f"--bind-address=127.0.0.1:{slo_port}", f"--cert-dir={certs}"]
    slo_proc, slo_log = _run(tmp_path, "slo-api", slo_args)
    try:
        def slo_ready() -> bool:
            assert slo_proc.poll() is None, slo_log.read_text()
            try:
                return requests.get(f"https://127.0.0.1:{slo_port}/readyz", timeout=5,
                                    verify=False).status_code == 200
            except requests.ConnectionError:
                return False

        eventually(slo_ready, timeout=60, what="the SLO API ready")
        # --auth token: a request without a token is refused by the SLO API, not by RBAC
        config = requests.get(f"https://127.0.0.1:{slo_port}/config", timeout=10, verify=False)
        assert config.status_code == 401, config.text
        # the base serves it over HTTPS with the manager's serving certificate (its names cover the
        # escaler-slo-api Service), verified with the Secret's ca.crt
        assert verified_get(slo_port, "/healthz", ca, f"escaler-slo-api.{NS}.svc")[0] == 200
        assert "serving a self-signed one" not in slo_log.read_text()
    finally:
        slo_proc.terminate()
        slo_proc.wait(20)
    assert "forbidden" not in slo_log.read_text().lower(), slo_log.read_text()[-8000:]

    # nothing refused
    users = {sa_user(MANAGER_SA), sa_user(SLO_API_SA)}
    # a 403 on new content in a namespace being deleted (an earlier test's, terminating or gone by
    # now) is the namespace lifecycle admission refusing it, not RBAC: only Active namespaces count
    active = _active_namespaces(cluster)
    refused = [f"{e.get('verb')} {e.get('requestURI')} -> 403" for e in audit.events(since)
               if (e.get("user") or {}).get("username") in users
               and (e.get("responseStatus") or {}).get("code") == 403
               and _namespace_of(str(e.get("requestURI") or "")) in active | {None}]
    assert refused == [], refused
    # the same for the log: a refusal about a namespace that is gone or going (an earlier test's
    # scaler the manager still saw, e.g. its bearer-token Secret informer) is not this install's
    forbidden = [line for line in m.output(tail=2_000_000).splitlines()
                 if "forbidden" in line.lower() and _about_active(line, active)]
    assert forbidden == [], "\n".join(forbidden[-20:])
    assert m.alive(), m.output()

    # the memory request of the base holds this manager (docs/performance.md has the fleet sizes)
    hwm = _vm_hwm_mb(m.proc.pid)
    sys.stderr.write(f"\n[install] manager VmHWM {hwm:.0f} MB\n")
    assert hwm < _memory_request_mb(objs, "escaler-manager"), hwm


@pytest.mark.parametrize("sa", [MANAGER_SA, SLO_API_SA])
def test_can_i_list_shows_no_wildcard(cluster: Cluster, installed: list[dict[str, Any]], namespace: str,
                                      sa: str) -> None:
    for ns in (NS, namespace):
        rows = _can_i_list(cluster, sa_user(sa), ns)
        assert _wildcards(rows) == [], rows
    rows = {r["Resources"]: r["Verbs"] for r in _can_i_list(cluster, sa_user(sa), NS)}
    if sa == MANAGER_SA:  # what it was granted is there (the table is not empty for a wrong reason)
        assert rows["leases.coordination.k8s.io"] == "[get create update list watch]", rows
        assert "update" in rows["deployments.apps/scale"], rows
        assert rows[f"{METRIC}.external.metrics.k8s.io"] == "[get list]", rows
    else:
        assert rows["llmslorequirements.llm.escaler.io"] == "[list watch patch]", rows
        assert "leases.coordination.k8s.io" not in rows and "deployments.apps/scale" not in rows



# where a log line names a namespace: ns=NAME, namespace "NAME" (also JSON-escaped or as a JSON
# field), in namespace NAME, /namespaces/NAME/
_NAMESPACE_IN_LOG = re.compile(
    r'ns=([a-z0-9-]+)|namespace\W{1,5}([a-z0-9][a-z0-9-]*)|/namespaces/([a-z0-9-]+)/')


def _about_active(line: str, active: set[str | None]) -> bool:
    """True when ``line`` names no namespace or at least one Active namespace."""
    named = {ns for found in _NAMESPACE_IN_LOG.findall(line) for ns in found if ns}
    return not named or bool(named & active)


def _namespace_of(uri: str) -> str | None:
    """The namespace of a request URI (``.../namespaces/<ns>/...``), None for a cluster-scoped one."""
    parts = uri.split("?", 1)[0].split("/")
    return parts[parts.index("namespaces") + 1] if "namespaces" in parts[:-1] else None


def _active_namespaces(cluster: Cluster) -> set[str | None]:
    """Namespaces in phase Active now (not being deleted, not gone)."""
    listed = cluster.kubectl_json("get", "namespaces")
    return {str(n["metadata"]["name"]) for n in listed.get("items", [])
            if (n.get("status") or {}).get("phase") == "Active"}


def _helm_binary() -> str:
    """helm from hack/build.sh (built and cached like the control plane's binaries)."""
    out = subprocess.run(["bash", str(ROOT / "hack" / "build.sh"), "--print", "helm"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)["helm"]


def _helm_template(namespace: str, *sets: str) -> str:
    flags = [a for s in sets for a in ("--set", s)]
    r = subprocess.run([_helm_binary(), "template", "escaler", str(ROOT / "charts" / "escaler"),
                        "--namespace", namespace, *flags], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


CHART_SETS = {"chart": (),
              "chart-webhook": ("webhook.enabled=true", "manager.podDisruptionBudget.enabled=true")}


@pytest.mark.parametrize("what", ["overlays/dev", "overlays/production", *CHART_SETS])
def test_the_overlays_and_the_chart_pass_the_api_servers_validation(
        cluster: Cluster, installed: list[dict[str, Any]], namespace: str, what: str) -> None:
    """A server-side dry run: every object of the overlays and of the chart (defaults, and webhook
    plus PDB on) is valid for the API server, and the namespace's Pod Security admission (which
    warns on a Deployment whose pods would violate "restricted") has nothing to say. The chart goes
    into a namespace of its own (its Deployments' selectors carry the release, the base's do not)."""
    apply = [cluster.kubectl_bin, f"--kubeconfig={cluster.kubeconfig}", "apply", "--server-side",
             "--force-conflicts", "--dry-run=server"]
    if what.startswith("overlays/"):
        r = subprocess.run([*apply, "-k", str(ROOT / "manifests" / what)], capture_output=True, text=True,
                           timeout=120)
    else:
        cluster.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted",
                        "pod-security.kubernetes.io/warn=restricted")
        r = subprocess.run([*apply, "-f", "-"], input=_helm_template(namespace, *CHART_SETS[what]),
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "deployment.apps/escaler-manager serverside-applied (server dry run)" in r.stdout, r.stdout
    assert "PodSecurity" not in r.stderr, r.stderr


def test_the_chart_installs_and_uninstalls(cluster: Cluster, installed: list[dict[str, Any]],
                                           namespace: str) -> None:
    """``helm install --wait`` of the chart (another release name, so its cluster-scoped objects do
    not meet the base's): every object is created, the Deployments become available (kwok runs the
    pods), its ServiceAccounts have no wildcard, and ``helm uninstall`` removes it."""
    helm = [_helm_binary(), f"--kubeconfig={cluster.kubeconfig}", "--namespace", namespace]
    release = "e2e-escaler"
    r = subprocess.run([*helm, "install", release, str(ROOT / "charts" / "escaler"), "--wait",
                        "--timeout", "120s"], capture_output=True, text=True, timeout=180)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        assert "STATUS: deployed" in r.stdout, r.stdout
        for dep in (f"{release}-manager", f"{release}-slo-api"):
            status = cluster.kubectl_json("get", "deployment", dep, "-n", namespace)["status"]
            assert status.get("availableReplicas") == status.get("replicas"), (dep, status)
        for sa in (f"{release}-manager", f"{release}-slo-api"):
            rows = _can_i_list(cluster, f"system:serviceaccount:{namespace}:{sa}", namespace)
            assert _wildcards(rows) == [], rows
            assert any(r["Resources"].endswith(".llm.escaler.io") for r in rows), rows
    finally:
        u = subprocess.run([*helm, "uninstall", release, "--wait", "--timeout", "120s"], capture_output=True,
                           text=True, timeout=180)
    assert u.returncode == 0, u.stderr
    assert not cluster.kubectl("get", "clusterrole", f"{release}-manager", "--ignore-not-found", "-o", "name")
