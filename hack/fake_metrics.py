#!/usr/bin/env python3
"""Fake metric backends for the e2e tests and the demo, scriptable from a test.

* ``MetricsAPIServer``: one HTTPS server answering the three aggregated metrics APIs —
  ``metrics.k8s.io/v1beta1`` (pod and node usage), ``custom.metrics.k8s.io/v1beta2`` (per-pod and
  per-object metrics) and ``external.metrics.k8s.io/v1beta1`` — registered in the real API server
  as APIServices whose Service is an ``ExternalName`` to ``localhost`` (see
  ``apiservice_manifests``). Clients, the HPA controller included, reach it only through the
  API server, exactly as they would reach metrics-server or a Prometheus adapter in production.
* ``PrometheusServer``: a Prometheus-compatible ``/api/v1/query`` endpoint over plain HTTP.

Scripting: ``set_pod_usage`` / ``set_custom`` / ``set_external`` / ``PrometheusServer.set``
change answers at once; ``fail(...)`` scripts an error answer (``PrometheusServer.fail_raw``: any
raw bytes, e.g. malformed JSON or a proxy's HTML page; ``delay``: a slow answer). Pods are
found through the real API server (``pod_lister``), so pod metrics follow a Deployment's real
pods. Benchmarks of a fleet set ``PrometheusServer.value_fn`` /
``MetricsAPIServer.external_fn`` (answers computed per query), ``record=False`` (count
requests, keep none) and ``keep_alive=True`` (HTTP/1.1).

Shared by parallel test workers: the APIServices can point at one server only, so when the e2e
suite runs on several workers (pytest-xdist, docs/testing.md) the controller process serves one
``MetricsAPIServer`` and each worker scripts it through ``MetricsAPIClient``, which has the same
scripting methods and sends them as ``POST /_control/<method>`` (JSON arguments) on the same
port. The control paths take only the scripting methods (``CONTROL_METHODS``) and are answered
only to a caller presenting this server's own control token (``control_token``, handed to the
workers in the environment), so the API server's aggregator, which forwards user requests here,
can never reach them.

Standard library only; ``python hack/fake_metrics.py --help`` runs both for the demo.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import secrets
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SERVICE_NAMESPACE = "escaler-metrics"
SERVICE_NAME = "fake-metrics"

PodLister = Callable[[str, str], list[dict[str, Any]]]  # (namespace, labelSelector) -> pods

# what MetricsAPIClient may call on the shared server; "requests" reads the recorded paths
CONTROL_METHODS = ("set_pod_usage", "set_custom", "set_external", "fail", "heal", "requests")
CONTROL_PREFIX = "/_control/"
CONTROL_TOKEN_HEADER = "X-Escaler-Control-Token"
# a control call's arguments are a few numbers and names
MAX_CONTROL_BODY = 64 * 1024


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity(v: float) -> str:
    """A Kubernetes quantity string for ``v`` (milli-units when fractional)."""
    if float(v).is_integer():
        return str(int(v))
    return f"{round(v * 1000)}m"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


@dataclass
class _Failure:
    status: int
    body: str


def _resource_list(group_version: str, resources: list[tuple[str, str, bool]]) -> dict[str, Any]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": [{"name": n, "singularName": "", "namespaced": ns, "kind": k,
                           "verbs": ["get", "list"]} for n, k, ns in resources]}


@dataclass
class MetricsAPIServer:
    """Answers metrics.k8s.io, custom.metrics.k8s.io and external.metrics.k8s.io."""

    cert_file: Path
    key_file: Path
    pod_lister: PodLister
    host: str = "127.0.0.1"
    port: int = 0
    # (namespace, pod) -> {"cpu": cores, "memory": bytes}; "*" as pod = default for the namespace
    pod_usage: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    # (namespace, metric) -> per-pod value (custom.metrics.k8s.io, pods/*)
    custom_pod: dict[tuple[str, str], float] = field(default_factory=dict)
    # (namespace, resource, name, metric) -> value (custom.metrics.k8s.io, one object)
    custom_object: dict[tuple[str, str, str, str], float] = field(default_factory=dict)
    # (namespace, metric) -> list of values (external.metrics.k8s.io)
    external: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # API group -> scripted failure for every request to it
    failures: dict[str, _Failure] = field(default_factory=dict)
    # request paths seen, for assertions
    requests: list[str] = field(default_factory=list)
    # (namespace, metric) -> value for external metrics not in ``external`` (benchmarks: a fleet of
    # series computed on the fly); None = not found
    external_fn: Callable[[str, str], float | None] | None = None
    # False: do not keep ``requests`` (a long benchmark), only count them in ``request_count``
    record: bool = True
    request_count: int = 0
    # HTTP/1.1 with keep-alive (the API server's aggregator reuses connections)
    keep_alive: bool = False
    # the secret a MetricsAPIClient presents on control calls
    control_token: str = field(default_factory=lambda: secrets.token_hex(16))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: _Server | None = None

    def set_pod_usage(self, namespace: str, pod: str = "*", cpu: float = 0.0, memory: float = 0.0) -> None:
        with self._lock:
            self.pod_usage[(namespace, pod)] = {"cpu": cpu, "memory": memory}

    def set_custom(self, namespace: str, metric: str, value: float) -> None:
        with self._lock:
            self.custom_pod[(namespace, metric)] = value

    def set_external(self, namespace: str, metric: str, *values: float) -> None:
        with self._lock:
            self.external[(namespace, metric)] = list(values)

    def fail(self, group: str, status: int = 503, body: str = "backend unavailable") -> None:
        with self._lock:
            self.failures[group] = _Failure(status, body)

    def heal(self, group: str | None = None) -> None:
        with self._lock:
            if group is None:
                self.failures.clear()
            else:
                self.failures.pop(group, None)

    def control(self, method: str, args: list[Any]) -> tuple[int, Any]:
        """One scripting call from a ``MetricsAPIClient`` (another test worker)."""
        if method not in CONTROL_METHODS:
            known = ", ".join(CONTROL_METHODS)
            return 404, _status(404, f"unknown control method {method!r}; known: {known}")
        if method == "requests":
            with self._lock:
                return 200, list(self.requests)
        try:
            getattr(self, method)(*args)
        except TypeError as e:
            return 400, _status(400, f"{method}: {e}")
        return 200, {}

    # --- answers ------------------------------------------------------------------------------

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        with self._lock:
            self.request_count += 1
            if self.record:
                self.requests.append(path)
        m = re.match(r"^/apis/([^/]+)/([^/]+)(/.*)?$", path)
        if path in ("/apis", "/api"):
            return 404, _status(404, "not served here")
        if not m:
            return 404, _status(404, f"no route for {path}")
        group, version, rest = m.group(1), m.group(2), m.group(3) or ""
        with self._lock:
            fail = self.failures.get(group)
        if fail and rest:
            return fail.status, _status(fail.status, fail.body)
        selector = query.get("labelSelector", "")
        if group == "metrics.k8s.io":
            if not rest:
                return 200, _resource_list(f"{group}/{version}", [("pods", "PodMetrics", True),
                                                                  ("nodes", "NodeMetrics", False)])
            pm = re.match(r"^/namespaces/([^/]+)/pods(?:/([^/]+))?$", rest)
            if pm:
                return 200, self._pod_metrics(pm.group(1), pm.group(2), selector, version)
            if rest.startswith("/nodes"):
                return 200, {"kind": "NodeMetricsList", "apiVersion": f"{group}/{version}",
                             "metadata": {}, "items": []}
        if group == "custom.metrics.k8s.io":
            if not rest:
                return 200, _resource_list(f"{group}/{version}", [("pods/*", "MetricValueList", True)])
            cm = re.match(r"^/namespaces/([^/]+)/pods/\*/([^/]+)$", rest)
            if cm:
                return 200, self._custom_pods(cm.group(1), cm.group(2), selector, version)
            om = re.match(r"^/namespaces/([^/]+)/([^/]+)/([^/*]+)/([^/]+)$", rest)
            if om:
                return self._custom_object(*om.groups(), version=version)
        if group == "external.metrics.k8s.io":
            if not rest:
                return 200, _resource_list(f"{group}/{version}", [("*", "ExternalMetricValueList", True)])
            em = re.match(r"^/namespaces/([^/]+)/([^/]+)$", rest)
            if em:
                ns, metric = em.groups()
                with self._lock:
                    values = self.external.get((ns, metric))
                if values is None and self.external_fn is not None:
                    v = self.external_fn(ns, metric)
                    values = None if v is None else [v]
                if values is None:
                    return 404, _status(404, f"external metric {metric} not found in {ns}")
                return 200, {"kind": "ExternalMetricValueList", "apiVersion": f"{group}/{version}",
                             "metadata": {}, "items": [
                                 {"metricName": metric, "metricLabels": {}, "timestamp": _now(),
                                  "value": _quantity(v)} for v in values]}
        return 404, _status(404, f"no route for {path}")

    def _pods(self, ns: str, selector: str) -> list[dict[str, Any]]:
        return [p for p in self.pod_lister(ns, selector)
                if (p.get("status") or {}).get("phase") == "Running"]

    def _pod_metrics(self, ns: str, name: str | None, selector: str, version: str) -> dict[str, Any]:
        items = []
        for pod in self._pods(ns, selector):
            pname = pod["metadata"]["name"]
            if name and pname != name:
                continue
            with self._lock:
                usage = self.pod_usage.get((ns, pname)) or self.pod_usage.get((ns, "*"))
            if usage is None:
                continue
            containers = [{"name": c["name"], "usage": {
                "cpu": f"{round(usage['cpu'] * 1000)}m", "memory": str(int(usage["memory"]))}}
                for c in pod["spec"]["containers"]]
            items.append({"metadata": {"name": pname, "namespace": ns,
                                       "labels": pod["metadata"].get("labels", {})},
                          "timestamp": _now(), "window": "30s", "containers": containers})
        return {"kind": "PodMetricsList", "apiVersion": f"metrics.k8s.io/{version}",
                "metadata": {}, "items": items}

    def _custom_pods(self, ns: str, metric: str, selector: str, version: str) -> dict[str, Any]:
        with self._lock:
            value = self.custom_pod.get((ns, metric))
        items = []
        if value is not None:
            for pod in self._pods(ns, selector):
                items.append({"describedObject": {"kind": "Pod", "namespace": ns,
                                                  "name": pod["metadata"]["name"], "apiVersion": "/v1"},
                              "metric": {"name": metric, "selector": None}, "timestamp": _now(),
                              "value": _quantity(value)})
        return {"kind": "MetricValueList", "apiVersion": f"custom.metrics.k8s.io/{version}",
                "metadata": {}, "items": items}

    def _custom_object(self, ns: str, resource: str, name: str, metric: str,
                       version: str) -> tuple[int, Any]:
        with self._lock:
            value = self.custom_object.get((ns, resource, name, metric))
        if value is None:
            return 404, _status(404, f"custom metric {metric} for {resource}/{name} not found")
        return 200, {"kind": "MetricValueList", "apiVersion": f"custom.metrics.k8s.io/{version}",
                     "metadata": {}, "items": [{
                         "describedObject": {"kind": resource, "namespace": ns, "name": name},
                         "metric": {"name": metric, "selector": None}, "timestamp": _now(),
                         "value": _quantity(value)}]}

    # --- serving ------------------------------------------------------------------------------

    def start(self) -> MetricsAPIServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if owner.keep_alive else "HTTP/1.0"

            def do_GET(self) -> None:
                u = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(u.query))
                code, body = owner.answer(urllib.parse.unquote(u.path), q)
                _send(self, code, body)

            def do_POST(self) -> None:
                u = urllib.parse.urlsplit(self.path)
                size = int(self.headers.get("Content-Length") or 0)
                if (not u.path.startswith(CONTROL_PREFIX) or size > MAX_CONTROL_BODY
                        or not secrets.compare_digest(self.headers.get(CONTROL_TOKEN_HEADER, ""),
                                                      owner.control_token)):
                    _send(self, 404, _status(404, "not found"))
                    return
                try:
                    args = json.loads(self.rfile.read(size) or b"[]")
                except ValueError as e:
                    _send(self, 400, _status(400, f"control body is not JSON: {e}"))
                    return
                if not isinstance(args, list):
                    _send(self, 400, _status(400, "control body must be a JSON list of arguments"))
                    return
                code, body = owner.control(u.path[len(CONTROL_PREFIX):], args)
                _send(self, code, body)

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = _Server((self.host, self.port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.port = int(self._httpd.server_address[1])
        threading.Thread(target=self._httpd.serve_forever, name="fake-metrics", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()


@dataclass
class MetricsAPIClient:
    """Scripts a ``MetricsAPIServer`` served by another process (the parallel e2e tier's shared
    server): the same scripting methods, each one ``POST /_control/<method>``."""

    port: int
    token: str
    ca_file: Path
    host: str = "127.0.0.1"

    def _call(self, method: str, *args: Any) -> Any:
        import http.client

        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.check_hostname = False  # the serving certificate names the ExternalName service
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=10, context=ctx)
        try:
            conn.request("POST", CONTROL_PREFIX + method, body=json.dumps(list(args)),
                         headers={CONTROL_TOKEN_HEADER: self.token, "Content-Type": "application/json"})
            r = conn.getresponse()
            body = json.loads(r.read() or b"null")
        finally:
            conn.close()
        if r.status != 200:
            raise RuntimeError(f"fake metrics control {method}{args}: HTTP {r.status}: {body}")
        return body

    def set_pod_usage(self, namespace: str, pod: str = "*", cpu: float = 0.0, memory: float = 0.0) -> None:
        self._call("set_pod_usage", namespace, pod, cpu, memory)

    def set_custom(self, namespace: str, metric: str, value: float) -> None:
        self._call("set_custom", namespace, metric, value)

    def set_external(self, namespace: str, metric: str, *values: float) -> None:
        self._call("set_external", namespace, metric, *values)

    def fail(self, group: str, status: int = 503, body: str = "backend unavailable") -> None:
        self._call("fail", group, status, body)

    def heal(self, group: str | None = None) -> None:
        self._call("heal", group)

    @property
    def requests(self) -> list[str]:
        return list(self._call("requests"))


def apiservice_manifests(port: int, ca_bundle_pem: bytes) -> list[dict[str, Any]]:
    """Namespace, ExternalName Service to localhost, and the three APIServices."""
    ca = base64.b64encode(ca_bundle_pem).decode()
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SERVICE_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": SERVICE_NAME, "namespace": SERVICE_NAMESPACE},
         "spec": {"type": "ExternalName", "externalName": "localhost",
                  "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}},
    ]
    for group, version in (("metrics.k8s.io", "v1beta1"), ("custom.metrics.k8s.io", "v1beta2"),
                           ("external.metrics.k8s.io", "v1beta1")):
        docs.append({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": f"{version}.{group}"},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
                     "versionPriority": 100, "caBundle": ca,
                     "service": {"namespace": SERVICE_NAMESPACE, "name": SERVICE_NAME, "port": port}},
        })
    return docs


@dataclass
class PrometheusServer:
    """A Prometheus-compatible ``/api/v1/query`` over HTTP; answers are scripted per query."""

    host: str = "127.0.0.1"
    port: int = 0
    # query string -> value (a vector of one sample) or list of (labels, value) samples
    answers: dict[str, float | list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    # when set, every query gets this (status, body)
    failure: _Failure | None = None
    # seconds to stall before answering (timeouts)
    delay: float = 0.0
    # when set, every query gets these raw bytes as (status, content type, body): malformed JSON,
    # an HTML error page of a proxy, ... (``fail_raw``; ``heal`` clears it)
    raw: tuple[int, str, bytes] | None = None
    # when set, a query without "Authorization: Bearer <required_token>" is answered 401
    required_token: str | None = None
    # queries seen
    queries: list[str] = field(default_factory=list)
    # query -> value for queries not in ``answers`` (benchmarks: a fleet of series computed on the
    # fly, e.g. with noise); None = empty result
    value_fn: Callable[[str], float | None] | None = None
    # False: do not keep ``queries`` (a long benchmark), only count them in ``query_count``
    record: bool = True
    query_count: int = 0
    # HTTP/1.1 with keep-alive (a client that reuses its connection)
    keep_alive: bool = False
    # a serving pair: set, it serves HTTPS (a bearer token is only ever sent over https)
    cert_file: Path | None = None
    key_file: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: _Server | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.cert_file else 'http'}://{self.host}:{self.port}"

    def set(self, query: str, value: float | list[tuple[dict[str, str], float]]) -> None:
        with self._lock:
            self.answers[query] = value

    def fail(self, status: int = 503, body: str = "prometheus unavailable") -> None:
        with self._lock:
            self.failure = _Failure(status, body)

    def fail_raw(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        with self._lock:
            self.raw = (status, content_type, body)

    def heal(self) -> None:
        with self._lock:
            self.failure = None
            self.raw = None

    def answer(self, query: str) -> tuple[int, Any]:
        with self._lock:
            self.query_count += 1
            if self.record:
                self.queries.append(query)
            failure, value, delay = self.failure, self.answers.get(query), self.delay
        if value is None and self.value_fn is not None:
            value = self.value_fn(query)
        if delay:
            time.sleep(delay)
        if failure:
            return failure.status, {"status": "error", "errorType": "unavailable", "error": failure.body}
        ts = time.time()
        if value is None:
            result: list[dict[str, Any]] = []
        elif isinstance(value, list):
            result = [{"metric": labels, "value": [ts, repr(float(v))]} for labels, v in value]
        else:
            result = [{"metric": {}, "value": [ts, repr(float(value))]}]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}

    def start(self) -> PrometheusServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if owner.keep_alive else "HTTP/1.0"

            def _query(self, params: dict[str, str]) -> None:
                if urllib.parse.urlsplit(self.path).path != "/api/v1/query":
                    _send(self, 404, {"status": "error", "error": "not found"})
                    return
                want = owner.required_token
                if want is not None and self.headers.get("Authorization") != f"Bearer {want}":
                    _send(self, 401, {"status": "error", "errorType": "unauthorized",
                                      "error": "missing or wrong bearer token"})
                    return
                with owner._lock:
                    raw = owner.raw
                if raw is not None:
                    owner.answer(params.get("query", ""))  # counted, recorded and delayed as any query
                    _send_raw(self, *raw)
                    return
                code, body = owner.answer(params.get("query", ""))
                _send(self, code, body)

            def do_GET(self) -> None:
                self._query(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query)))

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self._query(dict(urllib.parse.parse_qsl(self.rfile.read(n).decode())))

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = _Server((self.host, self.port), Handler)
        if self.cert_file is not None and self.key_file is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
            self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.port = int(self._httpd.server_address[1])
        threading.Thread(target=self._httpd.serve_forever, name="fake-prometheus", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()


def _status(code: int, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": message,
            "reason": "NotFound" if code == 404 else "ServiceUnavailable"}


def _send(h: BaseHTTPRequestHandler, code: int, body: Any) -> None:
    data = json.dumps(body).encode()
    h.send_response(code)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _send_raw(h: BaseHTTPRequestHandler, code: int, content_type: str, data: bytes) -> None:
    h.send_response(code)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def kubectl_pod_lister(kubectl: str, kubeconfig: str) -> PodLister:
    import subprocess

    def lister(ns: str, selector: str) -> list[dict[str, Any]]:
        args = [kubectl, f"--kubeconfig={kubeconfig}", "get", "pods", "-n", ns, "-o", "json"]
        if selector:
            args += ["-l", selector]
        r = subprocess.run(args, capture_output=True, text=True, check=False)
        return list(json.loads(r.stdout).get("items", [])) if r.returncode == 0 else []

    return lister


def main() -> int:
    ap = argparse.ArgumentParser(description="Serve the fake metric backends (demo).")
    ap.add_argument("--cluster-dir", required=True, help="work directory of hack/cluster.py")
    ap.add_argument("--prometheus-port", type=int, default=9090)
    args = ap.parse_args()
    import subprocess
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    from cluster import binaries

    d = Path(args.cluster_dir)
    kubectl, kc = binaries()["kubectl"], str(d / "admin.kubeconfig")
    srv = MetricsAPIServer(d / "pki/metrics-server.crt", d / "pki/metrics-server.key",
                           kubectl_pod_lister(kubectl, kc)).start()
    prom = PrometheusServer(port=args.prometheus_port).start()
    docs = {"apiVersion": "v1", "kind": "List",
            "items": apiservice_manifests(srv.port, (d / "pki/ca.crt").read_bytes())}
    subprocess.run([kubectl, f"--kubeconfig={kc}", "apply", "-f", "-"], input=json.dumps(docs),
                   text=True, check=True)
    print(f"metrics APIs on :{srv.port}, prometheus on {prom.url}", flush=True)
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
