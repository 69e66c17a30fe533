"""0 GETs per reconcile on a real API server, for a target of a ``/scale``-only CRD (issue 10,
"Goals": "read the object from a cache, write through /scale").

A CRD ``Sizer`` declares ``subresources.scale`` with non-default paths (``.spec.size``,
``.status.size``, ``.status.selector``) and has no escaler handler. One MetricsTrigger scaler
(ExternalServer, apa, a 2 s poll) targets a Sizer:

* a metric step is written through ``PUT .../sizers/<name>/scale`` (audit log, the manager's user)
  and lands in ``.spec.size`` — the counts the scaler reports come from the CRD's paths;
* after that, over several poll intervals, the manager makes **no** ``GET .../scale``: the
  kube-apiserver's own ``apiserver_request_total{verb="GET",resource="sizers",subresource="scale"}``
  does not move (the test itself never reads ``/scale``);
* the fake Prometheus (HTTP/1.1 keep-alive) sees its queries arrive on one or two connections,
  not one connection per query.

Fails on fec3229: the generic handler GETs ``/scale`` on every poll (and its outbound client sends
``Connection: close``, one connection per query).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually
from .es_helpers import POLL, QUICK, AuditLog, apply, es, scaler, seen_scale_writes, start_manager, wait_cond

GROUP = "e2e-reads.example.com"
PLURAL = "sizers"
POLL_SECONDS = float(POLL.rstrip("s"))
# answered whatever the namespace in it (the test's own; confinement needs the matcher)
QUERY = re.compile(r'sum\(load\{namespace="[a-z0-9-]+"\}\)')


class Prom:
    """``/api/v1/query`` over HTTP/1.1 keep-alive on 127.0.0.1; counts queries and connections."""

    def __init__(self) -> None:
        self.value = 20.0
        self.queries = 0
        self.connections = 0
        mu = threading.Lock()
        owner = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with mu:
                    owner.connections += 1

            def do_GET(self) -> None:
                params = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                with mu:
                    owner.queries += 1
                    value = owner.value
                result = [{"metric": {}, "value": [time.time(), repr(value)]}] \
                    if QUERY.fullmatch((params.get("query") or [""])[0]) else []
                body = json.dumps({"status": "success",
                                   "data": {"resultType": "vector", "result": result}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def prom() -> Iterator[Prom]:
    p = Prom()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def sizer_crd(cluster: Cluster) -> Iterator[None]:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    cluster.apply({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"plural": PLURAL, "singular": "sizer", "kind": "Sizer"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": schema},
                               "subresources": {"status": {}, "scale": {
                                   "specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size",
                                   "labelSelectorPath": ".status.selector"}}}]}})
    eventually(lambda: PLURAL in cluster.kubectl("api-resources", f"--api-group={GROUP}", "-o", "name",
                                                 check=False), what="the Sizer CRD served")
    yield
    cluster.kubectl("delete", "crd", f"{PLURAL}.{GROUP}", "--wait=false", check=False)


def scale_gets(cluster: Cluster) -> float:
    """kube-apiserver's count of GETs of sizers/scale (every client; the test makes none)."""
    total = 0.0
    pattern = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")
    for line in cluster.kubectl("get", "--raw", "/metrics").splitlines():
        m = pattern.match(line)
        if m and 'resource="sizers"' in m.group(1) and 'subresource="scale"' in m.group(1) \
                and 'verb="GET"' in m.group(1):
            total += float(m.group(2))
    return total


def size(cluster: Cluster, ns: str) -> int:
    return int(cluster.kubectl_json("get", f"{PLURAL}.{GROUP}", "pool", "-n", ns)["spec"]["size"])


def test_a_scale_only_crd_target_is_read_from_the_cache_and_written_through_scale(
        cluster: Cluster, namespace: str, sizer_crd: None, prom: Prom, tmp_path: Path,
        managers: list[Any]) -> None:
    apply(cluster, namespace, {"apiVersion": f"{GROUP}/v1", "kind": "Sizer", "metadata": {"name": "pool"},
                               "spec": {"size": 2}})
    cluster.kubectl("patch", f"{PLURAL}.{GROUP}", "pool", "-n", namespace, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {"size": 2, "selector": "app=pool"}}))
    metric = {"type": "ExternalServer", "externalServer": {
        "endpoint": prom.url, "query": f'sum(load{{namespace="{namespace}"}})', "timeoutSeconds": 5,
        "target": {"type": "Value", "value": "10"}}}
    obj = scaler("es", "pool", {"type": "MetricsTrigger",
                                "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [metric]}},
                 kind="Sizer", annotations=QUICK)
    obj["spec"]["targetRef"]["apiVersion"] = f"{GROUP}/v1"
    apply(cluster, namespace, obj)
    mgr = start_manager(cluster, tmp_path, user="escaler-cached-reads", api=False,
                        namespace=namespace)
    managers.append(mgr)
    audit = AuditLog.of(cluster)
    wait_cond(cluster, namespace, "es", "ScalingActive", "True", "MetricsAvailable", timeout=60)
    assert es(cluster, namespace, "es")["status"].get("currentReplicas") == 2  # .status.size

    prom.value = 40.0  # 40 / 10 → 4
    eventually(lambda: size(cluster, namespace) == 4, timeout=30, what="Sizer scaled to 4")
    writes = seen_scale_writes(audit, mgr.user, namespace, "pool", resource=PLURAL)
    assert writes and all(ev["objectRef"].get("subresource") == "scale" for ev in writes), writes

    # steady state: several polls, no GET of /scale by anyone
    time.sleep(POLL_SECONDS)  # the write's own follow-up sync
    before, queries_before = scale_gets(cluster), prom.queries
    time.sleep(4 * POLL_SECONDS)
    after = scale_gets(cluster)
    polled = prom.queries - queries_before
    note = (f"GET sizers/scale during {4 * POLL_SECONDS:g}s of polls: {after - before:g} "
            f"({polled} queries; {prom.queries} queries on {prom.connections} connections in all)")
    print(f"\n[cached reads] {note}")
    assert polled >= 2, f"the scaler was not polled: {note}\n{mgr.output()}"
    assert after == before, f"the manager GETs /scale in the steady state: {note}"
    assert prom.connections <= 2, f"no keep-alive: {note}"
    assert mgr.alive(), mgr.output()
