"""Slow metric sources do not delay other tenants' scaling (issue 9, "Outbound calls" and its
acceptance: "a trickling Prometheus does not delay another scaler's write by more than 1 s").

One manager with the default ``--max-concurrent-reconciles`` (8 reconcile workers), polling every
2 s. Namespace *slow* holds ``SLOW_SCALERS`` (more than the workers) ElasticScalers whose
ExternalServer endpoint is a trickling fake Prometheus: it sends its headers, then one byte every
0.3 s, forever — each read timeout is met, so only a total deadline ends a request. The test's
own namespace holds one healthy scaler on a fast fake Prometheus.

* baseline (reported, not asserted): before the slow scalers exist, the healthy metric steps up at
  T0 and the first replica write is timed (audit log, ``requestReceivedTimestamp``);
* the slow scalers are created and the test waits until the trickler holds connections open;
* the healthy metric steps up again at T1: the first replica write must come within one poll
  interval + 1 s of T1 (the poll's own phase is up to one interval away) — the trickling
  collections cost the healthy scaler no worker.

Before the change (6cf3acc) collection ran on the reconcile workers: the eight workers sit in
trickling reads and the healthy scaler is not written at all before the deadline.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually, source_dir
from .es_helpers import (
    POLL,
    QUICK,
    AuditLog,
    Manager,
    _ts,
    apply,
    deployment,
    replicas,
    scaler,
    start_manager,
    wait_cond,
)

# serial tier (docs/testing.md): its manager serves two namespaces, so it watches every namespace
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

SLOW_SCALERS = 10
POLL_SECONDS = float(POLL.rstrip("s"))
# the acceptance bound: one poll interval (the poller's phase) + 1 s
BOUND_SECONDS = POLL_SECONDS + 1.0
# how long to wait for a write at all (the base never writes while the workers are stuck)
WRITE_DEADLINE_SECONDS = 30.0


class FakeProm:
    """A Prometheus ``/api/v1/query``: a scripted value per query, or a trickle of one byte every
    ``trickle`` seconds after the headers, forever (until ``stop``). Records when queries arrive and
    how many connections are open."""

    def __init__(self, trickle: float | None = None) -> None:
        self.trickle = trickle
        self.values: dict[str, float] = {}
        # (time.time(), query) of every request
        self.seen: list[tuple[float, str]] = []
        self.open = 0
        self.most_open = 0
        self._mu = threading.Lock()
        self._stop = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                params = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                owner.handle(self, (params.get("query") or [""])[0])

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                params = urllib.parse.parse_qs(self.rfile.read(length).decode())
                owner.handle(self, (params.get("query") or [""])[0])

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> FakeProm:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def set(self, query: str, value: float) -> None:
        with self._mu:
            self.values[query] = value

    def first_query_after(self, t: float) -> float | None:
        with self._mu:
            return next((at for at, _ in self.seen if at > t), None)

    def handle(self, h: BaseHTTPRequestHandler, query: str) -> None:
        with self._mu:
            self.seen.append((time.time(), query))
            value = self.values.get(query)
        if self.trickle is None:
            result = [] if value is None else [{"metric": {}, "value": [time.time(), repr(float(value))]}]
            data = {"status": "success", "data": {"resultType": "vector", "result": result}}
            body = json.dumps(data).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        with self._mu:
            self.open += 1
            self.most_open = max(self.most_open, self.open)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.end_headers()
            h.wfile.flush()
            while not self._stop.wait(self.trickle):
                h.wfile.write(b" ")
                h.wfile.flush()
        except OSError:
            pass  # the client gave up (its total deadline): that is the point
        finally:
            with self._mu:
                self.open -= 1
            h.close_connection = True


def prom_trigger(url: str, query: str, timeout_seconds: int) -> dict[str, Any]:
    metric = {"type": "ExternalServer",
              "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": timeout_seconds,
                                 "target": {"type": "AverageValue", "averageValue": "10"}}}
    return {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [metric]}}


def manager_args() -> list[str]:
    """Loopback endpoints are refused by default once the SSRF policy is in: re-allow them for this
    test's fake Prometheus servers (when the checkout under test has the flag and ``start_manager``
    does not pass it already)."""
    has_flag = "--allow-endpoint-networks" in (source_dir() / "escaler" / "cli" / "manager.py").read_text()
    passed = "allow-endpoint-networks" in inspect.getsource(start_manager)
    return ["--allow-endpoint-networks=127.0.0.0/8"] if has_flag and not passed else []


@pytest.fixture
def slow_namespace(cluster: Cluster, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-slow"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _first_write_delay(cluster: Cluster, audit: AuditLog, mgr: Manager, ns: str, target: str,
                       since: int, t: float) -> float:
    def written() -> float | None:
        evs = audit.scale_writes(mgr.user, ns, target, since=since)
        times = [_ts(ev["requestReceivedTimestamp"]) for ev in evs]
        return min(times) if times else None

    try:
        at = eventually(written, timeout=WRITE_DEADLINE_SECONDS, interval=0.1,
                        what=f"a replica write to {ns}/{target}")
    except AssertionError:
        return float("inf")
    return float(at) - t


def test_a_trickling_prometheus_does_not_delay_another_tenants_write(
        cluster: Cluster, namespace: str, slow_namespace: str, tmp_path: Path) -> None:
    fast, trickler = FakeProm().start(), FakeProm(trickle=0.3).start()
    mgr = start_manager(cluster, tmp_path, user="escaler-slow-sources", api=False, extra_args=manager_args())
    audit = AuditLog.of(cluster)
    try:
        q = f'sum(load{{namespace="{namespace}"}})'
        fast.set(q, 20)  # 10 per replica at 2 replicas: at target
        apply(cluster, namespace, deployment("healthy", 2))
        apply(cluster, namespace,
              scaler("healthy", "healthy", prom_trigger(fast.url, q, 5), annotations=QUICK))
        wait_cond(cluster, namespace, "healthy", "ScalingActive", "True", "MetricsAvailable", timeout=60)
        assert replicas(cluster, namespace, "healthy") == 2

        # baseline: no slow source anywhere
        since, t0 = audit.offset(), time.time()
        fast.set(q, 60)
        baseline = _first_write_delay(cluster, audit, mgr, namespace, "healthy", since, t0)
        eventually(lambda: replicas(cluster, namespace, "healthy") == 6, timeout=40, what="healthy at 6")

        # SLOW_SCALERS scalers (more than the 8 workers) whose Prometheus trickles
        for i in range(SLOW_SCALERS):
            apply(cluster, slow_namespace, deployment(f"slow-{i}", 2))
            apply(cluster, slow_namespace,
                  scaler(f"slow-{i}", f"slow-{i}",
                         prom_trigger(trickler.url, f'slow{i}{{namespace="{slow_namespace}"}}', 30)))
        eventually(lambda: trickler.open >= 4, timeout=30, what="the trickler holding connections open")
        time.sleep(2 * POLL_SECONDS)  # let every slow scaler's poll come round: all the damage is done

        since, t1 = audit.offset(), time.time()
        fast.set(q, 120)  # 20 per replica at 6: a scale-up to maxReplicas 10, written at the next poll
        delay = _first_write_delay(cluster, audit, mgr, namespace, "healthy", since, t1)
        query_at = fast.first_query_after(t1)
        note = (f"baseline {baseline:.2f}s, with {SLOW_SCALERS} trickling scalers {delay:.2f}s "
                f"(first query {query_at - t1:.2f}s after the step); trickler connections: "
                f"open {trickler.open}, most {trickler.most_open}" if query_at is not None else
                f"baseline {baseline:.2f}s, with trickling scalers {delay:.2f}s (no query after the step)")
        print(f"\n[slow sources] {note}")
        (tmp_path / "slow_sources.txt").write_text(note + "\n")
        # the baseline is reported, not asserted: it only shows what one poll's phase costs here
        assert delay <= BOUND_SECONDS, f"the trickling sources delayed another tenant: {note}\n{mgr.output()}"
        assert mgr.alive(), mgr.output()
    finally:
        mgr.stop()
        trickler.stop()
        fast.stop()
