"""The manager's API server over real loopback HTTP(S), authenticated by ``KubeAuthenticator``
against an in-process fake API server scripted for TokenReview and SubjectAccessReview: routing,
401/403/404/405/411/413/400/500/503, the review cache (TTL on a fake clock, single flight), TLS,
the Runnable contract, metrics, and the Manager's leader-only wiring."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import re
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
from lease_fakes import InMemoryLeaseClient
from prometheus_client import CollectorRegistry
from runtime_fakes import FakeCluster, FakeMapper, FlakyLeaseClient
from test_kube_fakeapi import FakeAPI, Reply, Req, status

from escaler.clock import FakeClock
from escaler.runtime import Manager
from escaler.runtime.apiserver import MAX_BODY_BYTES, ApiError, ApiRequest, ApiResponse, ApiServer
from escaler.runtime.authn import (
    SUBJECT_ACCESS_REVIEW_PATH,
    TOKEN_REVIEW_PATH,
    AccessDecision,
    KubeAuthenticator,
    ResourceAttributes,
    UserInfo,
)

ROOT = Path(__file__).resolve().parents[2]
SIGNAL_PATTERN = "/signal/v1/namespaces/{namespace}/elasticscalers/{name}"
SIGNAL_AUTHZ = ResourceAttributes(verb="update", group="elasticscaler.io", resource="elasticscalers",
                                  subresource="signal", namespace="{namespace}", name="{name}")
GOOD = "good-token"
ALICE = {"username": "system:serviceaccount:gw:pusher", "uid": "u-1",
         "groups": ["system:serviceaccounts", "system:serviceaccounts:gw"],
         "extra": {"authentication.kubernetes.io/pod-name": ["gw-0"]}}


# ---------------------------------------------------------------------------- fixtures


def signal(namespace: str = "default", name: str = "llama") -> str:
    return f"/signal/v1/namespaces/{namespace}/elasticscalers/{name}"


@dataclass
class Reviews:
    """The fake API server's TokenReview/SubjectAccessReview behaviour, changeable per test."""

    # token → user (an entry absent = not authenticated)
    users: dict[str, dict[str, Any]] = field(default_factory=lambda: {GOOD: ALICE})
    # namespaces the SAR allows
    allowed_namespaces: set[str] = field(default_factory=lambda: {"default"})
    # a status code to fail the next reviews with (None = answer)
    fail_token: int | None = None
    fail_access: int | None = None
    # set to hold every TokenReview until released
    hold: threading.Event | None = None

    def token_review(self, req: Req) -> Reply:
        if self.hold is not None:
            self.hold.wait(10)
        if self.fail_token is not None:
            return Reply(self.fail_token, status(self.fail_token, "Forbidden", "tokenreviews is forbidden"))
        user = self.users.get(req.body["spec"]["token"])
        # a real API server answers the requested audiences the token was issued for
        st: dict[str, Any] = {"authenticated": True, "user": user,
                              "audiences": req.body["spec"].get("audiences") or ["https://kubernetes.default.svc"]
                              } if user else {"authenticated": False, "error": "invalid bearer token"}
        return Reply(201, {**req.body, "status": st})

    def access_review(self, req: Req) -> Reply:
        if self.fail_access is not None:
            return Reply(self.fail_access, status(self.fail_access, "InternalError", "etcd is down"))
        ns = req.body["spec"]["resourceAttributes"].get("namespace")
        allowed = ns in self.allowed_namespaces
        st = {"allowed": True} if allowed else {"allowed": False, "reason": "no RBAC policy matched"}
        return Reply(201, {**req.body, "status": st})


@dataclass
class Env:
    api: FakeAPI
    reviews: Reviews
    clock: FakeClock
    server: ApiServer
    registry: CollectorRegistry
    # every ApiRequest the signal handler saw
    calls: list[ApiRequest]

    def reviews_made(self) -> tuple[int, int]:
        return (len(self.api.reqs("POST", TOKEN_REVIEW_PATH)),
                len(self.api.reqs("POST", SUBJECT_ACCESS_REVIEW_PATH)))


def signal_handler(calls: list[ApiRequest]) -> Any:
    def handle(req: ApiRequest) -> ApiResponse:
        calls.append(req)
        if req.body == {"boom": True}:
            raise RuntimeError("handler bug")
        if req.body == {"replicas": -1}:
            raise ApiError(400, "replicas: must be >= 0")
        scaler = f"{req.params['namespace']}/{req.params['name']}"
        return ApiResponse(202, {"accepted": True, "scaler": scaler})
    return handle


