"""API GETs per steady-state reconcile, and outbound requests per poll for scalers sharing a query.

Run: ``python bench/bench_requests.py`` (or ``python bench/run.py bench_requests``). Counts, not
times: they do not depend on the machine.

* **GETs per reconcile**: the in-process fake API of the unit tests (``tests/unit/es_fakes.py``,
  ``tests/unit/reads_fakes.py``) with the production handler registry (reads through the
  reconciler's informer caches and the CRD scale paths). After a warm-up (caches listed, first
  sync done), ``RECONCILES`` polls of one scaler, each 31 s apart on a fake clock; every request
  the reconciler's client makes is counted by verb. ``/scale``-only target (CRD unreadable) is
  the fallback of a manager without ``get`` on customresourcedefinitions: one ``GET .../scale``
  per reconcile, as every ``/scale``-only target cost before.
* **Outbound requests per poll**: N scalers with the same ExternalServer query (same endpoint,
  query, no token) collected by the production ``MetricsCollector`` against an in-process
  HTTP/1.1 keep-alive Prometheus on 127.0.0.1. ``burst``: all N collections at once on 8 threads
  (the outbound executor's default workers: a fleet-wide surge, or every scaler due in one poll
  tick). ``spread``: the N scalers at their poller phases over one 30 s interval, on a fake clock
  (the steady state). ``before`` is fec3229's behaviour (no sharing, a connection per request).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))

from es_fakes import (
    NS,
    Harness,
    deployment,
    external_server_metric,
    metrics_trigger,
    scaler,
)
from reads_fakes import SCALABLE_REF, ScaleClient, crd, production_harness, scalable

from escaler.api.elasticscaler import MetricSpec
from escaler.clock import FakeClock, RealClock
from escaler.reconcilers.kit.poller import phase
from escaler.runtime import Request
from escaler.signals.collector import MetricsCollector
from escaler.signals.dedupe import SharedQueries
from escaler.signals.fetch import HttpClient
from escaler.signals.netpolicy import AddressPolicy, parse_networks
from escaler.signals.sample import Sample

TITLE = "API GETs per reconcile and outbound requests per poll (counts)"
NOTES = """
GETs per reconcile are counted after warm-up over 20 polls of one scaler (fake API, production
handler registry): every read comes from an informer cache — for a `/scale`-only CRD target the
object is read from the target's cache at the paths its CRD declares (`subresources.scale`), and
only the write goes through `/scale`; the CRD itself is read once per kind per 5 min (`CRD GETs
(run)`: over the 20 polls x 31 s = 620 s of the run, shared by every scaler of that kind). Without
`get` on customresourcedefinitions (older RBAC) a `/scale`-only target falls back to one
`GET .../scale` per reconcile (the last row of that group, where the CRD read fails and is retried
every 60 s; fec3229 made that GET for every `/scale`-only target). Bearer-token Secrets are read
from a label-selected cache (no GET per query; tests/unit/test_reconcile_gets.py).

