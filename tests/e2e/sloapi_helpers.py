"""Helpers of the SLO API e2e tests (``test_sloapi*.py``).

* ``start_slo_api``: ``python -m escaler slo-api`` as a subprocess, as a user runs it, running as
  its own client-certificate user bound to exactly the shipped ClusterRole of
  ``manifests/rbac/slo-api.yaml`` (so a rule missing there fails the tests), waiting for
  ``/readyz``; stopped by the ``slo_apis`` fixture of each test module.
* Builders for the two SLO kinds, ``sa_token`` (``kubectl create token --audience escaler``),
  ``slo_api_token`` (the SLO API's audience, ``escaler-slo-api``),
  ``bind_owner`` (the shipped ``escaler-slo-owner`` ClusterRole bound in one namespace).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from .conftest import ROOT, Cluster, eventually, source_dir
from .webhook import free_port

# the audience the SLO API's tokens are issued for (docs/sloapi.md), not the manager API's "escaler"
SLO_API_AUDIENCE = "escaler-slo-api"

USER = "escaler-slo-api"
GROUP = "escaler:slo-api"
RBAC = "rbac.authorization.k8s.io"
API_VERSION = "llm.escaler.io/v1alpha1"
# written for namespace default, as the shipped samples (tenant PromQL names its namespace; where a
# manager or its webhook reads them elsewhere, webhook.in_namespace rewrites the matcher)
PROMQL_TTFT = ('histogram_quantile(0.9, sum by (le) '
               '(rate(ttft_ms_bucket{namespace="default",svc="chat-llama"}[1m])))')
PROMQL_OTPS = 'avg(otps{namespace="default",svc="chat-llama"})'
PROMQL_QUEUE = 'sum(queue_depth{namespace="default",svc="batch-embed"})'


@dataclass
class SLOApi:
    proc: subprocess.Popen[bytes]
    log: Path
    url: str

    def output(self, tail: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-tail:] if self.log.exists() else ""

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def call(self, method: str, path: str, *, token: str | None = None, **kwargs: Any) -> requests.Response:
        headers = dict(kwargs.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return requests.request(method, self.url + path, headers=headers, timeout=30, **kwargs)


def _manifests() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / "manifests" / "rbac" / "slo-api.yaml").read_text()) if d]


def _cluster_role(name: str) -> dict[str, Any]:
    for doc in _manifests():
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == name:
            return copy.deepcopy(doc)
    raise AssertionError(f"manifests/rbac/slo-api.yaml has no ClusterRole {name}")


def bind_slo_api(cluster: Cluster, suffix: str) -> None:
    """The shipped ``escaler-slo-api`` ClusterRole (renamed per test), bound to the SLO API's group."""
    role = _cluster_role("escaler-slo-api")
    name = f"escaler-slo-api-{suffix}"
    role["metadata"]["name"] = name
    binding = {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
               "subjects": [{"kind": "Group", "name": GROUP, "apiGroup": RBAC}],
               "roleRef": {"kind": "ClusterRole", "name": name, "apiGroup": RBAC}}
    cluster.apply([role, binding])


def bind_owner(cluster: Cluster, ns: str, sa: str) -> None:
    """The shipped ``escaler-slo-owner`` ClusterRole, bound to ServiceAccount ``sa`` in ``ns`` only."""
    role = _cluster_role("escaler-slo-owner")
    name = f"escaler-slo-owner-{ns}"
    role["metadata"]["name"] = name
    binding = {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
               "roleRef": {"kind": "ClusterRole", "name": name, "apiGroup": RBAC}}
    cluster.apply([role, binding])


def sa_token(cluster: Cluster, ns: str, sa: str, audience: str = "escaler") -> str:
    """A token of ServiceAccount ``sa`` for ``audience``: ``escaler`` (the manager's API) by default,
    ``SLO_API_AUDIENCE`` for the SLO API (``slo_api_token``)."""
    if not cluster.kubectl("get", "serviceaccount", sa, "-n", ns, "-o", "name", check=False).strip():
        cluster.kubectl("create", "serviceaccount", sa, "-n", ns)
    return cluster.kubectl("create", "token", sa, "-n", ns, "--audience", audience).strip()


def slo_api_token(cluster: Cluster, ns: str, sa: str) -> str:
    """A token of ServiceAccount ``sa`` for the SLO API's audience (``escaler-slo-api``)."""
    return sa_token(cluster, ns, sa, audience=SLO_API_AUDIENCE)


