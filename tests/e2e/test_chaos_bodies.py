"""Oversized, malformed and trickled bodies to every HTTP endpoint that takes one (issue 15, hostile
input), against live processes on the real control plane.

The endpoints: the SLO API's ``PUT /config/namespaces/{ns}/{route}`` (``python -m escaler slo-api``),
and on one ``python -m escaler manager`` with its webhook on: the signal push
``POST /signal/v1/namespaces/{ns}/elasticscalers/{name}`` (with an authorized bearer token), the
decisions route ``GET /decisions/v1/namespaces/{ns}/{serviceId}`` (with a bearer token; it reads a
body if one is sent) and the
webhook's ``POST /validate-elasticscaler-io-v1alpha1-elasticscaler``. Each gets, over raw sockets:

* a ``Content-Length`` one byte over its cap, and no body: ``413`` within 2 s (the body is never
  waited for);
* a body over the cap sent chunked: ``413`` (the SLO API reads the stream and stops at the cap) or
  ``411`` (the manager's servers take no chunked body);
* malformed JSON, JSON nested 30,000 deep, bad UTF-8: ``400``;
* valid JSON as ``text/plain`` or a form post: ``415``;
* a body trickled one byte every 0.5 s: answered ``408`` or closed within the server's request
  deadline (10 s) plus 3 s; all endpoints at once, so the check costs one deadline;
* the manager's servers only: a request *head* trickled the same way, with the same bound (the SLO
  API's uvicorn has no such deadline: docs/security.md says so, and it is not asserted here).

No answer is a 5xx, every process stays up with no traceback in its log, and afterwards each
endpoint still serves a good request (a push 202, a PUT 200, an allowed review, the decisions
route's own 404 for a serviceId no requirement defines, or its 429 once that user's budget of refused
routes is spent).

Reduced (every e2e run): each case once. Full (``ESCALER_CHAOS=full``): each case 5 times, and 12
trickling clients per case at once (24 on the webhook, whose cap is 32 connections; 48 on the
manager's API server, cap 64) while a good request is still served. Reports
(``record_property``): ``runs`` (requests judged), ``passed``.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import Cluster, eventually
from .es_helpers import apply, chaos_full, chaos_runs, deployment, scaler
from .sloapi_helpers import SLOApi, apply_in, sa_token, start_slo_api, three_routes, wait_routes
from .webhook import free_port, in_namespace, manager_with_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

# the manager's API and webhook certificates are checked elsewhere; here only the bytes matter
_UNVERIFIED = ssl.create_default_context()
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE

# every server's whole-request deadline (httpbase.DEFAULT_REQUEST_DEADLINE_SECONDS, the SLO API's
# BODY_DEADLINE_SECONDS), and what a trickled request may take beyond it
DEADLINE_S = 10.0
SLACK_S = 3.0
# how long a refusal from the Content-Length alone may take
HEAD_ONLY_S = 2.0
TRICKLE_EVERY_S = 0.5
WEBHOOK_PATH = "/validate-elasticscaler-io-v1alpha1-elasticscaler"


@dataclass(frozen=True)
class Endpoint:
    """One HTTP endpoint that takes a body, and what a good request to it looks like."""

    name: str
    port: int
    tls: bool
    method: str
    path: str
    # the documented body cap in bytes
    cap: int
    # whether a chunked body is read (and capped) rather than refused with 411
    reads_chunked: bool
    # a bearer token to send (None: no Authorization header)
    token: str | None
    good_body: bytes
    # statuses a good request may get
    good_status: frozenset[int]
    # whether its head is under a total deadline too
    head_deadline: bool


@dataclass(frozen=True)
class Answer:
    # the HTTP status; 0 when the server closed without answering
    status: int
    body: bytes
    seconds: float


def _connect(ep: Endpoint, timeout: float) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", ep.port), timeout=timeout)
    return _UNVERIFIED.wrap_socket(sock, server_hostname="127.0.0.1") if ep.tls else sock


def _head(ep: Endpoint, headers: dict[str, str]) -> bytes:
    lines = [f"{ep.method} {ep.path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    if ep.token is not None:
        lines.append(f"Authorization: Bearer {ep.token}")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_answer(sock: socket.socket, started: float, timeout: float) -> Answer:
    """Read one response (or the close) within ``timeout``."""
    data = b""
    deadline = started + timeout
    with contextlib.suppress(OSError):
        while time.monotonic() < deadline:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep:
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), None)
                if length is not None and len(body) >= length:
                    break
    seconds = time.monotonic() - started
    if not data.startswith(b"HTTP/1.1 "):
        return Answer(0, data, seconds)
    head, _, body = data.partition(b"\r\n\r\n")
    return Answer(int(head.split(b" ", 2)[1]), body, seconds)


def send(ep: Endpoint, body: bytes | None, *, ctype: str | None = "application/json",
         content_length: int | None = None, chunked: bool = False, timeout: float = 15.0) -> Answer:
    """One request over a fresh connection: ``body`` sent whole (or chunked), ``Content-Length``
    declared as the body's length unless ``content_length`` says otherwise."""
    headers: dict[str, str] = {}
    if ctype is not None:
        headers["Content-Type"] = ctype
    if chunked:
        headers["Transfer-Encoding"] = "chunked"
    elif body is not None or content_length is not None:
        headers["Content-Length"] = str(content_length if content_length is not None else len(body or b""))
    started = time.monotonic()
    with _connect(ep, timeout) as sock:
        payload = _head(ep, headers)
        if chunked and body is not None:
            step = 8192
            payload += b"".join(f"{len(body[i:i + step]):x}\r\n".encode() + body[i:i + step] + b"\r\n"
                                for i in range(0, len(body), step)) + b"0\r\n\r\n"
        elif body is not None:
            payload += body
        with contextlib.suppress(OSError):
            sock.sendall(payload)
        return _read_answer(sock, started, timeout)


