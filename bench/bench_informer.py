"""Informer list+sync: escaler's SharedInformer vs the official client's ``kubernetes.informer``.

Run: ``python bench/bench_informer.py [objects]`` (default 10,000). Numbers are indicative only
(they vary with machine load) and are never asserted.

Setup. The parent process builds ``OBJECTS`` Pod-like objects (~2.3 KB of JSON each: labels,
annotations, an owner reference, two containers with env, resources and mounts, a volume,
conditions, container statuses) and serves them from a tiny HTTP server on
127.0.0.1 (random port) that answers ``GET /api/v1/pods`` — paginated with ``limit``/``continue``
when asked — and ``?watch=true`` (a stream held open with no events). Each implementation runs
in its own subprocess, so ``peak RSS`` (``ru_maxrss``) is that implementation's alone:

* ``escaler SharedInformer, production path``: our informer over the manager's own client path,
  ``escaler.kube.RestClient`` (the kubernetes ``ApiClient``'s urllib3 pool) and
  ``escaler.kube.ResourceListerWatcher`` (pages of 500, ``json.loads``); the reflector freezes
  each page. One counting handler. This is what a manager runs.
* ``escaler SharedInformer, requests + loads_frozen (not production)``: a minimal ``requests``
  ListerWatcher defined here, decoding with ``escaler.informers.loads_frozen`` (JSON straight to
  frozen objects, so freezing is free). The manager does not use this path; the row shows what
  decoding straight into frozen objects would save.
* ``kubernetes.informer.SharedInformer (HTTP)``: the official client's informer (kubernetes 35+)
  on ``CoreV1Api.list_pod_for_all_namespaces`` — one **unpaginated** list (it cannot page),
  deserialised into ``V1Pod`` models, one counting ``ADDED`` handler.
* ``escaler SharedInformer (in-process fake)``: our informer fed by ``tests/unit/fakeapi.py``
  with no HTTP or JSON at all (the fake deep-copies every listed object, as decoding would). Its
  peak RSS includes the fake's own copy of the objects, and its ``RSS growth`` excludes the
  string values, which the cache shares with that copy: read it as the cost of the cache's
  containers alone.

``sync s`` is from ``start`` until the handler has received every object as an add; ``RSS
growth`` is peak RSS minus RSS just before ``start`` (after imports, client and data setup).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OBJECTS = 10_000
PAGE_SIZE = 500
CHILD_TIMEOUT = 60.0

TITLE = "Informer list+sync of 10,000 Pod-like objects (~2.3 KB each)"
NOTES = """
Each row runs in its own subprocess against the same objects served by a local HTTP server
(`kubernetes.informer` exists in the installed client, so it is compared directly). `sync s` is
start to the handler having every object; `RSS growth` is peak RSS minus RSS just before start.
The first row is the manager's production path (`RestClient` + `ResourceListerWatcher`: the
kubernetes `ApiClient`'s urllib3 pool, `json.loads`, pages of 500, frozen by the reflector). The
`loads_frozen` row is NOT what production uses (a minimal `requests` ListerWatcher decoding
straight into frozen objects): it shows what that decoder would save. The official informer lists
without pagination (one response holding every object) and deserialises every item into `V1Pod`
models. The in-process row has no HTTP/JSON at all; its peak RSS includes the fake API's own copy
of the objects and its RSS growth excludes the strings it shares with that copy (containers only).
"""


# ---- data -------------------------------------------------------------------------------------


def make_pod(i: int) -> dict[str, Any]:
    """A realistic ~2 KB Pod (what a Deployment's pod looks like on the wire)."""
    app = f"app-{i % 50}"
    name = f"{app}-7d9f8c6b5-{i:05d}"
    ts = "2026-01-01T00:00:00Z"
    container = {
        "name": "server",
        "image": f"registry.example.com/team/{app}:v1.{i % 7}.3",
        "imagePullPolicy": "IfNotPresent",
        "args": ["--port=8080"],
        "env": [{"name": f"ENV_{k}", "value": f"value-{k}-{i % 13}"} for k in range(2)],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                      "limits": {"cpu": "1", "memory": "512Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/config", "readOnly": True}],
    }
    sidecar = {"name": "proxy", "image": "registry.example.com/infra/proxy:2.1.0",
               "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": f"ns-{i % 20}",
            "uid": f"6f1c2d3e-0000-4000-8000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": ts,
            "labels": {"app": app, "pod-template-hash": "7d9f8c6b5", "tier": "backend", "team": f"t{i % 5}"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8080"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d9f8c6b5",
                                 "uid": f"0a0b0c0d-0000-4000-8000-{i % 50:012d}", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": [container, sidecar],
            "volumes": [{"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}}],
            "nodeName": f"node-{i % 100}",
            "serviceAccountName": "default",
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
            "hostIP": f"192.168.0.{i % 100}",
            "startTime": ts,
            "qosClass": "Burstable",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": ts}
                           for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": c, "ready": True, "restartCount": 0, "started": True,
                                   "image": "registry.example.com/x:1", "imageID": "sha256:" + "ab" * 32,
                                   "state": {"running": {"startedAt": ts}}} for c in ("server", "proxy")],
        },
    }