@pytest.fixture
def env() -> Iterator[Env]:
    reviews = Reviews()
    with FakeAPI() as api:
        api.on("POST", TOKEN_REVIEW_PATH, reviews.token_review)
        api.on("POST", SUBJECT_ACCESS_REVIEW_PATH, reviews.access_review)
        clock = FakeClock()
        registry = CollectorRegistry()
        server = ApiServer("127.0.0.1:0", insecure=True, clock=clock,
                           authenticator=KubeAuthenticator(api.rest(), clock=clock),
                           registry=registry)
        calls: list[ApiRequest] = []
        server.add_route("POST", SIGNAL_PATTERN, signal_handler(calls), authz=SIGNAL_AUTHZ)
        server.add_route("GET", "/decisions/{serviceId}",
                         lambda r: ApiResponse(200, {"replicas": 3, "service": r.params["serviceId"],
                                                     "query": dict(r.query)}))
        server.add_route("GET", "/public", lambda r: ApiResponse(200, {"user": r.user}), public=True)
        server.serve()
        try:
            yield Env(api, reviews, clock, server, registry, calls)
        finally:
            server.shutdown()


def call(
    server: ApiServer,
    method: str,
    path: str,
    body: bytes | dict[str, Any] | None = None,
    *,
    token: str | None = GOOD,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, Any, dict[str, str]]:
    assert server.port is not None
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
        if context is not None else http.client.HTTPConnection("127.0.0.1", server.port, timeout=10))
    hdrs = dict(headers or {})
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        ctype = resp.getheader("Content-Type") or ""
        doc = json.loads(raw) if ctype.startswith("application/json") and raw else raw
        return resp.status, doc, dict(resp.headers)
    finally:
        conn.close()


def raw_request(server: ApiServer, data: bytes) -> bytes:
    assert server.port is not None
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(data)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks)


# ---------------------------------------------------------------------------- authentication


def test_allowed_push_reaches_the_handler_with_params_body_and_user(env: Env) -> None:
    code, doc, _ = call(env.server, "POST", "/signal/v1/namespaces/default/elasticscalers/llama",
                        {"active": True}, headers={"X-Trace": "t1"})
    assert (code, doc) == (202, {"accepted": True, "scaler": "default/llama"})
    (req,) = env.calls
    assert req.method == "POST" and req.params == {"namespace": "default", "name": "llama"}
    assert req.body == {"active": True} and req.headers["x-trace"] == "t1"
    assert "authorization" not in req.headers
    assert req.user == UserInfo(ALICE["username"], "u-1", tuple(ALICE["groups"]),
                                (("authentication.kubernetes.io/pod-name", ("gw-0",)),))
    (tr,) = env.api.reqs("POST", TOKEN_REVIEW_PATH)
    assert tr.body == {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                       "spec": {"token": GOOD, "audiences": ["escaler"]}}
    (sar,) = env.api.reqs("POST", SUBJECT_ACCESS_REVIEW_PATH)
    assert sar.body["spec"] == {
        "resourceAttributes": {"verb": "update", "group": "elasticscaler.io", "resource": "elasticscalers",
                               "subresource": "signal", "namespace": "default", "name": "llama"},
        "user": ALICE["username"], "uid": "u-1", "groups": ALICE["groups"], "extra": ALICE["extra"],
    }


UNAUTHENTICATED = [
    ("no-header", None, {}),
    ("empty-bearer", None, {"Authorization": "Bearer "}),
    ("basic-scheme", None, {"Authorization": "Basic dXNlcjpwYXNz"}),
    ("unknown-token", "stolen", {}),
]


@pytest.mark.parametrize(("token", "headers"), [c[1:] for c in UNAUTHENTICATED],
                         ids=[c[0] for c in UNAUTHENTICATED])
def test_missing_or_invalid_token_is_401(env: Env, token: str | None, headers: dict[str, str]) -> None:
    code, doc, hdrs = call(env.server, "POST", "/signal/v1/namespaces/default/elasticscalers/llama",
                           {"active": True}, token=token, headers=headers)
    assert code == 401 and hdrs["WWW-Authenticate"] == "Bearer"
    assert doc["error"]["code"] == "unauthorized" and doc["error"]["message"]
    assert env.calls == []
    assert env.reviews_made() == ((1 if token else 0), 0)