def trickle(ep: Endpoint, *, head: bool) -> Answer:
    """Send a request one byte every ``TRICKLE_EVERY_S`` (its head, or the body after a whole head)
    until the server answers or closes; the answer and how long that took."""
    body = b'{"active": true, "pad": "' + b"x" * 40 + b'"}'
    whole = _head(ep, {"Content-Type": "application/json", "Content-Length": str(len(body))}) + body
    started = time.monotonic()
    try:
        conn = _connect(ep, 30)
    except (OSError, ssl.SSLError):
        # beyond the connection cap and the overflow responders a server closes at once
        return Answer(0, b"", time.monotonic() - started)
    with conn as sock:
        sent = 0
        if not head:
            first = whole.index(b"\r\n\r\n") + 4
            sock.sendall(whole[:first])
            sent = first
        with contextlib.suppress(OSError):
            while sent < len(whole) and time.monotonic() - started < DEADLINE_S + 2 * SLACK_S:
                readable, _, _ = select.select([sock], [], [], TRICKLE_EVERY_S)
                if readable:
                    break
                sock.sendall(whole[sent:sent + 1])
                sent += 1
        return _read_answer(sock, started, DEADLINE_S + 3 * SLACK_S)


@dataclass
class Tally:
    """Requests judged, and what was wrong."""

    runs: int = 0
    failures: list[str] | None = None

    def judge(self, ep: Endpoint, case: str, answer: Answer, ok: Callable[[Answer], bool], want: str) -> None:
        self.runs += 1
        if self.failures is None:
            self.failures = []
        if answer.status >= 500 or not ok(answer):
            self.failures.append(f"{ep.name} {case}: got {answer.status} after {answer.seconds:.1f} s "
                                 f"({answer.body[:200]!r}); want {want}")

    @property
    def passed(self) -> int:
        return self.runs - len(self.failures or [])


