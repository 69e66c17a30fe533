"""A small in-process imitation of the Kubernetes API server for the escaler.kube tests.

Real HTTP on 127.0.0.1 (http.server, HTTP/1.1, chunked watch streams), so the official client's
urllib3 pool, headers and timeouts are exercised for real. It serves discovery documents, a tiny
object store (namespaced and cluster-scoped core resources, apps/v1 Deployments with /scale, a CRD
with /scale and one without), Status bodies for errors, and scripted routes for anything else
(watch streams, stalls, faults). This module holds no tests; the test_kube_*.py modules import it.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from kubernetes.client import ApiClient, Configuration

from escaler.kube.config import new_api_client
from escaler.kube.rest import RestClient

# A stream step: bytes are sent as one chunk; STALL blocks until the server closes; DROP closes the
# connection without the terminating chunk.
STALL = "stall"
DROP = "drop"
# Reply(ABORT): close the connection without sending a response.
ABORT = 0


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                            "reason": reason, "message": message}
    if details:
        body["details"] = details
    return body


def _res(name: str, kind: str, namespaced: bool, *subs: str) -> list[dict[str, Any]]:
    out = [{"name": name, "kind": kind, "namespaced": namespaced, "verbs": ["get", "list", "watch"]}]
    for s in subs:
        out.append({"name": f"{name}/{s}", "kind": "Scale" if s == "scale" else kind,
                    "namespaced": namespaced, "verbs": ["get", "update", "patch"]})
    return out


def default_discovery() -> dict[str, dict[str, Any]]:
    def doc(gv: str, *resources: list[dict[str, Any]]) -> dict[str, Any]:
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": [r for rs in resources for r in rs]}

    return {
        "/api/v1": doc("v1", _res("pods", "Pod", True, "status"),
                       _res("namespaces", "Namespace", False, "status"),
                       _res("configmaps", "ConfigMap", True), _res("nodes", "Node", False, "status")),
        "/apis/apps/v1": doc("apps/v1", _res("deployments", "Deployment", True, "status", "scale"),
                             _res("statefulsets", "StatefulSet", True, "status", "scale")),
        "/apis/example.com/v1": doc("example.com/v1", _res("widgets", "Widget", True, "status", "scale"),
                                    _res("gadgets", "Gadget", True, "status")),
        "/apis/events.k8s.io/v1": doc("events.k8s.io/v1", _res("events", "Event", True)),
    }


@dataclass
class Req:
    method: str
    path: str
    query: list[tuple[str, str]]
    headers: dict[str, str]
    body: Any

    def q(self) -> dict[str, str]:
        return dict(self.query)


@dataclass
class Reply:
    status: int = 200
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stream:
    steps: Iterable[bytes | str]
    status: int = 200


def event_line(type_: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": type_, "object": obj}).encode() + b"\n"


Handler = Callable[[Req], "Reply | Stream"]


class FakeAPI:
    """The fake server; use as a context manager. Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.requests: list[Req] = []
        self.discovery = default_discovery()
        self.discovery_hits: Counter[str] = Counter()
        # (gv path, resource, namespace or "", name) -> object
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.rv = 100
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []
        # set on close: stalled handlers return
        self.release = threading.Event()
        api = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls between header and body writes

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                api._dispatch(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        # shutdown() waits for the serving loop's next poll: 5 ms, not 50, so closing the fake
        # does not cost every test that uses it 50 ms of idle time (~400 of them per run)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.005},
                                       daemon=True)
        self.clients: list[ApiClient] = []

    # -- lifecycle ------------------------------------------------------------------------------

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        for c in self.clients:
            c.close()
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def config(self) -> Configuration:
        return Configuration(host=self.url)

    def rest(self, **kw: Any) -> RestClient:
        client = new_api_client(self.config(), pool_size=8)
        self.clients.append(client)
        return RestClient(client, **kw)

    # -- scripting ------------------------------------------------------------------------------

    def on(self, method: str, path_regex: str, handler: Handler) -> None:
        """Route (method, full-match path regex) to ``handler``; newest routes win."""
        with self.lock:
            self.routes.insert(0, (method, re.compile(path_regex), handler))

    def reqs(self, method: str | None = None, path_prefix: str = "") -> list[Req]:
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r.method == method) and r.path.startswith(path_prefix)]

    def put_object(self, gv_path: str, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            md = obj.setdefault("metadata", {})
            self.rv += 1
            md["resourceVersion"] = str(self.rv)
            md.setdefault("uid", str(uuid.uuid4()))
            self.objects[(gv_path, resource, md.get("namespace", ""), md["name"])] = obj
            return copy.deepcopy(obj)

    def get_object(self, gv_path: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.objects[(gv_path, resource, namespace, name)])

    # -- serving --------------------------------------------------------------------------------

    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        req = Req(h.command, unquote(parts.path), parse_qsl(parts.query, keep_blank_values=True),
                  {k.lower(): v for k, v in h.headers.items()}, body)
        with self.lock:
            self.requests.append(req)
            routes = list(self.routes)
        reply: Reply | Stream | None = None
        try:
            for method, rx, handler in routes:
                if method == req.method and rx.fullmatch(req.path):
                    reply = handler(req)
                    break
            if reply is None:
                reply = self._builtin(req)
        except Exception as exc:  # a bug in a test handler: answer rather than hang the client
            reply = Reply(500, status(500, "InternalError", f"fake API: {type(exc).__name__}: {exc}"))
        try:
            if isinstance(reply, Stream):
                self._stream(h, reply)
            else:
                self._send(h, reply)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    def _send(self, h: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.status == ABORT:
            h.close_connection = True  # hang up without answering
            return
        data = reply.body if isinstance(reply.body, bytes) else (
            reply.body.encode() if isinstance(reply.body, str) else json.dumps(reply.body).encode())
        h.send_response(reply.status)
        h.send_header("Content-Type", reply.headers.get("Content-Type", "application/json"))
        for k, v in reply.headers.items():
            if k != "Content-Type":
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _stream(self, h: BaseHTTPRequestHandler, stream: Stream) -> None:
        h.send_response(stream.status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()
        for step in stream.steps:
            if step == STALL:
                self.release.wait(30)
                h.close_connection = True
                return
            if step == DROP:
                h.close_connection = True
                return
            assert isinstance(step, bytes)
            h.wfile.write(f"{len(step):x}\r\n".encode() + step + b"\r\n")
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    # -- the built-in API -----------------------------------------------------------------------

    def _builtin(self, req: Req) -> Reply:
        with self.lock:
            if req.path in self.discovery:
                self.discovery_hits[req.path] += 1
                if req.method != "GET":
                    return Reply(405, status(405, "MethodNotAllowed", "no"))
                return Reply(200, self.discovery[req.path])
            m = re.fullmatch(r"(/api/v1|/apis/[^/]+/[^/]+)(?:/(.*))?", req.path)
            if not m:
                return Reply(404, status(404, "NotFound", f"the server could not find {req.path}"))
            gv, rest = m.group(1), [unquote(s) for s in (m.group(2) or "").split("/") if s]
            doc = self.discovery.get(gv)
            if doc is None:
                return Reply(404, status(404, "NotFound", f"the server could not find {req.path}"))
            kinds = {r["name"]: r for r in doc["resources"]}
            ns = ""
            if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in kinds:
                ns, rest = rest[1], rest[2:]
            if not rest or rest[0] not in kinds:
                return Reply(404, status(404, "NotFound", f"the server could not find {req.path}"))
            rest += ["", ""]
            resource, name, sub = rest[0], rest[1], rest[2]
            if sub and f"{resource}/{sub}" not in kinds:
                return Reply(404, status(404, "NotFound", f"no subresource {sub}"))
            return self._crud(req, gv, doc, kinds[resource], ns, name, sub)

    def _crud(self, req: Req, gv: str, doc: dict[str, Any], res: dict[str, Any], ns: str, name: str,
              sub: str) -> Reply:
        resource, kind = res["name"], res["kind"]
        api_version = doc["groupVersion"]
        key = (gv, resource, ns, name)
        if not name:
            if req.method == "GET":
                return self._list(req, gv, api_version, resource, kind, ns)
            if req.method == "POST":
                obj = copy.deepcopy(req.body)
                oname = obj.get("metadata", {}).get("name", "")
                okey = (gv, resource, ns, oname)
                if okey in self.objects:
                    return Reply(409, status(409, "AlreadyExists", f'{resource} "{oname}" already exists'))
                obj.setdefault("metadata", {})["namespace"] = ns or None
                if not ns:
                    obj["metadata"].pop("namespace")
                obj.setdefault("apiVersion", api_version)
                obj.setdefault("kind", kind)
                return Reply(201, self.put_object(gv, resource, obj))
            return Reply(405, status(405, "MethodNotAllowed", "no"))
        cur = self.objects.get(key)
        if cur is None:
            return Reply(404, status(404, "NotFound", f'{resource} "{name}" not found',
                                     name=name, kind=resource))
        cur_rv = cur["metadata"]["resourceVersion"]

        def conflict() -> Reply:
            return Reply(409, status(409, "Conflict",
                                     f'Operation cannot be fulfilled on {resource} "{name}": the object has '
                                     "been modified; please apply your changes to the latest version and "
                                     "try again"))

        if sub == "scale":
            if req.method == "GET":
                return Reply(200, self._scale(cur))
            if req.method == "PUT":
                rv = req.body.get("metadata", {}).get("resourceVersion")
                if rv and rv != cur_rv:
                    return conflict()
                cur.setdefault("spec", {})["replicas"] = req.body["spec"]["replicas"]
                return Reply(200, self._scale(self.put_object(gv, resource, cur)))
        if req.method == "GET":
            return Reply(200, copy.deepcopy(cur))
        if req.method == "DELETE":
            del self.objects[key]
            return Reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if req.method == "PUT":
            rv = req.body.get("metadata", {}).get("resourceVersion")
            if rv and rv != cur_rv:
                return conflict()
            new = copy.deepcopy(req.body)
            if sub == "status":
                cur["status"] = new.get("status")
                new = cur
            else:
                new["status"] = cur.get("status")
            new["metadata"]["uid"] = cur["metadata"]["uid"]
            return Reply(200, self.put_object(gv, resource, new))
        if req.method == "PATCH":
            ctype = req.headers.get("content-type", "")
            if ctype == "application/json-patch+json":
                new = copy.deepcopy(cur)
                for op in req.body:
                    target, *path = [p for p in op["path"].split("/") if p]
                    node = new.setdefault(target, {})
                    for p in path[:-1]:
                        node = node.setdefault(p, {})
                    node[path[-1]] = op["value"]
            else:
                rv = (req.body.get("metadata") or {}).get("resourceVersion")
                if rv and rv != cur_rv:
                    return conflict()
                patch = req.body
                if sub == "status":
                    patch = {"status": req.body.get("status")}
                new = merge_patch(cur, patch)
            return Reply(200, self.put_object(gv, resource, new))
        return Reply(405, status(405, "MethodNotAllowed", "no"))

    def _list(self, req: Req, gv: str, api_version: str, resource: str, kind: str, ns: str) -> Reply:
        q = req.q()
        items = sorted((o for (g, r, n, _), o in self.objects.items()
                        if g == gv and r == resource and (not ns or n == ns)),
                       key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        sel = q.get("labelSelector")
        if sel:
            want = dict(t.split("=", 1) for t in sel.split(","))
            items = [o for o in items
                     if all(o["metadata"].get("labels", {}).get(k) == v for k, v in want.items())]
        start = int(q.get("continue") or 0)
        limit = int(q.get("limit") or 0) or len(items)
        page = items[start:start + limit]
        md: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if start + limit < len(items):
            md["continue"] = str(start + limit)
        out = []
        for o in page:
            o = copy.deepcopy(o)
            o.pop("apiVersion", None)  # like the real server for built-in kinds
            o.pop("kind", None)
            out.append(o)
        return Reply(200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": md, "items": out})

    @staticmethod
    def _scale(obj: dict[str, Any]) -> dict[str, Any]:
        md = obj["metadata"]
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": md["name"], "namespace": md.get("namespace"),
                             "resourceVersion": md["resourceVersion"]},
                "spec": {"replicas": obj.get("spec", {}).get("replicas", 1)},
                "status": {"replicas": obj.get("status", {}).get("replicas", 0),
                           "selector": obj.get("status", {}).get("selector", "")}}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out
