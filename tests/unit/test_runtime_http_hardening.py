"""Issue 9, "HTTP servers": the edges of the manager's four HTTP servers (probes, metrics, the
signal API, the webhook) as an attacker and a bad day meet them.

Real sockets on 127.0.0.1; where a deadline is asserted the servers run on a ``FakeClock`` the
test steps (a wait for a server thread to reach its read is a poll with a deadline, not a sleep).
The servers are built through small helpers that pass the new keyword arguments only when the
constructor has them, so the same file runs against the code before the change and shows each
behaviour failing there.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import inspect
import json
import select
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakeapi import wait_until
from test_kube_fakeapi import FakeAPI, Reply, Req, status

from escaler.clock import FakeClock
from escaler.runtime.apiserver import ApiRequest, ApiResponse, ApiServer
from escaler.runtime.authn import (
    SUBJECT_ACCESS_REVIEW_PATH,
    TOKEN_REVIEW_PATH,
    KubeAuthenticator,
    ResourceAttributes,
)
from escaler.runtime.server import HTTPServer

ROOT = Path(__file__).resolve().parents[2]
SIGNAL = "/signal/v1/namespaces/{namespace}/elasticscalers/{name}"
SIGNAL_AUTHZ = ResourceAttributes(verb="update", group="elasticscaler.io", resource="elasticscalers",
                                  subresource="signal", namespace="{namespace}", name="{name}")
GOOD = "good-token"
OTHER_AUDIENCE = "token-for-the-api-server"
NOBODY = "nobody-token"
PUSH = "/signal/v1/namespaces/default/elasticscalers/llama"


# ---------------------------------------------------------------------------- helpers


def _kwargs(cls: Any, **kw: Any) -> dict[str, Any]:
    """The keyword arguments ``cls`` accepts (so the file also runs on the code before issue 9)."""
    params = inspect.signature(cls).parameters
    return {k: v for k, v in kw.items() if k in params}


def api_server(authenticator: Any = None, clock: FakeClock | None = None, **kw: Any) -> ApiServer:
    """A plain-HTTP API server (``insecure=True`` where TLS is the default)."""
    return ApiServer("127.0.0.1:0", authenticator=authenticator,
                     **_kwargs(ApiServer, insecure=True, clock=clock, **kw))


@dataclass
class Reviews:
    """The fake API server's TokenReview/SubjectAccessReview answers."""

    fail_token: int | None = None
    # every TokenReview spec seen
    specs: list[dict[str, Any]] = field(default_factory=list)

    def token_review(self, req: Req) -> Reply:
        spec = req.body["spec"]
        self.specs.append(spec)
        if self.fail_token is not None:
            return Reply(self.fail_token, status(self.fail_token, "Forbidden",
                                                 'tokenreviews.authentication.k8s.io is forbidden: User '
                                                 '"system:serviceaccount:escaler:manager" cannot create'))
        token = spec["token"]
        asked = spec.get("audiences") or ["https://kubernetes.default.svc"]
        if token in (GOOD, NOBODY):
            user = {"username": "system:serviceaccount:gw:" + ("pusher" if token == GOOD else "nobody")}
            st = {"authenticated": True, "user": user, "audiences": asked}
            return Reply(201, {**req.body, "status": st})
        if token == OTHER_AUDIENCE:
            # kube-apiserver's legacy behaviour when asked without a check: the token's own audience
            user = {"username": "system:serviceaccount:gw:pusher"}
            return Reply(201, {**req.body, "status": {"authenticated": True, "user": user,
                                                      "audiences": ["https://kubernetes.default.svc"]}})
        return Reply(201, {**req.body, "status": {"authenticated": False, "error": "invalid bearer token"}})

    @staticmethod
    def access_review(req: Req) -> Reply:
        spec = req.body["spec"]
        allowed = spec["user"].endswith(":pusher")
        st = {"allowed": allowed, "reason": "" if allowed else "no RBAC"}
        return Reply(201, {**req.body, "status": st})