# ---- the local API server ------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, items: list[bytes], rv: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        # JSON of each object; the list's resourceVersion; set to release held watches
        self.items, self.rv, self.closing = items, rv, threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path != "/api/v1/pods":
            self.send_error(404)
            return
        if query.get("watch") in ("true", "True", "1"):
            self._hold_watch(float(query.get("timeoutSeconds", "600")))
            return
        items, rv = self.server.items, self.server.rv
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0)
        end = min(len(items), start + limit) if limit else len(items)
        meta: dict[str, Any] = {"resourceVersion": rv}
        if end < len(items):
            meta["continue"] = str(end)
        body = (b'{"kind":"PodList","apiVersion":"v1","metadata":' + json.dumps(meta).encode()
                + b',"items":[' + b",".join(items[start:end]) + b"]}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _hold_watch(self, timeout: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.server.closing.wait(timeout)
        with contextlib.suppress(OSError):  # the client may be gone
            self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True


# ---- children -----------------------------------------------------------------------------------


def _rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss) / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class _Counter:
    def __init__(self, target: int) -> None:
        self.count, self.target, self.done = 0, target, threading.Event()

    def hit(self, *_args: Any) -> None:
        self.count += 1
        if self.count >= self.target:
            self.done.set()


def _http_lister_watcher(base: str, decode_frozen: bool) -> Any:
    """A minimal ListerWatcher over requests (the real one is escaler.kube's)."""
    import requests

    from escaler.informers import ListResult, WatchEvent, loads_frozen

    loads: Any = loads_frozen if decode_frozen else json.loads

    class Stream:
        def __init__(self, response: requests.Response) -> None:
            self._response = response

        def __iter__(self) -> Iterator[WatchEvent]:
            for line in self._response.iter_lines():
                if line:
                    event = loads(line)
                    yield WatchEvent(event["type"], event["object"])

        def close(self) -> None:
            self._response.close()

    class HttpListerWatcher:
        def __init__(self) -> None:
            self.session = requests.Session()
            self.lists = 0

        def list(self, *, resource_version: str = "", limit: int | None = None,
                 continue_: str | None = None) -> ListResult:
            params: dict[str, Any] = {"resourceVersion": resource_version, "limit": limit,
                                      "continue": continue_}
            self.lists += 1
            r = self.session.get(f"{base}/api/v1/pods", params={k: v for k, v in params.items() if v},
                                 timeout=60)
            r.raise_for_status()
            body = loads(r.content)
            return ListResult(body["items"], body["metadata"]["resourceVersion"],
                              body["metadata"].get("continue") or None)

        def watch(self, *, resource_version: str, timeout_seconds: int,
                  allow_bookmarks: bool = True) -> Stream:
            params: dict[str, Any] = {"watch": "true", "resourceVersion": resource_version,
                                      "timeoutSeconds": timeout_seconds,
                      "allowWatchBookmarks": str(allow_bookmarks).lower()}
            r = self.session.get(f"{base}/api/v1/pods", params=params, stream=True,
                                 timeout=(5, timeout_seconds + 30))
            return Stream(r)

    return HttpListerWatcher()


def _production_lister_watcher(base: str) -> Any:
    """The manager's path: RestClient over the kubernetes ApiClient, ResourceListerWatcher."""
    from kubernetes import client

    from escaler.kube.discovery import ResourceMapping
    from escaler.kube.dynamic import ResourceListerWatcher
    from escaler.kube.rest import RestClient

    configuration = client.Configuration()
    configuration.host = base
    inner = ResourceListerWatcher(RestClient(client.ApiClient(configuration)),
                                  ResourceMapping("", "v1", "pods", "Pod", True))

    class Counting:
        def __init__(self) -> None:
            self.lists = 0

        def list(self, **kwargs: Any) -> Any:
            self.lists += 1
            return inner.list(**kwargs)

        def watch(self, **kwargs: Any) -> Any:
            return inner.watch(**kwargs)

    return Counting()