def test_authenticated_but_denied_is_403_naming_user_verb_and_resource(env: Env) -> None:
    code, doc, _ = call(env.server, "POST", signal("prod"), {"active": True})
    assert code == 403 and doc["error"]["code"] == "forbidden"
    assert doc["error"]["message"] == (
        f'user "{ALICE["username"]}" cannot update resource "elasticscalers/signal" named "llama" '
        'in API group "elasticscaler.io" in the namespace "prod": no RBAC policy matched')
    assert env.calls == []


def test_route_without_authz_needs_only_a_valid_token(env: Env) -> None:
    code, doc, _ = call(env.server, "GET", "/decisions/chat%2Dsvc?window=5m&window=1m")
    assert code == 200 and doc == {"replicas": 3, "service": "chat-svc", "query": {"window": "5m"}}
    assert env.reviews_made() == (1, 0)
    assert call(env.server, "GET", "/decisions/chat", token=None)[0] == 401


def test_public_route_and_healthz_need_no_token(env: Env) -> None:
    assert call(env.server, "GET", "/public", token=None)[:2] == (200, {"user": None})
    assert call(env.server, "GET", "/healthz", token=None)[:2] == (200, b"ok")
    assert env.reviews_made() == (0, 0)


def test_without_authenticator_every_route_is_open() -> None:
    seen: list[ApiRequest] = []
    server = ApiServer("127.0.0.1:0", insecure=True, authenticator=None)
    server.add_route("POST", SIGNAL_PATTERN, signal_handler(seen), authz=SIGNAL_AUTHZ)
    server.serve()
    try:
        code, _, _ = call(server, "POST", signal("x", "y"), {"replicas": 2}, token=None)
        assert code == 202 and seen[0].user is None and seen[0].body == {"replicas": 2}
    finally:
        server.shutdown()


# ---------------------------------------------------------------------------- review cache


def test_reviews_are_cached_for_the_ttl_both_ways(env: Env) -> None:
    path = "/signal/v1/namespaces/default/elasticscalers/llama"
    for _ in range(3):
        assert call(env.server, "POST", path, {"active": True})[0] == 202
        assert call(env.server, "POST", path, {"active": True}, token="stolen")[0] == 401
        assert call(env.server, "POST", "/signal/v1/namespaces/prod/elasticscalers/a", {})[0] == 403
    # one TokenReview per token, one SubjectAccessReview per (user, attributes)
    assert env.reviews_made() == (2, 2)
    env.clock.step(10.5)
    assert call(env.server, "POST", path, {"active": True})[0] == 202
    assert env.reviews_made() == (3, 3)
    # a different scaler is a different question
    assert call(env.server, "POST", "/signal/v1/namespaces/default/elasticscalers/other", {})[0] == 202
    assert env.reviews_made() == (3, 4)


def test_concurrent_misses_make_one_review(env: Env) -> None:
    env.reviews.hold = threading.Event()
    auth = env.server.authenticator
    assert auth is not None
    results: list[UserInfo | None] = []
    lock = threading.Lock()

    def worker() -> None:
        user = auth.authenticate(GOOD)
        with lock:
            results.append(user)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    wait_until(lambda: len(env.api.reqs("POST", TOKEN_REVIEW_PATH)) == 1, what="first review in flight")
    env.reviews.hold.set()
    for t in threads:
        t.join(10)
    assert len(results) == 8 and all(u is not None and u.username == ALICE["username"] for u in results)
    assert env.reviews_made() == (1, 0)


@pytest.mark.parametrize(("which", "code"), [("token", 403), ("token", 500), ("access", 500)],
                         ids=["tokenreview-rbac-missing", "tokenreview-error", "sar-error"])