@dataclass
class Env:
    api: FakeAPI
    reviews: Reviews
    clock: FakeClock

    def token_reviews(self) -> int:
        return len(self.api.reqs("POST", TOKEN_REVIEW_PATH))

    def authenticator(self, **kw: Any) -> KubeAuthenticator:
        return KubeAuthenticator(self.api.rest(), clock=self.clock, **kw)


@pytest.fixture
def env() -> Iterator[Env]:
    reviews = Reviews()
    with FakeAPI() as api:
        api.on("POST", TOKEN_REVIEW_PATH, reviews.token_review)
        api.on("POST", SUBJECT_ACCESS_REVIEW_PATH, reviews.access_review)
        yield Env(api, reviews, FakeClock())


def accept_signal(req: ApiRequest) -> ApiResponse:
    return ApiResponse(202, {"accepted": True})


@contextlib.contextmanager
def serving(server: Any) -> Iterator[Any]:
    server.serve()
    try:
        yield server
    finally:
        server.shutdown()


@contextlib.contextmanager
def signal_api(env: Env, **kw: Any) -> Iterator[ApiServer]:
    server = api_server(env.authenticator(), clock=env.clock, **kw)
    server.add_route("POST", SIGNAL, accept_signal, authz=SIGNAL_AUTHZ)
    with serving(server):
        yield server


def post(port: int, path: str, body: bytes, token: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else {}, dict(resp.headers)
    finally:
        conn.close()


def read_response(sock: socket.socket, timeout: float = 20.0) -> bytes:
    """Everything the server sends until it closes (or ``timeout`` real seconds pass)."""
    sock.settimeout(timeout)
    chunks = []
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def begun(server: Any) -> int:
    """Requests whose deadline the server armed (1 on code without the counter: no wait then)."""
    inner = server._server
    return int(getattr(inner, "requests_begun", 1)) if inner is not None else 0


def probes(**kw: Any) -> HTTPServer:
    routes = {"/healthz": lambda _rest: (200, "text/plain; charset=utf-8", b"ok"),
              "/metrics": lambda _rest: (200, "text/plain; version=0.0.4", b"up 1\n")}
    return HTTPServer("probes+metrics", "127.0.0.1:0", routes, **kw)


# ---------------------------------------------------------------------------- connection cap


def test_connections_beyond_the_cap_get_503_with_retry_after_not_a_thread_each() -> None:
    server = api_server()
    server.add_route("GET", "/ping", lambda _r: ApiResponse(200, {"pong": True}), public=True)
    with serving(server):
        assert server.port is not None
        # the accept loop takes connections in order: these 64 hold every slot of API_LIMITS, from two
        # client addresses (one client may hold only half the slots)
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10,
                                         source_address=(f"127.0.0.{2 + i % 2}", 0)) for i in range(64)]
        wait_until(lambda: getattr(server._server, "open_connections", 64) == 64, timeout=10,
                   what="64 connections open")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as extra:
                extra.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = read_response(extra)
            assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
            assert b"Retry-After: 1\r\n" in answer and b"Connection: close" in answer
            assert b"too many connections" in answer
        finally:
            for s in held:
                s.close()
        # the slots come back: a new client is served again
        wait_until(lambda: getattr(server._server, "open_connections", 0) == 0, timeout=10,
                   what="held connections released")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/ping")
        assert conn.getresponse().status == 200
        conn.close()


def test_probe_server_connection_cap() -> None:
    from escaler.runtime.httpbase import Limits

    with serving(probes(limits=Limits(max_connections=2))) as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as extra:
                extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert read_response(extra).startswith(b"HTTP/1.1 503")
        finally:
            for s in held:
                s.close()


def _get(port: int, path: str = "/healthz", source: str = "127.0.0.1") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0)) as c:
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return read_response(c)