def _status(*codes: int) -> Callable[[Answer], bool]:
    return lambda a: a.status in codes


def _over_cap_head_only(ep: Endpoint, tally: Tally) -> None:
    a = send(ep, None, content_length=ep.cap + 1)
    tally.judge(ep, f"Content-Length {ep.cap + 1} (cap {ep.cap}), no body", a,
                lambda a: a.status == 413 and a.seconds < HEAD_ONLY_S, f"413 within {HEAD_ONLY_S} s")


def _over_cap_chunked(ep: Endpoint, tally: Tally) -> None:
    a = send(ep, b"[" + b"0," * (ep.cap // 2 + 16) + b"0]", chunked=True, timeout=30)
    want = 413 if ep.reads_chunked else 411
    tally.judge(ep, "a chunked body over the cap", a, _status(want), str(want))


MALFORMED: dict[str, bytes] = {
    "truncated JSON": b'{"active": tru',
    "JSON nested 30000 deep": b"[" * 30000 + b"]" * 30000,
    "bad UTF-8": b'{"active": "\xff\xfe"}',
    "not JSON at all": b"<html><body>502</body></html>",
}
WRONG_TYPES = ("text/plain", "application/x-www-form-urlencoded")


def _malformed(ep: Endpoint, tally: Tally) -> None:
    for case, body in MALFORMED.items():
        tally.judge(ep, case, send(ep, body), _status(400), "400")
    for ctype in WRONG_TYPES:
        tally.judge(ep, f"valid JSON as {ctype}", send(ep, ep.good_body, ctype=ctype), _status(415), "415")


def _trickled(endpoints: list[Endpoint], tally: Tally, clients: int) -> None:
    """Every endpoint's body (and, where bounded, head) trickled at once, ``clients`` per case."""
    jobs = [(ep, head) for ep in endpoints for head in (False, True) if not head or ep.head_deadline]
    results: list[tuple[Endpoint, bool, Answer]] = []
    lock = threading.Lock()

    def run(ep: Endpoint, head: bool) -> None:
        a = trickle(ep, head=head)
        with lock:
            results.append((ep, head, a))

    threads = [threading.Thread(target=run, args=job, daemon=True) for job in jobs for _ in range(clients)]
    for t in threads:
        t.start()
    if clients > 1:
        # the servers still answer a good request while trickling clients hold connections
        for ep in endpoints:
            good = send(ep, ep.good_body)
            tally.judge(ep, f"a good request beside {clients} trickling clients", good,
                        lambda a, ep=ep: a.status in ep.good_status, f"one of {sorted(ep.good_status)}")
    for t in threads:
        t.join(DEADLINE_S + 4 * SLACK_S)
    assert len(results) == len(threads), f"{len(threads) - len(results)} trickling clients still running"
    bound = DEADLINE_S + SLACK_S
    for ep, head, a in results:
        what = "head" if head else "body"
        tally.judge(ep, f"{what} trickled a byte every {TRICKLE_EVERY_S} s", a,
                    lambda a: a.seconds <= bound and a.status in (0, 408, 503),
                    f"408 (or closed; 503 beyond the connection cap) within {bound:g} s")


def _endpoints(cluster: Cluster, ns: str, api_port: int, webhook_port: int, slo: SLOApi) -> list[Endpoint]:
    cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "signal", "namespace": ns},
                   "rules": [{"apiGroups": ["elasticscaler.io"], "resources": ["elasticscalers/signal"],
                              "verbs": ["update"]}]})
    cluster.kubectl("create", "rolebinding", "signal", "-n", ns, "--role=signal",
                    f"--serviceaccount={ns}:gateway")
    token = sa_token(cluster, ns, "gateway")
    review = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "00000000-0000-0000-0000-000000000001", "operation": "CREATE", "namespace": ns, "name": "x",
        "kind": {"group": "elasticscaler.io", "version": "v1alpha1", "kind": "ElasticScaler"},
        "object": scaler("x", "push", {"type": "SignalTrigger", "signalTrigger": {}}, minr=0, maxr=2)}})
    slo_port = int(slo.url.rsplit(":", 1)[1])
    return [
        Endpoint("SLO API PUT /config/namespaces/{ns}/{route}", slo_port, False, "PUT",
                 f"/config/namespaces/{ns}/chat-llama", 64 * 1024, True,
                 None, b'{"highPriority": true}', frozenset({200}), False),
        Endpoint("signal push", api_port, True, "POST", f"/signal/v1/namespaces/{ns}/elasticscalers/push",
                 64 * 1024, False, token, b'{"active": true}', frozenset({202}), True),
        # a serviceId no requirement defines: the handler's own 404 shows the request reached it (a
        # defined one answers 503 until its first decision, which needs Prometheus); each 404 charges
        # the user's denial budget, so a later good request may be the handler's 429
        Endpoint("GET /decisions/v1/namespaces/{ns}/{serviceId}", api_port, True, "GET",
                 f"/decisions/v1/namespaces/{ns}/no-such-route", 64 * 1024, False, token, b"{}",
                 frozenset({404, 429}), True),
        Endpoint("webhook /validate", webhook_port, True, "POST", WEBHOOK_PATH, 2 * 1024 * 1024, False, None,
                 review.encode(), frozenset({200}), True),
    ]


