"""Benchmarks' own Kubernetes client: persistent HTTPS connections and one raw watch (no kubectl).

``Api(cluster)`` talks to a ``hack/cluster.py`` control plane as its admin user over one keep-alive
HTTPS connection per thread (``call``, ``create_all`` with a small thread pool); ``Watch`` keeps
one watch on a resource path (all namespaces, or one) and calls ``on_event("ns/name", obj, t)``
for every ADDED/MODIFIED object with ``t = time.monotonic()`` read as the event line arrived, so
a latency measured against it has no per-sample process start or poll delay in it. (Not a
``bench_*`` module: ``bench/run.py`` does not run it.)
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cluster import LocalCluster


class Api:
    """Admin client: one keep-alive HTTPS connection per thread."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.host, self.port = "127.0.0.1", cluster.apiserver_port
        ctx = ssl.create_default_context(cafile=str(cluster.pki / "ca.crt"))
        ctx.load_cert_chain(str(cluster.pki / "admin.crt"), str(cluster.pki / "admin.key"))
        self.ctx = ctx
        self._local = threading.local()

    def conn(self) -> http.client.HTTPSConnection:
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = http.client.HTTPSConnection(
                self.host, self.port, context=self.ctx, timeout=60
            )
        return c

    def call(
        self, method: str, path: str, body: Any = None, ctype: str = "application/json"
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(3):
            c = self.conn()
            try:
                c.request(method, path, body=data, headers={"Content-Type": ctype} if data else {})
                r = c.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None)
            except (OSError, http.client.HTTPException):
                c.close()
                self._local.c = None
                if attempt == 2:
                    raise
                time.sleep(0.5)
        raise AssertionError("unreachable")

    def create_all(self, items: Iterable[tuple[str, dict[str, Any]]], threads: int = 8) -> None:
        def one(item: tuple[str, dict[str, Any]]) -> None:
            path, obj = item
            for _ in range(20):
                code, out = self.call("POST", path, obj)
                if code in (200, 201, 409):
                    return
                time.sleep(0.5)  # 429 / 5xx under load: retry
            raise RuntimeError(f"POST {path}: {code} {out}")

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, items))


class Watch:
    """One watch on a resource across all namespaces; ``on_event(name_key, obj, t)`` per event."""

    def __init__(self, api: Api, path: str, on_event: Callable[[str, dict[str, Any], float], None]) -> None:
        self.api, self.path, self.on_event = api, path, on_event
        self.stop = threading.Event()
        self.rv = ""
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"watch{path}")

    def start(self) -> Watch:
        code, lst = self.api.call("GET", f"{self.path}?limit=1")
        assert code == 200, lst
        self.rv = lst["metadata"]["resourceVersion"]
        self.thread.start()
        self.ready.wait(30)
        return self

    def _run(self) -> None:
        while not self.stop.is_set():
            c = http.client.HTTPSConnection(self.api.host, self.api.port, context=self.api.ctx, timeout=3600)
            try:
                c.request(
                    "GET",
                    f"{self.path}?watch=1&allowWatchBookmarks=true&timeoutSeconds=3000"
                    f"&resourceVersion={self.rv}",
                )
                r = c.getresponse()
                self.ready.set()
                while not self.stop.is_set():
                    line = r.readline()
                    if not line:
                        break
                    t = time.monotonic()
                    ev = json.loads(line)
                    obj = ev["object"]
                    if ev["type"] == "ERROR":
                        self.rv = ""  # 410: start over from now (a surge is never that long)
                        _, lst = self.api.call("GET", f"{self.path}?limit=1")
                        self.rv = lst["metadata"]["resourceVersion"]
                        break
                    self.rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        m = obj["metadata"]
                        self.on_event(f"{m.get('namespace', '')}/{m['name']}", obj, t)
            except (OSError, http.client.HTTPException, ValueError):
                time.sleep(0.2)
            finally:
                c.close()