def test_one_client_holds_at_most_its_share_of_the_slots_and_others_are_still_served() -> None:
    # issue 27 item 1: 16 keep-alive connections from one pod took every slot of the probe server
    # and the kubelet's probes failed; one client now holds at most half the cap
    from escaler.runtime.httpbase import Limits

    with serving(probes(limits=Limits(max_connections=16))) as server:
        hog = [socket.create_connection(("127.0.0.1", server.port), timeout=10,
                                        source_address=("127.0.0.2", 0)) for _ in range(8)]
        try:
            wait_until(lambda: server._server.open_connections == 8, timeout=10, what="8 connections open")
            # the hog's next connection is refused with a 503, another client is served
            assert _get(server.port, source="127.0.0.2").startswith(b"HTTP/1.1 503")
            assert _get(server.port, source="127.0.0.1").startswith(b"HTTP/1.1 200")
        finally:
            for c in hog:
                c.close()


def test_a_kept_alive_connection_is_closed_when_idle_not_held_to_the_request_deadline() -> None:
    # issue 27 item 1: keep-alive re-armed the 10 s request deadline after each request, so a
    # client sending a cheap request every few seconds held its slot forever
    from escaler.runtime.httpbase import Limits

    with serving(probes(limits=Limits(max_connections=4, idle_timeout=0.3))) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as c:
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        c.settimeout(10)
        first = b""
        while not first.endswith(b"\r\n\r\nok"):
            first += c.recv(65536)
        assert first.startswith(b"HTTP/1.1 200") and b"Connection: close" not in first
        # nothing more is sent: the server closes the connection after 0.3 s, not 10 s
        assert read_response(c, timeout=5) == b""
        wait_until(lambda: server._server.open_connections == 0, timeout=5, what="the slot released")


def test_a_connection_older_than_its_lifetime_is_closed_after_the_answer() -> None:
    from escaler.runtime.httpbase import Limits

    clock = FakeClock()
    # idle and request deadlines longer than the lifetime: only the lifetime can close it
    limits = Limits(max_connections=4, max_connection_seconds=30.0, idle_timeout=100.0,
                    request_deadline=100.0)
    with serving(probes(limits=limits, clock=clock)) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as c:
        c.settimeout(10)
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = b""
        while not first.endswith(b"\r\n\r\nok"):
            first += c.recv(65536)
        assert b"Connection: close" not in first
        clock.step(31)
        wait_until(lambda: begun(server) >= 2, what="the server to wait for the next request")
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_response(c)
    assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer


def test_limits_refuse_bad_bounds_naming_the_field() -> None:
    from escaler.runtime.httpbase import Limits

    for kw, name in (({"max_per_client": 0}, "max_per_client"), ({"idle_timeout": 0.0}, "idle_timeout"),
                      ({"max_connection_seconds": float("inf")}, "max_connection_seconds")):
        with pytest.raises(ValueError, match=f"Limits.{name}"):
            Limits(**kw)
    assert Limits(max_connections=16).per_client == 8 and Limits(max_connections=1).per_client == 1
    assert Limits(max_connections=4, max_per_client=9).per_client == 4


# ---------------------------------------------------------------------------- total deadline


def test_trickled_request_body_is_cut_at_the_total_deadline() -> None:
    clock = FakeClock()
    server = api_server(clock=clock)
    server.add_route("POST", SIGNAL, accept_signal)
    with serving(server):
        assert server.port is not None
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
            wait_until(lambda: begun(server) >= 1, what="the server to wait for the request")
            s.sendall(f"POST {PUSH} HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n".encode() + b'{"act')
            # every byte arrives well within a per-read timeout; the request as a whole does not
            clock.step(11)
            s.sendall(b'ive": true}')
            answer = read_response(s)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive within 10 s" in answer