Outbound rows: N scalers sharing one ExternalServer query. `burst` = all N due at once on 8
threads; `spread` = the N scalers at their poller phases over one 30 s interval on a fake clock.
An identical query in flight, or answered less than 1 s before (the poller's tick), is shared, so a
spread fleet sends at most one request per second of the interval per distinct query (~30 per
poll), and a burst sends about one per leader round. `before` = no sharing and
`Connection: close` (fec3229): one request and one TCP connection per scaler per poll.
"""

RECONCILES = 20
FLEET_SIZES = (100, 1000)
THREADS = 8
INTERVAL = 30.0


# ---------------------------------------------------------------------------- GETs per reconcile


def _steady(h: Harness, name: str) -> dict[str, int]:
    h.start()
    h.reconcile(name)
    h.clock.step(60)
    h.reconcile(name)
    client = h.client
    assert isinstance(client, ScaleClient)
    before = dict(client.calls)
    for _ in range(RECONCILES):
        h.clock.step(31)
        h.reconcile_once(name)
    delta = {k: v - before.get(k, 0) for k, v in client.calls.items() if v - before.get(k, 0)}
    crd_gets = delta.get(("get", "customresourcedefinitions"), 0)
    gets = sum(v for (verb, _), v in delta.items() if verb == "get") - crd_gets
    writes = sum(v for (verb, _), v in delta.items() if verb != "get")
    return {"gets": gets, "crd_gets": crd_gets, "writes": writes}


def _case(label: str, h: Harness, name: str = "es") -> dict[str, Any]:
    try:
        got = _steady(h, name)
    finally:
        h.stop()
    return {"case": label, "n": 1, "reconciles": RECONCILES,
            "GETs/reconcile": round(got["gets"] / RECONCILES, 3), "CRD GETs (run)": got["crd_gets"],
            "writes/reconcile": round(got["writes"] / RECONCILES, 3), "requests/poll": "", "connections": ""}


def _metrics_on_crd(crd_readable: bool) -> Harness:
    h = production_harness()
    if crd_readable:
        h.api("customresourcedefinitions").create(crd())
    h.api("scalables").create(scalable(3))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_server_metric("q", "10")),
                                          target=SCALABLE_REF))
    h.collector.values["q"] = 30.0
    return h


def _metrics_on_deployment() -> Harness:
    h = production_harness()
    h.api("deployments").create(deployment("web", 3))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_server_metric("q", "10"))))
    h.collector.values["q"] = 30.0
    return h


def _state() -> Harness:
    h = production_harness()
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create({
        "apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
        "metadata": {"name": "night", "namespace": NS,
                     "labels": {"elasticscaler.io/name": "es", "elasticscaler.io/namespace": NS}},
        "spec": {"rules": [], "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
        "status": {"desiredReplicas": 2}})
    h.api("elasticscalers").create(scaler("es", {"type": "StateTrigger"}, target={
        "apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "name": "night"}))
    return h


def _signal() -> Harness:
    h = production_harness()
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(scaler("es", {"type": "SignalTrigger"}))
    return h


def gets_rows() -> list[dict[str, Any]]:
    return [
        _case("MetricsTrigger, /scale-only CRD target", _metrics_on_crd(True)),
        _case("MetricsTrigger, Deployment target", _metrics_on_deployment()),
        _case("StateTrigger (Tidal -> Deployment)", _state()),
        _case("SignalTrigger, Deployment target", _signal()),
        _case("MetricsTrigger, /scale-only CRD target, CRD unreadable", _metrics_on_crd(False)),
    ]


# ---------------------------------------------------------------------------- outbound requests


class _Prometheus:
    """HTTP/1.1 keep-alive ``/api/v1/query`` on 127.0.0.1; counts requests and connections."""

    def __init__(self) -> None:
        self.requests = 0
        self.connections = 0
        mu = threading.Lock()
        owner = self
        doc = {"status": "success", "data": {"resultType": "scalar", "result": [0, "6"]}}
        body = json.dumps(doc).encode()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with mu:
                    owner.connections += 1

            def do_GET(self) -> None:
                with mu:
                    owner.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextmanager
def _prometheus() -> Iterator[_Prometheus]:
    p = _Prometheus()
    try:
        yield p
    finally:
        p.stop()


def _spec(url: str) -> MetricSpec:
    return MetricSpec.model_validate({"type": "ExternalServer", "externalServer": {
        "endpoint": url, "query": "sum(rate(requests_total[1m]))",
        "target": {"type": "Value", "value": "1"}}})


def _collector(clock: Any, shared: bool, keep_alive: bool) -> MetricsCollector:
    http = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")), keep_alive=keep_alive)
    return MetricsCollector(None, None, http, clock,  # type: ignore[arg-type]
                            shared=SharedQueries(clock) if shared else None)


def _burst(n: int, shared: bool, keep_alive: bool) -> tuple[int, int]:
    with _prometheus() as prom:
        c, spec = _collector(RealClock(), shared, keep_alive), _spec(prom.url)

        def one(_: int) -> Sample:
            [(_, s)] = c.collect(NS, [spec], None, 1)  # type: ignore[arg-type]
            return s

        with ThreadPoolExecutor(THREADS) as pool:
            samples = list(pool.map(one, range(n)))
        assert all(s.value == 6.0 for s in samples), samples[:3]
        return prom.requests, prom.connections


def _spread(n: int, shared: bool, keep_alive: bool) -> tuple[int, int]:
    with _prometheus() as prom:
        clock = FakeClock()
        c, spec = _collector(clock, shared, keep_alive), _spec(prom.url)
        phases = sorted(phase(Request(NS, f"es-{i}"), INTERVAL) for i in range(n))
        at = 0.0
        for p in phases:
            clock.step(p - at)
            at = p
            [(_, s)] = c.collect(NS, [spec], None, 1)  # type: ignore[arg-type]
            assert s.value == 6.0, s
        return prom.requests, prom.connections


def outbound_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for n in FLEET_SIZES:
        for mode, fn in (("burst", _burst), ("spread", _spread)):
            for label, shared, keep in (("before", False, False), ("shared + keep-alive", True, True)):
                requests, conns = fn(n, shared, keep)
                rows.append({"case": f"one shared query, {mode}, {label}", "n": n, "reconciles": "",
                             "GETs/reconcile": "", "CRD GETs (run)": "", "writes/reconcile": "",
                             "requests/poll": requests, "connections": conns})
    return rows


def run() -> list[dict[str, Any]]:
    return gets_rows() + outbound_rows()


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from run import table

    print(table(run()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