def start_slo_api(cluster: Cluster, work: Path, *, namespace: str, auth: str = "none",
                  wait_ready: bool = True) -> SLOApi:
    local = cluster.require_local()
    bind_slo_api(cluster, namespace or "all-namespaces")
    kubeconfig = local.user_kubeconfig(USER, (GROUP,))
    port = free_port()
    # namespace "": every namespace (a serial test: it sees the other tests' routes)
    args = [sys.executable, "-m", "escaler", "slo-api", f"--kubeconfig={kubeconfig}",
            f"--bind-address=127.0.0.1:{port}", f"--auth={auth}",
            *([f"--namespace={namespace}"] if namespace else []), "--log-format=json", "--log-level=debug"]
    src = source_dir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)}
    log = work / f"slo-api-{port}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(args, cwd=src, stdout=f, stderr=subprocess.STDOUT, env=env)
    api = SLOApi(proc, log, f"http://127.0.0.1:{port}")
    if wait_ready:
        wait_for_ready(api)
    return api


def wait_for_ready(api: SLOApi, timeout: float = 60.0) -> None:
    def ready() -> bool:
        if api.proc.poll() is not None:
            raise AssertionError(f"slo-api exited with {api.proc.returncode}:\n{api.output()}")
        try:
            return api.call("GET", "/readyz").status_code == 200
        except requests.ConnectionError:
            return False

    try:
        eventually(ready, timeout=timeout, what="slo-api /readyz 200")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nslo-api log:\n{api.output()}") from None


def llm_slo(name: str, sid: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "serviceId": sid, "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama"},
        "concurrencyPerReplica": 16,
        "ttft": {"targetMs": 800, "percentile": 90, "promql": PROMQL_TTFT},
        "otps": {"target": 20, "promql": PROMQL_OTPS},
        "bounds": {"min": {"type": "replica", "value": 1}, "max": {"type": "replica", "value": 8}},
    }
    body.update(spec)
    return {"apiVersion": API_VERSION, "kind": "LLMSLORequirement", "metadata": {"name": name},
            "spec": {k: v for k, v in body.items() if v is not None}}


def job_slo(name: str, sid: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "serviceId": sid, "queue": {"maxDepth": 200, "promql": PROMQL_QUEUE},
        "bounds": {"min": {"type": "concurrency", "value": 0}, "max": {"type": "replica", "value": 4}},
    }
    body.update(spec)
    return {"apiVersion": API_VERSION, "kind": "JobSLORequirement", "metadata": {"name": name},
            "spec": {k: v for k, v in body.items() if v is not None}}


def three_routes() -> list[dict[str, Any]]:
    """An aggregated LLM route, a PD-disaggregated one (pdengine bounds) and a job route."""
    return [llm_slo("chat-cr", "chat-llama"),
            llm_slo("pd-cr", "pd-llama", deployType="pd",
                    bounds={"min": {"type": "pdengine", "value": 1},
                            "max": {"type": "pdengine", "value": 4}}),
            job_slo("batch-cr", "batch-embed")]


def apply_in(cluster: Cluster, ns: str, *objs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def spec_of(cluster: Cluster, ns: str, plural: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", f"{plural}.llm.escaler.io", name, "-n", ns)["spec"])


def route_path(ns: str, route: str) -> str:
    """The SLO API path of a route: a serviceId within a namespace."""
    return f"/config/namespaces/{ns}/{route}"


def wait_route(api: SLOApi, ns: str, route: str, present: bool = True, token: str | None = None) -> None:
    def seen() -> bool:
        code = api.call("GET", route_path(ns, route), token=token).status_code
        return code != 404 if present else code == 404

    eventually(seen, timeout=30, what=f"route {route} {'indexed' if present else 'gone'}")


def wait_routes(api: SLOApi, n: int) -> list[dict[str, Any]]:
    def listed() -> list[dict[str, Any]] | None:
        resp = api.call("GET", "/config")
        assert resp.status_code == 200, f"GET /config: {resp.status_code} {resp.text}\n{api.output()}"
        routes: list[dict[str, Any]] = resp.json()["routes"]
        return routes if len(routes) == n else None

    return eventually(listed, timeout=30, what=f"{n} routes listed")  # type: ignore[no-any-return]