def test_trickled_request_headers_are_cut_at_the_total_deadline_on_the_probe_server() -> None:
    clock = FakeClock()
    with serving(probes(clock=clock)) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        wait_until(lambda: begun(server) >= 1, what="the server to wait for the request")
        s.sendall(b"GET /heal")
        clock.step(11)
        s.sendall(b"thz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_response(s)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


def test_a_client_trickling_a_byte_at_a_time_is_cut_although_no_single_read_times_out() -> None:
    from escaler.runtime.httpbase import Limits

    # real time: a 0.3 s request deadline, a byte every 20 ms (no read waits anywhere near 0.3 s);
    # the trickle would take 4 s, the server answers 408 long before it ends
    head = b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 170 + b"\r\n\r\n"
    with serving(probes(limits=Limits(request_deadline=0.3))) as server, \
            socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
        sent = 0
        with contextlib.suppress(OSError):
            for byte in head:
                s.sendall(bytes([byte]))
                sent += 1
                if select.select([s], [], [], 0.02)[0]:
                    break  # the server answered
        answer = read_response(s)
    assert sent < len(head) or answer.startswith(b"HTTP/1.1 408"), (sent, answer[:100])
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]


# ---------------------------------------------------------------------------- bodies


def test_probe_and_metrics_servers_take_no_body() -> None:
    with serving(probes()) as server:
        for path in ("/healthz", "/metrics"):
            with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n".encode())
                answer = read_response(s)
            assert answer.startswith(b"HTTP/1.1 413"), (path, answer[:200])


def test_webhook_body_cap_is_two_mebibytes(tmp_path: Path) -> None:
    from escaler.webhook import WebhookServer, validators

    subprocess.run(["bash", str(ROOT / "hack" / "webhook-certs.sh"), str(tmp_path)], check=True,
                   capture_output=True, timeout=60)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    server = WebhookServer(validators(), cert_file=str(tmp_path / "tls.crt"),
                           key_file=str(tmp_path / "tls.key"), bind_address="127.0.0.1:0")
    path = "/validate-elasticscaler-io-v1alpha1-elasticscaler"
    with serving(server), socket.create_connection(("127.0.0.1", server.port), timeout=20) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        too_big = 2 * 1024 * 1024 + 1
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {too_big}\r\n\r\n".encode())
        s.settimeout(20)
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


@pytest.mark.parametrize(("body", "problem"), [
    (b"[" * 30000 + b"]" * 30000, "nested too deeply"),
    (b'{"active": "\xff\xfe"}', "not UTF-8"),
    (b'{"active": tru', "Expecting value"),
], ids=["nested-30000-deep", "bad-utf8", "truncated"])
def test_any_json_failure_is_a_400_naming_it_never_a_dropped_connection(body: bytes, problem: str) -> None:
    server = api_server()
    server.add_route("POST", SIGNAL, accept_signal)
    with serving(server):
        assert server.port is not None
        code, doc, _ = post(server.port, PUSH, body, None)
    assert code == 400, doc
    assert doc["error"]["code"] == "invalid_request" and problem in doc["error"]["message"]


# ---------------------------------------------------------------------------- authentication


def test_token_review_asks_for_the_escaler_audience_and_a_token_for_another_is_401(env: Env) -> None:
    with signal_api(env) as server:
        assert server.port is not None
        code, doc, hdrs = post(server.port, PUSH, b'{"active": true}', OTHER_AUDIENCE)
        assert code == 401 and hdrs["WWW-Authenticate"] == "Bearer", doc
        assert "--audience escaler" in doc["error"]["message"]
        assert env.reviews.specs[-1]["audiences"] == ["escaler"]
        assert post(server.port, PUSH, b'{"active": true}', GOOD)[0] == 202


def test_a_flood_of_bad_tokens_does_not_evict_a_cached_good_one(env: Env) -> None:
    authn = env.authenticator(cache_size=4)
    assert authn.authenticate(GOOD) is not None
    assert env.token_reviews() == 1
    for i in range(50):
        assert authn.authenticate(f"bad-{i}") is None
    assert env.token_reviews() == 51
    # the good token is still cached: no TokenReview for it
    assert authn.authenticate(GOOD) is not None
    assert env.token_reviews() == 51


