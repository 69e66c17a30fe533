"""Metric-source faults for the ElasticScaler (an ExternalServer Prometheus metric), the LLMScaler
(Prometheus and Custom providers) and the SLO decision engine (issue 15, "Metric sources"), on the
real control plane.

One manager serves four objects at once, in one namespace:

* an ElasticScaler (MetricsTrigger, apa, one ExternalServer metric on the fake Prometheus,
  ``timeoutSeconds: 2``, a 4 s window), holding its target at 3;

* an LLMScaler with ``metricProvider: Prometheus`` on the fake Prometheus
  (``hack/fake_metrics.PrometheusServer``), ``timeoutSeconds: 2``, holding its target at 3;
* an LLMScaler with ``metricProvider: Custom`` on a tiny local decision server (below),
  ``timeoutSeconds: 2``, holding its target at 4;
* an LLMSLORequirement whose TTFT/OTPS queries go to the same fake Prometheus
  (``--slo-prometheus-endpoint``; 5 s per query), deciding 3 replicas.

Each fault is applied to both sources at once, then healed: the source is down (nothing
listens on its port), slow past the timeout (7 s), answers NaN, +Inf, an empty vector (``{}`` from
the custom provider), malformed JSON, or a 1 MB HTML error page (HTTP 502). During each fault:
the three targets keep their replicas and the SLO decision is held — checked on every sample
(0.5 s apart) from the injection on, while waiting for the reports too, over at least
``HOLD_POLLS`` (3) polls of every object (the manager polls every ``POLL_SECONDS``: the span runs
``HOLD_POLLS`` intervals and 1 s for the last poll's write from the injection, and at least one
interval and 1 s past the last report), and the manager made no replica write to the three
targets in that span (audit log: a write and its undoing between two samples); the ElasticScaler and the
LLMScalers report ``ScalingActive=False/DecisionUnavailable`` and the SLO requirement
``Ready=False/SignalsMissing``,
each message at most 1 KiB, naming the source and saying what was wrong, with no byte of the
HTML page; the manager stays alive. After each heal every object is healthy again, and at the
end a changed answer moves the three targets (the loop really works again).

Reduced (every e2e run): each fault once. Full (``ESCALER_CHAOS=full``, ``make chaos``): the
cycle of faults three times. Reports (``record_property``, read by ``bench/chaos.py``):
``runs`` (fault cycles made), ``passed`` (fault cycles that held), ``peak_rss_mib`` (the manager's).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import (
    AuditLog,
    Manager,
    apply,
    chaos_runs,
    cond,
    deployment,
    hold,
    peak_rss_mib,
    replicas,
    start_manager,
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # down() then up() on the same port

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

API = "llm.escaler.io/v1alpha1"
ES_API = "elasticscaler.io/v1alpha1"
SLOW = 7.0  # past both timeouts: the LLMScaler's 2 s and the SLO engine's 5 s per query
HTML = b"<html><body>" + b"upstream connect error " * 45_000 + b"</body></html>"  # ~1 MB
FAULTS = ("down", "slow", "nan", "inf", "empty", "malformed", "html")
# every object's poll interval (start_manager's --metrics-trigger-poll-interval, es_helpers.POLL)
POLL_SECONDS = 2.0
# a fault's hold spans at least this many polls of every object
HOLD_POLLS = 3
USER = "chaos-sources"
# the targets whose replicas a fault must leave alone
TARGETS = ("e", "p", "c")
# what a useful message says for each fault (any one of the fragments, case-insensitive)
SAYS: dict[str, tuple[str, ...]] = {
    # a connection the closing server had accepted is reset instead
    "down": ("cannot connect", "connection reset by peer"),
    "slow": ("timed out after",),
    "nan": ("is nan (not a finite number)", "not an integer"),
    "inf": ("is inf (not a finite number)", "not an integer"),
    "empty": ("returned no series", 'has no "replicas" field'),
    "malformed": ("json",),
    # the custom provider's body cap (64 KiB) cuts the page before its status is reported
    "html": ("http 502", "response larger than 65536 bytes"),
}


class CustomProvider:
    """The Custom provider's server: ``GET /decisions/<id>`` → ``{"replicas": n}``, or a scripted
    fault; ``down()`` closes the port and ``up()`` listens on it again."""

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self.replicas = 4
        self.fault = ""
        self.port = 0
        self._httpd: _Server | None = None
        self.up()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/decisions/chat"

    def answer(self) -> tuple[int, str, bytes]:
        with self._mu:
            fault, n = self.fault, self.replicas
        if fault == "slow":
            time.sleep(SLOW)
        bodies = {"nan": b'{"replicas": NaN}', "inf": b'{"replicas": Infinity}', "empty": b"{}",
                  "malformed": b'{"replicas": 4, "reason": "cut sh'}
        if fault == "html":
            return 502, "text/html", HTML
        if fault in bodies:
            return 200, "application/json", bodies[fault]
        return 200, "application/json", json.dumps({"replicas": n, "reason": "chaos"}).encode()

    def up(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, ctype, body = owner.answer()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the manager gave up (timeout, body cap): expected

            def log_message(self, *args: Any) -> None:
                return

        self._httpd = _Server(("127.0.0.1", self.port), Handler)
        self.port = int(self._httpd.server_address[1])
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


@pytest.fixture
def provider() -> Iterator[CustomProvider]:
    p = CustomProvider()
    try:
        yield p
    finally:
        p.down()


def llms(name: str, target: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LLMScaler", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": 10,
                     "scaleDown": {"stabilizationWindowSeconds": 0}, **spec}}


def elastic(name: str, target: str, endpoint: str, query: str) -> dict[str, Any]:
    """An apa ElasticScaler on one ExternalServer metric (10 per replica), a 4 s window."""
    metric = {"type": "ExternalServer", "externalServer": {
        "endpoint": endpoint, "query": query, "timeoutSeconds": 2,
        "target": {"type": "AverageValue", "averageValue": "10"}}}
    return {"apiVersion": ES_API, "kind": "ElasticScaler",
            "metadata": {"name": name, "annotations": {
                "elasticscaler.io/metrics.windowSeconds": "4",
                "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": 10,
                     "trigger": {"type": "MetricsTrigger",
                                 "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [metric]}}}}


def llm_slo(name: str, sid: str, target: str, ttft_q: str, otps_q: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LLMSLORequirement", "metadata": {"name": name},
            "spec": {"serviceId": sid, "deployType": "aggregated",
                     "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "concurrencyPerReplica": 16,
                     "ttft": {"targetMs": 800, "percentile": 90, "promql": ttft_q},
                     "otps": {"target": 20, "promql": otps_q},
                     "bounds": {"min": {"type": "replica", "value": 1},
                                "max": {"type": "replica", "value": 8}}}}


def get(cluster: Cluster, ns: str, kind: str, name: str) -> dict[str, Any]:
    return dict(cluster.kubectl_json("get", kind, name, "-n", ns))


def restart_prometheus(prom: PrometheusServer) -> PrometheusServer:
    """A new fake Prometheus on the same port with the same answers (the old one is down)."""
    new = PrometheusServer(port=prom.port)
    new.answers = dict(prom.answers)
    return new.start()


def test_llmscaler_and_slo_engine_hold_through_every_metric_source_fault(
        cluster: Cluster, namespace: str, managers: list[Manager], provider: CustomProvider,
        tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    ns = namespace
    prom = PrometheusServer().start()
    proms = [prom]
    try:
        _run(cluster, ns, managers, provider, prom, proms, tmp_path, record_property)
    finally:
        for p in proms:
            p.stop()


def _run(cluster: Cluster, ns: str, managers: list[Manager], provider: CustomProvider,
         prom: PrometheusServer, proms: list[PrometheusServer], tmp_path: Path,
         record_property: Callable[[str, object], None]) -> None:
    q, ttft, otps = f'running{{namespace="{ns}"}}', f'ttft{{namespace="{ns}"}}', f'otps{{namespace="{ns}"}}'
    eq = f'queue{{namespace="{ns}"}}'
    prom.set(q, 24.0)  # 24 / 8 → 3
    prom.set(eq, 30.0)  # 30 over 3 replicas at 10 each → 3
    prom.set(ttft, 1200.0)  # 1.5 x the target on 2 replicas → 3
    prom.set(otps, 25.0)
    mgr = start_manager(cluster, tmp_path, user=USER, namespace=ns,
                        extra_args=[f"--slo-prometheus-endpoint={prom.url}", "--api-insecure"])
    managers.append(mgr)
    apply(cluster, ns, deployment("p", 1))
    apply(cluster, ns, deployment("c", 1))
    apply(cluster, ns, deployment("llama", 2))
    apply(cluster, ns, deployment("e", 3))
    apply(cluster, ns, elastic("e", "e", prom.url, eq))
    apply(cluster, ns, llms("p", "p", metricProvider="Prometheus", prometheus={
        "endpoint": prom.url, "timeoutSeconds": 2,
        "metrics": [{"name": "running", "query": q, "targetPerReplica": 8}]}))
    apply(cluster, ns, llms("c", "c", metricProvider="Custom",
                            customProvider={"url": provider.url(), "timeoutSeconds": 2}))
    apply(cluster, ns, llm_slo("chat", f"chat-{ns}", "llama", ttft, otps))

    def state() -> str:
        out = []
        for kind, name, ctype in (("es", "e", "ScalingActive"), ("llmscaler", "p", "ScalingActive"),
                                  ("llmscaler", "c", "ScalingActive"), ("llmslo", "chat", "Ready")):
            obj = get(cluster, ns, kind, name)
            out.append(f"{kind}/{name} {ctype}={cond(obj, ctype)[:2]} {cond(obj, ctype)[2][:300]!r}")
        return "; ".join(out) + (f"; replicas e={replicas(cluster, ns, 'e')} p={replicas(cluster, ns, 'p')} "
                                 f"c={replicas(cluster, ns, 'c')}")

    def healthy() -> bool:
        e = cond(get(cluster, ns, "es", "e"), "ScalingActive")[:2]
        p = cond(get(cluster, ns, "llmscaler", "p"), "ScalingActive")[:2]
        c = cond(get(cluster, ns, "llmscaler", "c"), "ScalingActive")[:2]
        s = cond(get(cluster, ns, "llmslo", "chat"), "Ready")[:2]
        return (e, p, c, s) == (("True", "MetricsAvailable"), ("True", "MetricsAvailable"),
                                ("True", "DecisionReceived"), ("True", "Sized"))

    def held() -> bool:
        return (replicas(cluster, ns, "e") == 3 and replicas(cluster, ns, "p") == 3
                and replicas(cluster, ns, "c") == 4)

    def holding() -> bool:
        """One sample of a fault's hold: the targets keep their replicas and the SLO decision stays
        (asserted: the first sample that breaks it fails the test)."""
        decision = ((get(cluster, ns, "llmslo", "chat").get("status") or {}).get("decision") or {})
        assert held() and decision.get("replicas") == 3, f"replicas or the SLO decision moved: {state()}"
        return True

    def wait(pred: Callable[[], Any], what: str, timeout: float = 60) -> Any:
        try:
            return eventually(pred, timeout=timeout, interval=0.5, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{state()}\nmanager log:\n{mgr.output(2500)}") from None

    wait(lambda: held() and healthy(), "e and p at 3, c at 4, every object healthy")
    wait(lambda: ((get(cluster, ns, "llmslo", "chat").get("status") or {}).get("decision") or {})
         .get("replicas") == 3, "the SLO decision at 3")

    good = dict(prom.answers)
    audit = AuditLog.of(cluster)
    cycles = chaos_runs(1, 3)
    record_property("runs", cycles)
    for cycle in range(cycles):
        for fault in FAULTS:
            since = audit.offset()
            prom = _inject(fault, prom, proms, provider)
            t0 = time.monotonic()

            def failing() -> tuple[str, str, str, str] | None:
                holding()  # held from the injection on, not only once reported
                e = cond(get(cluster, ns, "es", "e"), "ScalingActive")
                p = cond(get(cluster, ns, "llmscaler", "p"), "ScalingActive")
                c = cond(get(cluster, ns, "llmscaler", "c"), "ScalingActive")
                s = cond(get(cluster, ns, "llmslo", "chat"), "Ready")
                ok = (e[:2] == p[:2] == c[:2] == ("False", "DecisionUnavailable")
                      and s[:2] == ("False", "SignalsMissing"))
                return (e[2], p[2], c[2], s[2]) if ok else None

            emsg, pmsg, cmsg, smsg = wait(failing, f"{fault}: every object reports the fault", timeout=90)
            reported = time.monotonic()
            sys.stderr.write(f"\n[chaos] {fault} seen in {reported - t0:.1f}s\n"
                             f"  elasticscaler: {emsg}\n  prometheus: {pmsg}\n  custom: {cmsg}\n"
                             f"  slo: {smsg}\n")
            named = {"es/e": (prom.url,),
                     "llmscaler/p": (f"Prometheus {prom.url}: running: ",),
                     "llmscaler/c": (f"custom provider returned no decision: {provider.url()}",),
                     "llmslo/chat": ("signals missing (ttftMs: ", "otps: ", prom.url)}
            for who, msg in (("es/e", emsg), ("llmscaler/p", pmsg), ("llmscaler/c", cmsg),
                             ("llmslo/chat", smsg)):
                assert len(msg.encode()) <= 1024, (fault, who, len(msg.encode()), msg[:300])
                assert all(n in msg for n in named[who]), (fault, who, named[who], msg)
                assert any(s in msg.lower() for s in SAYS[fault]), (fault, who, SAYS[fault], msg)
                assert "upstream connect error" not in msg and "<html" not in msg.lower(), (fault, who, msg)
            # held: the targets keep their replicas, the SLO decision stays (and the manager lives),
            # over HOLD_POLLS polls of every object from the injection and one more after the reports
            until = max(t0 + HOLD_POLLS * POLL_SECONDS + 1, reported + POLL_SECONDS + 1)
            try:
                hold(holding, until - time.monotonic(), what="replicas and the decision held")
            except AssertionError as e:
                raise AssertionError(f"{fault}: {e}") from None
            writes = [(e["objectRef"]["name"], e["requestReceivedTimestamp"])
                      for e in audit.scale_writes(USER, ns, since=since) if e["objectRef"]["name"] in TARGETS]
            assert not writes, (fault, "replica writes during the fault", writes)
            assert mgr.alive(), mgr.output()
            prom = _heal(fault, prom, proms, provider, good)
            wait(healthy, f"{fault} healed: every object healthy again")
        record_property("passed", cycle + 1)
    # the loop works again: new answers move the three targets
    prom.set(q, 40.0)  # → 5
    prom.set(eq, 50.0)  # 50 over 3 at 10 each → 5
    with provider._mu:
        provider.replicas = 2
    wait(lambda: replicas(cluster, ns, "e") == 5 and replicas(cluster, ns, "p") == 5
         and replicas(cluster, ns, "c") == 2, "e and p to 5 and c to 2 after the faults")
    assert mgr.alive(), mgr.output()
    record_property("peak_rss_mib", peak_rss_mib(mgr.proc.pid))


def _inject(fault: str, prom: PrometheusServer, proms: list[PrometheusServer],
            provider: CustomProvider) -> PrometheusServer:
    if fault == "down":
        prom.stop()
        provider.down()
        return prom
    with provider._mu:
        provider.fault = fault
    if fault == "slow":
        prom.delay = SLOW
    elif fault in ("nan", "inf"):
        v = float("nan") if fault == "nan" else float("inf")
        for k in list(prom.answers):
            prom.set(k, v)
    elif fault == "empty":
        with prom._lock:
            prom.answers.clear()
    elif fault == "malformed":
        prom.fail_raw(200, b'{"status": "success", "data": {"resultType": "vector", "resu',
                      "application/json")
    elif fault == "html":
        prom.fail_raw(502, HTML)
    return prom


def _heal(fault: str, prom: PrometheusServer, proms: list[PrometheusServer], provider: CustomProvider,
          good: dict[str, Any]) -> PrometheusServer:
    with provider._mu:
        provider.fault = ""
    if fault == "down":
        provider.up()
        prom = restart_prometheus(prom)
        proms.append(prom)
        return prom
    prom.delay = 0.0
    prom.heal()
    with prom._lock:
        prom.answers.clear()
        prom.answers.update(good)
    return prom