def test_oversized_malformed_and_trickled_bodies_are_refused_with_4xx(
        cluster: Cluster, namespace: str, tmp_path: Path, slo_apis: list[SLOApi],
        record_property: Callable[[str, object], None]) -> None:
    ns = namespace
    # the webhook reviews the SLO API's writes: the routes' PromQL names this namespace
    apply_in(cluster, ns, *(in_namespace(r, ns) for r in three_routes()))
    slo = start_slo_api(cluster, tmp_path, namespace=ns)
    slo_apis.append(slo)
    wait_routes(slo, 3)
    api_port = free_port()
    with manager_with_webhook(cluster, tmp_path, f"--api-bind-address=127.0.0.1:{api_port}",
                              "--log-format=json", namespace=ns) as mgr:
        apply(cluster, ns, deployment("push", 0))
        apply(cluster, ns, scaler("push", "push", {"type": "SignalTrigger", "signalTrigger": {
            "idleTimeoutSeconds": 600, "activationReplicas": 1}}, minr=0, maxr=2))
        endpoints = _endpoints(cluster, ns, api_port, mgr.webhook_port, slo)
        # every endpoint serves a good request first (the push once its token and RBAC are in force)
        for ep in endpoints:
            eventually(lambda ep=ep: send(ep, ep.good_body).status in ep.good_status, timeout=60,
                       what=f"{ep.name} serving a good request; manager log:\n{mgr.output()[-2000:]}")
        tally = Tally()
        rounds = chaos_runs(1, 5)
        for _ in range(rounds):
            for ep in endpoints:
                _over_cap_head_only(ep, tally)
                _over_cap_chunked(ep, tally)
                _malformed(ep, tally)
        _trickled(endpoints, tally, clients=12 if chaos_full() else 1)
        for ep in endpoints:
            tally.judge(ep, "a good request afterwards", send(ep, ep.good_body),
                        lambda a, ep=ep: a.status in ep.good_status, f"one of {sorted(ep.good_status)}")
        record_property("runs", tally.runs)
        record_property("passed", tally.passed)
        assert mgr.proc.poll() is None, mgr.output()[-3000:]
        assert "Traceback" not in mgr.output(), mgr.output()[-5000:]
    assert slo.proc.poll() is None, slo.output()
    assert "Traceback" not in slo.output(tail=10**8), slo.output()
    assert not tally.failures, f"{len(tally.failures)} of {tally.runs}:\n" + "\n".join(tally.failures)