def test_failed_authentications_are_rate_limited_per_client_without_a_token_review(env: Env) -> None:
    with signal_api(env) as server:
        assert server.port is not None
        for i in range(10):
            assert post(server.port, PUSH, b"{}", f"bad-{i}")[0] == 401
        assert env.token_reviews() == 10
        code, doc, hdrs = post(server.port, PUSH, b"{}", "bad-10")
        assert code == 429, doc
        assert int(hdrs["Retry-After"]) >= 1 and doc["error"]["code"] == "too_many_requests"
        assert env.token_reviews() == 10
        # the budget refills on the clock: one more try a second later
        env.clock.step(1.0)
        assert post(server.port, PUSH, b"{}", "bad-11")[0] == 401
        assert env.token_reviews() == 11


def test_denied_requests_of_one_user_are_rate_limited_without_a_subject_access_review(env: Env) -> None:
    # issue 27 item 7: one valid token and 300 object names cost 300 SubjectAccessReviews (made
    # with the manager's identity) and 300 log lines; a user's denials now have a budget
    def sars() -> int:
        return len(env.api.reqs("POST", SUBJECT_ACCESS_REVIEW_PATH))

    with signal_api(env) as server:
        assert server.port is not None
        codes = [post(server.port, f"/signal/v1/namespaces/ns{i}/elasticscalers/x{i}", b"{}", NOBODY)[0]
                 for i in range(30)]
        assert codes[:10] == [403] * 10 and set(codes[10:]) == {429}, codes
        assert sars() == 10
        # the budget refills on the clock, and another user is not charged for this one
        env.clock.step(1.0)
        assert post(server.port, "/signal/v1/namespaces/a/elasticscalers/b", b"{}", NOBODY)[0] == 403
        assert sars() == 11
        assert post(server.port, PUSH, b"{}", GOOD)[0] == 202


def test_503_never_echoes_the_internal_error_to_the_caller(env: Env) -> None:
    env.reviews.fail_token = 403
    with signal_api(env) as server:
        assert server.port is not None
        code, doc, hdrs = post(server.port, PUSH, b"{}", GOOD)
    assert code == 503 and hdrs["Retry-After"] == "1"
    message = doc["error"]["message"]
    assert message.startswith("authentication unavailable")
    for internal in ("forbidden", "tokenreviews", "RBAC", "serviceaccount", "cannot create"):
        assert internal not in message, message


# ---------------------------------------------------------------------------- secure /metrics


def test_metrics_behind_token_review_and_subject_access_review(env: Env) -> None:
    from escaler.runtime.authfilter import RequestAuth

    auth = RequestAuth(env.authenticator(audiences=()))
    with serving(probes(auth=auth, protected=["/metrics"])) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)

        def get(path: str, token: str | None) -> int:
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
            resp = conn.getresponse()
            resp.read()
            return resp.status

        assert get("/metrics", None) == 401
        assert get("/metrics", "not-a-token") == 401
        assert get("/metrics", NOBODY) == 403
        assert get("/metrics", GOOD) == 200
        # the kubelet sends no token: probes are never protected
        assert get("/healthz", None) == 200
        conn.close()
    sar = env.api.reqs("POST", SUBJECT_ACCESS_REVIEW_PATH)[-1].body["spec"]
    assert sar["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert "audiences" not in env.reviews.specs[-1]  # a scraper's token is for the API server


def test_cli_metrics_secure_and_api_insecure_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from escaler.cli import manager as cli
    from escaler.cli.main import build_parser, main

    parser, _ = build_parser()
    args = parser.parse_args(["manager", "--webhook-port=0", "--metrics-secure", "--api-insecure"])
    flags = cli.flags_from_args(args)
    assert flags.metrics_secure and flags.api_insecure and flags.manager_options().metrics_secure
    defaults = cli.flags_from_args(parser.parse_args(["manager", "--webhook-port=0"]))
    assert not defaults.metrics_secure and not defaults.api_insecure
    assert main(["manager", "--webhook-port=0", "--api-insecure", "--api-cert-dir", str(tmp_path)]) == 2
    assert "--api-insecure and --api-cert-dir are mutually exclusive" in capsys.readouterr().err


# ---------------------------------------------------------------------------- TLS by default


def test_signal_api_serves_self_signed_tls_by_default() -> None:
    server = ApiServer("127.0.0.1:0", authenticator=None)
    server.add_route("POST", SIGNAL, accept_signal)
    with serving(server):
        assert server.port is not None and server.tls
        # plain HTTP is not spoken
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert not read_response(s, timeout=10).startswith(b"HTTP/1.1 200")
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
        conn.request("POST", PUSH, body=b'{"active": true}')
        assert conn.getresponse().status == 202
        der = conn.sock.getpeercert(binary_form=True)
        conn.close()
    fingerprint = hashlib.sha256(der).hexdigest().upper()
    assert server.self_signed_fingerprint is not None
    assert server.self_signed_fingerprint.replace(":", "") == fingerprint


def test_plain_http_only_when_asked() -> None:
    server = ApiServer("127.0.0.1:0", authenticator=None, insecure=True)
    with serving(server):
        assert not server.tls
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()


def test_bad_certificate_pairs_and_insecure_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="insecure"):
        ApiServer("127.0.0.1:0", authenticator=None, insecure=True, cert_file="a.crt", key_file="a.key")


