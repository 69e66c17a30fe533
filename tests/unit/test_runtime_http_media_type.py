"""Issue 15, hostile input: a request body that says it is not JSON is refused with 415 on the
manager's API server (signal push, decisions) and on the admission webhook, as the SLO API does.

Before this, both servers parsed any body as JSON whatever its ``Content-Type``: a form post or a
``text/plain`` body that happened to be valid JSON was accepted (202 on the signal push). Real
sockets on 127.0.0.1; the API server runs with authentication on against the in-process fake API
server, so the tests also show the refusal costs no TokenReview (a header check, like the body
cap, comes before authentication).
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from test_kube_fakeapi import FakeAPI
from test_runtime_apiserver import SIGNAL_AUTHZ, SIGNAL_PATTERN, Env, Reviews, call, signal, signal_handler
from test_webhook_server import ES_PATH, make_certs, request
from webhook_samples import review_body, sample

from escaler.clock import FakeClock
from escaler.runtime import httpbase
from escaler.runtime.apiserver import ApiRequest, ApiResponse, ApiServer
from escaler.runtime.authn import SUBJECT_ACCESS_REVIEW_PATH, TOKEN_REVIEW_PATH, KubeAuthenticator
from escaler.webhook import WebhookServer, validators

ES_SAMPLE = "elasticscaler"
ACTIVE = b'{"active": true}'

REFUSED = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/yaml",
    "application/jsonp",
    "application/json-seq",
    "text/json+x",
    "",  # present but empty
]
ACCEPTED = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON",
    "application/merge-patch+json",
    "application/vnd.escaler.signal+json",
]


@pytest.fixture
def env() -> Iterator[Env]:
    """The API server with authentication on (a fake API server answers the reviews)."""
    reviews = Reviews()
    with FakeAPI() as api:
        api.on("POST", TOKEN_REVIEW_PATH, reviews.token_review)
        api.on("POST", SUBJECT_ACCESS_REVIEW_PATH, reviews.access_review)
        clock = FakeClock()
        registry = CollectorRegistry()
        server = ApiServer("127.0.0.1:0", insecure=True, clock=clock, registry=registry,
                           authenticator=KubeAuthenticator(api.rest(), clock=clock))
        calls: list[ApiRequest] = []
        server.add_route("POST", SIGNAL_PATTERN, signal_handler(calls), authz=SIGNAL_AUTHZ)
        server.add_route("GET", "/decisions/{serviceId}", lambda r: ApiResponse(200, {"replicas": 3}))
        server.serve()
        try:
            yield Env(api, reviews, clock, server, registry, calls)
        finally:
            server.shutdown()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize("ctype, expected", [(c, False) for c in REFUSED] + [(c, True) for c in ACCEPTED],
                         ids=[f"refuse-{c or 'empty'}" for c in REFUSED] + [f"accept-{c}" for c in ACCEPTED])
def test_json_media_types(ctype: str, expected: bool) -> None:
    assert httpbase.is_json_media_type(ctype) is expected


@pytest.mark.parametrize("ctype", REFUSED[:4], ids=REFUSED[:4])
def test_signal_push_with_a_non_json_content_type_is_415_before_authentication(env: Env, ctype: str) -> None:
    code, doc, _ = call(env.server, "POST", signal(), ACTIVE, headers={"Content-Type": ctype})
    assert code == 415, doc
    assert doc["error"]["code"] == "unsupported_media_type"
    assert f"Content-Type {ctype!r}" in doc["error"]["message"]
    assert "application/json" in doc["error"]["message"]
    assert env.calls == [] and env.reviews_made() == (0, 0)


@pytest.mark.parametrize("ctype", ["application/json", "application/json; charset=utf-8", None],
                         ids=["json", "json-charset", "absent"])
def test_signal_push_with_json_or_no_content_type_is_served(env: Env, ctype: str | None) -> None:
    headers = {"Content-Type": ctype} if ctype is not None else {}
    code, doc, _ = call(env.server, "POST", signal(), ACTIVE, headers=headers)
    assert code == 202, doc
    assert env.calls[-1].body == {"active": True}


def test_a_get_without_a_body_needs_no_content_type(env: Env) -> None:
    code, doc, _ = call(env.server, "GET", "/decisions/chat", headers={"Content-Type": "text/plain"})
    assert code == 200, doc


@pytest.fixture
def webhook(certs: Path) -> Iterator[WebhookServer]:
    srv = WebhookServer(validators(), cert_file=str(certs / "tls.crt"), key_file=str(certs / "tls.key"),
                        bind_address="127.0.0.1:0")
    srv.serve()
    try:
        yield srv
    finally:
        srv.shutdown()


def test_webhook_refuses_a_non_json_review_with_415(webhook: WebhookServer, certs: Path) -> None:
    body = review_body(sample(ES_SAMPLE))
    status, payload, _ = request(webhook, "POST", ES_PATH, body, ca=certs / "ca.crt",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415, payload
    assert b"Content-Type 'application/x-www-form-urlencoded'" in payload and b"application/json" in payload
    status, payload, _ = request(webhook, "POST", ES_PATH, body, ca=certs / "ca.crt",
                                 headers={"Content-Type": "application/json"})
    assert status == 200 and json.loads(payload)["response"]["allowed"] is True, payload


def test_webhook_serves_the_next_review_after_a_415(webhook: WebhookServer, certs: Path) -> None:
    assert webhook.port is not None
    body = review_body(sample(ES_SAMPLE))
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, timeout=10,
                                       context=ssl.create_default_context(cafile=str(certs / "ca.crt")))
    try:
        conn.request("POST", ES_PATH, body=body, headers={"Content-Type": "text/plain"})
        first = conn.getresponse()
        first.read()
        conn.request("POST", ES_PATH, body=body, headers={"Content-Type": "application/json"})
        second = conn.getresponse()
        assert (first.status, second.status) == (415, 200), second.read()[:200]
    finally:
        conn.close()