def _child_escaler(base: str, n: int, in_process: bool, decode_frozen: bool) -> dict[str, Any]:
    from escaler.informers import FuncHandler, SharedInformer

    if in_process:
        sys.path.insert(0, str(ROOT / "tests" / "unit"))
        from fakeapi import FakeAPI  # type: ignore[import-not-found]

        lw: Any = FakeAPI(make_pod(i) for i in range(n))  # a generator: no second copy lingers
    elif decode_frozen:
        lw = _http_lister_watcher(base, decode_frozen)
    else:
        lw = _production_lister_watcher(base)
    counter = _Counter(n)
    informer = SharedInformer(lw, name="pods")
    informer.add_event_handler(FuncHandler(add=counter.hit))
    stop = threading.Event()
    before = _rss_mb()
    t0 = time.perf_counter()
    informer.start(stop)
    if not counter.done.wait(CHILD_TIMEOUT):
        raise SystemExit(f"escaler informer got {counter.count}/{n} adds")
    elapsed = time.perf_counter() - t0
    lists = lw.list_calls if in_process else lw.lists
    return {"sync_s": elapsed, "cached": len(informer.store.list_keys()), "list_requests": lists,
            "rss_before_mb": before, "peak_rss_mb": _peak_mb()}


def _child_official(base: str, n: int) -> dict[str, Any]:
    from kubernetes import client
    from kubernetes.informer import ADDED, SharedInformer

    configuration = client.Configuration()
    configuration.host = base
    api = client.CoreV1Api(client.ApiClient(configuration))
    calls = {"n": 0}

    def list_pods(**kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            calls["n"] += 1
        return api.list_pod_for_all_namespaces(**kwargs)

    counter = _Counter(n)
    informer: Any = SharedInformer(list_pods)  # type: ignore[no-untyped-call]
    informer.add_event_handler(ADDED, counter.hit)
    before = _rss_mb()
    t0 = time.perf_counter()
    informer.start()
    if not counter.done.wait(CHILD_TIMEOUT):
        raise SystemExit(f"official informer got {counter.count}/{n} adds")
    elapsed = time.perf_counter() - t0
    return {"sync_s": elapsed, "cached": len(informer.cache.list_keys()), "list_requests": calls["n"],
            "rss_before_mb": before, "peak_rss_mb": _peak_mb()}


def _child(impl: str, base: str, n: int) -> None:
    if impl == "official":
        result = _child_official(base, n)
    else:
        result = _child_escaler(base, n, in_process=impl == "fake", decode_frozen=impl == "escaler-frozen")
    print(json.dumps(result), flush=True)
    os._exit(0)  # do not wait for the watch threads (the official informer cannot be interrupted)


# ---- driver -------------------------------------------------------------------------------------

IMPLEMENTATIONS = [
    ("escaler", "escaler SharedInformer, production path (RestClient, ResourceListerWatcher, json.loads)"),
    ("escaler-frozen", "escaler SharedInformer, requests + loads_frozen (not the production path)"),
    ("official", "kubernetes.informer.SharedInformer (HTTP, one unpaginated list)"),
    ("fake", "escaler SharedInformer (in-process fake)"),
]


def run(objects: int = OBJECTS) -> list[dict[str, Any]]:
    pods = [make_pod(i) for i in range(objects)]
    items = [json.dumps(p, separators=(",", ":")).encode() for p in pods]
    avg_kb = sum(map(len, items)) / len(items) / 1024
    del pods
    server = _Server(items, str(1000 + objects))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath)
    rows: list[dict[str, Any]] = []
    try:
        for impl, label in IMPLEMENTATIONS:
            proc = subprocess.run([sys.executable, __file__, "--child", impl, base, str(objects)],
                                  capture_output=True, text=True, timeout=CHILD_TIMEOUT + 30, env=env,
                                  cwd=ROOT)
            if proc.returncode != 0:
                raise RuntimeError(f"{label} failed:\n{proc.stderr[-2000:]}")
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append({
                "implementation": label,
                "objects": objects,
                "avg object KB": round(avg_kb, 2),
                "list requests": r["list_requests"],
                "cached": r["cached"],
                "sync s": round(r["sync_s"], 2),
                "objects/s": round(objects / r["sync_s"]),
                "peak RSS MB": round(r["peak_rss_mb"], 1),
                "RSS growth MB": round(r["peak_rss_mb"] - r["rss_before_mb"], 1),
            })
    finally:
        server.closing.set()
        server.shutdown()
        server.server_close()
    return rows


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    objects = int(sys.argv[1]) if len(sys.argv) > 1 else OBJECTS
    rows = run(objects)
    cols = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    print(" | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)))


if __name__ == "__main__":
    main()