def test_handler_threads_do_not_leak_after_cut_connections() -> None:
    clock = FakeClock()
    server = api_server(clock=clock)
    before = threading.active_count()
    with serving(server):
        assert server.port is not None
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                s.sendall(b"GET /hea")
        wait_until(lambda: getattr(server._server, "open_connections", 0) == 0, timeout=10,
                   what="closed connections released")
    wait_until(lambda: threading.active_count() <= before, timeout=10, what="threads ended")


def test_manager_metrics_secure_wiring(env: Env) -> None:
    from runtime_fakes import FakeCluster, FakeMapper

    from escaler.runtime import Manager, ManagerOptions

    opts = dict(metrics_bind_address="127.0.0.1:0", health_probe_bind_address="127.0.0.1:0",
                metrics_secure=True)
    with pytest.raises(ValueError, match="metrics_secure: needs a cluster connection"):
        Manager.for_testing(FakeCluster().lw_factory, FakeMapper(), **opts)
    with pytest.raises(ValueError, match="metrics_secure: /metrics is then served over HTTPS"):
        ManagerOptions(metrics_bind_address=":8080", health_probe_bind_address=":8080", metrics_secure=True)
    with pytest.raises(ValueError, match="metrics_cert_dir: only with metrics_secure"):
        ManagerOptions(metrics_cert_dir="/tls")
    mgr = Manager(ManagerOptions(**opts), mapper=FakeMapper(), lw_factory=FakeCluster().lw_factory,
                  metrics_authenticator=env.authenticator(audiences=()))
    stop = threading.Event()
    t = threading.Thread(target=mgr.start, args=(stop,), daemon=True)
    t.start()
    try:
        wait_until(lambda: mgr.metrics_port is not None and mgr.health_probe_port is not None, timeout=10,
                   what="servers bound")
        # secure /metrics is HTTPS (self-signed here: no metrics_cert_dir); the probes stay HTTP
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        for port, path, token, expected in [(mgr.metrics_port, "/metrics", None, 401),
                                            (mgr.metrics_port, "/metrics", GOOD, 200),
                                            (mgr.health_probe_port, "/healthz", None, 200)]:
            conn = (http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
                    if path == "/metrics" else http.client.HTTPConnection("127.0.0.1", port, timeout=10))
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
            assert conn.getresponse().status == expected, (path, token)
            conn.close()
        # plain HTTP to secure /metrics gets no answer: a token is never sent in clear
        plain = http.client.HTTPConnection("127.0.0.1", mgr.metrics_port, timeout=10)
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            plain.request("GET", "/metrics", headers={"Authorization": f"Bearer {GOOD}"})
            plain.getresponse()
        plain.close()
    finally:
        stop.set()
        t.join(30)