def test_review_failure_is_503_and_not_cached(
    env: Env, which: str, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    setattr(env.reviews, f"fail_{which}", code)
    path = "/signal/v1/namespaces/default/elasticscalers/llama"
    status_code, doc, hdrs = call(env.server, "POST", path, {"active": True})
    assert status_code == 503 and doc["error"]["code"] == "unavailable" and hdrs["Retry-After"] == "1"
    # issue 9: the cause is logged for the operator, never shown to the (maybe unauthenticated) caller
    message = doc["error"]["message"]
    expected = "authentication unavailable" if which == "token" else "authorization unavailable"
    assert message.startswith(expected)
    for internal in ("RBAC", "tokenreviews", "forbidden", "etcd", "InternalError", "500"):
        assert internal not in message
    if which == "token" and code == 403:
        assert "RBAC" in caplog.text and "tokenreviews" in caplog.text
    setattr(env.reviews, f"fail_{which}", None)
    assert call(env.server, "POST", path, {"active": True})[0] == 202
    assert env.calls and env.calls[-1].body == {"active": True}


# ---------------------------------------------------------------------------- HTTP edges


HTTP_CASES = [
    ("unknown-path", "POST", "/signal/v1/elasticscalers/x", b"{}", 404, "not_found"),
    ("trailing-slash", "POST", "/signal/v1/namespaces/a/elasticscalers/b/", b"{}", 404, "not_found"),
    ("wrong-method", "GET", "/signal/v1/namespaces/a/elasticscalers/b", None, 405, "method_not_allowed"),
    ("malformed-json", "POST", "/signal/v1/namespaces/default/elasticscalers/b", b"{not json", 400,
     "invalid_request"),
    ("not-utf8", "POST", "/signal/v1/namespaces/default/elasticscalers/b", b"\xff\xfe", 400,
     "invalid_request"),
    ("handler-api-error", "POST", "/signal/v1/namespaces/default/elasticscalers/b", b'{"replicas": -1}', 400,
     "invalid_request"),
    ("healthz-post", "POST", "/healthz", b"", 405, "method_not_allowed"),
]


@pytest.mark.parametrize(("method", "path", "body", "code", "error"), [c[1:] for c in HTTP_CASES],
                         ids=[c[0] for c in HTTP_CASES])
def test_http_edges(env: Env, method: str, path: str, body: bytes | None, code: int, error: str) -> None:
    status_code, doc, hdrs = call(env.server, method, path, body)
    assert status_code == code and doc["error"]["code"] == error, doc
    if code == 405:
        assert hdrs["Allow"] in ("POST", "GET, HEAD")


def test_body_too_large_is_413_before_authentication(env: Env) -> None:
    head = raw_request(env.server, (
        "POST /signal/v1/namespaces/default/elasticscalers/b HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n").encode())
    assert head.startswith(b"HTTP/1.1 413")
    assert b'"payload_too_large"' in head
    assert env.reviews_made() == (0, 0)
    # a body of exactly the limit is read (and here refused only as not-JSON)
    assert call(env.server, "POST", "/signal/v1/namespaces/default/elasticscalers/b",
                b" " * (MAX_BODY_BYTES - 1) + b"x")[0] == 400


def test_chunked_body_is_411(env: Env) -> None:
    head = raw_request(env.server, (
        b"POST /signal/v1/namespaces/default/elasticscalers/b HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"))
    assert head.startswith(b"HTTP/1.1 411")


def test_handler_exception_is_500_logged_and_the_server_keeps_serving(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    path = "/signal/v1/namespaces/default/elasticscalers/b"
    with caplog.at_level(logging.ERROR, logger="escaler.runtime.apiserver"):
        code, doc, _ = call(env.server, "POST", path, {"boom": True})
    assert code == 500 and doc["error"]["code"] == "internal_error"
    assert "handler bug" not in doc["error"]["message"]  # no internals leak to the caller
    assert any("RuntimeError: handler bug" in (r.exc_text or "") for r in caplog.records)
    assert call(env.server, "POST", path, {"active": True})[0] == 202


def test_keep_alive_serves_several_requests(env: Env) -> None:
    assert env.server.port is not None
    conn = http.client.HTTPConnection("127.0.0.1", env.server.port, timeout=10)
    try:
        for name in ("a", "b", "c"):
            conn.request("POST", signal("default", name), body=b'{"active":true}',
                         headers={"Authorization": f"Bearer {GOOD}"})
            resp = conn.getresponse()
            assert json.loads(resp.read())["scaler"] == f"default/{name}"
    finally:
        conn.close()


def test_request_metrics(env: Env) -> None:
    call(env.server, "POST", "/signal/v1/namespaces/default/elasticscalers/a", {"active": True})
    call(env.server, "POST", "/signal/v1/namespaces/default/elasticscalers/a", {"active": True}, token=None)
    call(env.server, "GET", "/nope")

    def count(route: str, method: str, code: str) -> float | None:
        return env.registry.get_sample_value("escaler_api_requests_total",
                                             {"route": route, "method": method, "code": code})

    # a request is counted once its response is written, so the client can see the answer a
    # moment before the counter moves: wait (bounded) for the connection threads to finish
    wait_until(lambda: count("unmatched", "GET", "404") == 1
               and count(SIGNAL_PATTERN, "POST", "202") == 1
               and count(SIGNAL_PATTERN, "POST", "401") == 1, 5)
    assert env.registry.get_sample_value("escaler_api_request_duration_seconds_count",
                                         {"route": SIGNAL_PATTERN, "method": "POST"}) == 2


# ---------------------------------------------------------------------------- registration


def _noop(_req: ApiRequest) -> ApiResponse:
    return ApiResponse()


BAD_ROUTES: list[tuple[str, str, str, dict[str, Any], str]] = [
    ("relative", "GET", "decisions/{id}", {}, "must start with '/'"),
    ("partial-param", "GET", "/decisions/x{id}", {}, "must be a whole segment"),
    ("repeated-param", "GET", "/a/{id}/b/{id}", {}, "appears twice"),
    ("lower-method", "get", "/a", {}, "upper-case"),
    ("healthz", "GET", "/healthz", {}, "served by the server itself"),
    ("authz-unknown-param", "POST", "/s/{ns}/{name}", {"authz": SIGNAL_AUTHZ}, "{namespace}"),
    ("public-with-authz", "POST", "/s/{namespace}/{name}", {"authz": SIGNAL_AUTHZ, "public": True},
     "public route"),
    ("same-shape", "POST", "/signal/v1/namespaces/{ns}/elasticscalers/{n}", {}, "already served"),
]


@pytest.mark.parametrize(("method", "pattern", "kw", "message"), [c[1:] for c in BAD_ROUTES],
                         ids=[c[0] for c in BAD_ROUTES])
def test_bad_routes_refused(method: str, pattern: str, kw: dict[str, Any], message: str) -> None:
    server = ApiServer("127.0.0.1:0", insecure=True, authenticator=None)
    server.add_route("POST", SIGNAL_PATTERN, _noop)
    with pytest.raises(ValueError, match=re.escape(message)):
        server.add_route(method, pattern, _noop, **kw)


def test_constructor_rules() -> None:
    with pytest.raises(ValueError, match="disables the server"):
        ApiServer("0", authenticator=None)
    with pytest.raises(ValueError, match="both or neither"):
        ApiServer(":0", cert_file="x.crt", authenticator=None)


def test_routes_added_while_serving_are_served() -> None:
    server = ApiServer("127.0.0.1:0", insecure=True, authenticator=None)
    server.serve()
    try:
        assert call(server, "GET", "/late", token=None)[0] == 404
        server.add_route("GET", "/late", lambda _r: ApiResponse(200, [1]))
        assert call(server, "GET", "/late", token=None)[:2] == (200, [1])
        assert server.routes == [("GET", "/late")]
    finally:
        server.shutdown()


def test_runnable_serves_until_stop_and_releases_the_port() -> None:
    server = ApiServer("127.0.0.1:0", insecure=True, authenticator=None)
    stop = threading.Event()
    t = threading.Thread(target=server.start, args=(stop,), daemon=True)
    t.start()
    assert server.serving.wait(5)
    port = server.port
    assert port is not None and call(server, "GET", "/healthz", token=None)[0] == 200
    stop.set()
    t.join(10)
    assert not t.is_alive() and server.port is None and not server.serving.is_set()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


# ---------------------------------------------------------------------------- attributes


def test_resource_attributes_substitute_and_describe() -> None:
    attrs = SIGNAL_AUTHZ.substitute({"namespace": "default", "name": "llama"})
    assert attrs.to_spec() == {"verb": "update", "resource": "elasticscalers", "group": "elasticscaler.io",
                               "subresource": "signal", "namespace": "default", "name": "llama"}
    assert SIGNAL_AUTHZ.placeholders() == {"namespace", "name"}
    plain = ResourceAttributes(verb="get", resource="llmslorequirements", group="llm.escaler.io")
    assert plain.substitute({}) is plain
    assert plain.describe() == 'get resource "llmslorequirements" in API group "llm.escaler.io"'
    with pytest.raises(ValueError, match="verb"):
        ResourceAttributes(verb="", resource="x")


def test_kube_authenticator_validates_its_arguments(env: Env) -> None:
    with pytest.raises(ValueError, match="cache_ttl"):
        KubeAuthenticator(env.api.rest(), cache_ttl=0)
    with pytest.raises(ValueError, match="cache_size"):
        KubeAuthenticator(env.api.rest(), cache_size=0)


# ---------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["bash", str(ROOT / "hack" / "webhook-certs.sh"), str(out)], check=True,
                   capture_output=True, timeout=60)
    return out


class AllowAll:
    """An injected Authenticator: one known token, everything allowed."""

    def authenticate(self, token: str) -> UserInfo | None:
        return UserInfo("tester") if token == GOOD else None

    def authorize(self, user: UserInfo, attributes: ResourceAttributes) -> AccessDecision:
        return AccessDecision(attributes.namespace != "forbidden", "namespace is forbidden")


def test_tls_round_trip(certs: Path) -> None:
    seen: list[ApiRequest] = []
    server = ApiServer("127.0.0.1:0", cert_file=str(certs / "tls.crt"), key_file=str(certs / "tls.key"),
                       authenticator=AllowAll())
    server.add_route("POST", SIGNAL_PATTERN, signal_handler(seen), authz=SIGNAL_AUTHZ)
    server.serve()
    try:
        assert server.tls
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        code, doc, _ = call(server, "POST", "/signal/v1/namespaces/ns/elasticscalers/s", {"active": True},
                            context=ctx)
        assert (code, doc["scaler"]) == (202, "ns/s") and seen[0].user == UserInfo("tester")
        assert call(server, "POST", signal("forbidden", "s"), {}, context=ctx)[0] == 403
        # plain HTTP to the TLS port fails its handshake and does not disturb the server
        with contextlib.suppress(OSError, http.client.HTTPException):
            call(server, "GET", "/healthz")
        assert call(server, "GET", "/healthz", context=ctx)[:2] == (200, b"ok")
    finally:
        server.shutdown()


def test_bad_certificate_fails_serve(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a cert")
    (tmp_path / "tls.key").write_text("not a key")
    server = ApiServer("127.0.0.1:0", cert_file=str(tmp_path / "tls.crt"), key_file=str(tmp_path / "tls.key"),
                       authenticator=None)
    with pytest.raises(ssl.SSLError):
        server.serve()
    assert server.port is None


# ---------------------------------------------------------------------------- manager wiring


@contextlib.contextmanager
def running(mgr: Manager) -> Iterator[list[int]]:
    stop = threading.Event()
    codes: list[int] = []
    t = threading.Thread(target=lambda: codes.append(mgr.start(stop)), daemon=True)
    t.start()
    try:
        yield codes
    finally:
        stop.set()
        t.join(30)


def test_manager_serves_the_api_once_it_leads() -> None:
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper())
    server = ApiServer("127.0.0.1:0", insecure=True, authenticator=None)
    mgr.add_api_server(server)
    assert mgr.api_server is server
    with pytest.raises(ValueError, match="already has an API server"):
        mgr.add_api_server(ApiServer("127.0.0.1:0", insecure=True, authenticator=None))
    with running(mgr) as codes:
        assert server.serving.wait(10)
        assert call(server, "GET", "/healthz", token=None)[0] == 200
    assert codes == [0] and server.port is None


def test_standby_does_not_serve_the_api() -> None:
    clock = FakeClock()
    lease = FlakyLeaseClient()
    InMemoryLeaseClient.create(lease, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "escaler-manager", "namespace": "default"},
        "spec": {"holderIdentity": "other", "leaseDurationSeconds": 15}})
    mgr = Manager.for_testing(FakeCluster().lw_factory, FakeMapper(), lease, leader_election_identity="me",
                              clock=clock)
    server = ApiServer("127.0.0.1:0", insecure=True, authenticator=None)
    mgr.add_api_server(server)
    with running(mgr):
        wait_until(lambda: lease.calls.count("get") >= 1, what="first election attempt")
        assert mgr.caches_synced.is_set() and not mgr.can_write.is_set()
        assert not server.serving.is_set() and server.port is None
