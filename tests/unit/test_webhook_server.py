"""The webhook's HTTPS server over a real loopback socket: TLS with a certificate made by
``hack/webhook-certs.sh``, the AdmissionReview round trip, HTTP edge cases, certificate reload,
the Runnable contract, metrics, and the shipped ValidatingWebhookConfiguration."""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from webhook_samples import review_body, sample

from escaler.api.registry import KINDS
from escaler.webhook import WebhookServer, validators
from escaler.webhook.manifests import render_yaml, validating_webhook_configuration
from escaler.webhook.server import MAX_BODY_BYTES

ROOT = Path(__file__).resolve().parents[2]
CERTS_SCRIPT = ROOT / "hack" / "webhook-certs.sh"
MANIFEST = ROOT / "manifests" / "webhook" / "validating-webhook-configuration.yaml"
ES_PATH = "/validate-elasticscaler-io-v1alpha1-elasticscaler"



def make_certs(out: Path) -> Path:
    subprocess.run(["bash", str(CERTS_SCRIPT), str(out)], check=True, capture_output=True, timeout=60)
    return out


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def server(certs: Path, registry: CollectorRegistry) -> Iterator[WebhookServer]:
    srv = WebhookServer(
        validators(),
        cert_file=str(certs / "tls.crt"),
        key_file=str(certs / "tls.key"),
        bind_address="127.0.0.1:0",
        registry=registry,
    )
    srv.serve()
    try:
        yield srv
    finally:
        srv.shutdown()


def client_context(ca: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    return ctx


def request(
    srv: WebhookServer,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    ca: Path,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    assert srv.port is not None
    conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=client_context(ca), timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.headers)
    finally:
        conn.close()


def test_tls_round_trip_allowed_and_denied(server: WebhookServer, certs: Path) -> None:
    status, body, headers = request(
        server, "POST", ES_PATH, review_body(sample("elasticscaler"), uid="u1"), ca=certs / "ca.crt"
    )
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["response"] == {"uid": "u1", "allowed": True}
    bad = sample(
        "elasticscaler", {"spec.trigger.metricsTrigger.metrics[3].externalServer.endpoint": "ftp://p"}
    )
    status, body, _ = request(server, "POST", ES_PATH, review_body(bad, uid="u2"), ca=certs / "ca.crt")
    resp = json.loads(body)["response"]
    assert status == 200 and resp["uid"] == "u2" and resp["allowed"] is False
    assert resp["status"]["code"] == 422
    assert (
        "spec.trigger.metricsTrigger.metrics[3].externalServer.endpoint: invalid endpoint URL"
        in resp["status"]["message"]
    )


def test_every_kind_has_its_path(server: WebhookServer, certs: Path) -> None:
    assert server.paths == sorted(info.webhook_path for info in KINDS.values())
    for name in ("tidal", "rsg", "llmscaler", "llmslo", "jobslo"):
        obj = sample(name)
        path = KINDS[obj["kind"]].webhook_path
        status, body, _ = request(server, "POST", path, review_body(obj), ca=certs / "ca.crt")
        assert status == 200 and json.loads(body)["response"]["allowed"] is True, (name, body)


def test_certificate_is_verified_by_hostname_and_ca(
    server: WebhookServer, certs: Path, tmp_path: Path
) -> None:
    other = make_certs(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        request(server, "GET", "/healthz", ca=other / "ca.crt")
    assert request(server, "GET", "/healthz", ca=certs / "ca.crt")[:2] == (200, b"ok")


HTTP_CASES = [
    ("healthz", "GET", "/healthz", None, 200),
    ("head-healthz", "HEAD", "/healthz", None, 200),
    ("get-on-validate-path", "GET", ES_PATH, None, 405),
    ("post-unknown-path", "POST", "/validate-foo", b"{}", 404),
    ("get-unknown-path", "GET", "/nope", None, 404),
    ("put", "PUT", ES_PATH, b"{}", 405),
    ("malformed-json", "POST", ES_PATH, b"{not json", 400),
    ("empty-body", "POST", ES_PATH, b"", 400),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"), [c[1:] for c in HTTP_CASES], ids=[c[0] for c in HTTP_CASES]
)
def test_http_edges(
    server: WebhookServer, certs: Path, method: str, path: str, body: bytes | None, expected: int
) -> None:
    status, _, _ = request(server, method, path, body, ca=certs / "ca.crt")
    assert status == expected


def raw_tls(server: WebhookServer, certs: Path, payload: bytes) -> bytes:
    assert server.port is not None
    ctx = client_context(certs / "ca.crt")
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(payload)
        chunks = []
        while True:
            try:
                chunk = tls.recv(65536)
            except (ssl.SSLError, OSError):
                break
            if not chunk:
                break
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks):
                break
        return b"".join(chunks)


def test_missing_content_length_is_411(server: WebhookServer, certs: Path) -> None:
    head = raw_tls(server, certs, f"POST {ES_PATH} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert head.startswith(b"HTTP/1.1 411")


def test_chunked_body_is_411(server: WebhookServer, certs: Path) -> None:
    head = raw_tls(
        server, certs, f"POST {ES_PATH} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    )
    assert head.startswith(b"HTTP/1.1 411")


def test_oversized_body_is_413_without_reading_it(server: WebhookServer, certs: Path) -> None:
    head = raw_tls(
        server,
        certs,
        f"POST {ES_PATH} HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode(),
    )
    assert head.startswith(b"HTTP/1.1 413")


def test_keep_alive_serves_several_requests(server: WebhookServer, certs: Path) -> None:
    assert server.port is not None
    conn = http.client.HTTPSConnection(
        "127.0.0.1", server.port, context=client_context(certs / "ca.crt"), timeout=10
    )
    try:
        for uid in ("a", "b", "c"):
            conn.request("POST", ES_PATH, body=review_body(sample("elasticscaler"), uid=uid))
            resp = conn.getresponse()
            assert json.loads(resp.read())["response"]["uid"] == uid
    finally:
        conn.close()


def test_plain_http_and_stalled_clients_do_not_block_others(server: WebhookServer, certs: Path) -> None:
    assert server.port is not None
    # a client that speaks plain HTTP fails its handshake; one that says nothing stalls its own thread
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        with contextlib.suppress(OSError):
            plain.recv(100)
    stalled = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        started = time.monotonic()
        assert request(server, "GET", "/healthz", ca=certs / "ca.crt")[0] == 200
        assert time.monotonic() - started < 5
    finally:
        stalled.close()


def test_rotated_certificate_is_picked_up(certs: Path, tmp_path: Path) -> None:
    live = tmp_path / "live"
    shutil.copytree(certs, live)
    srv = WebhookServer(
        validators(),
        cert_file=str(live / "tls.crt"),
        key_file=str(live / "tls.key"),
        bind_address="127.0.0.1:0",
    )
    srv.serve()
    try:
        assert request(srv, "GET", "/healthz", ca=certs / "ca.crt")[0] == 200
        make_certs(live)  # a new CA and serving pair, as a Secret update would bring
        assert request(srv, "GET", "/healthz", ca=live / "ca.crt")[0] == 200
        with pytest.raises(ssl.SSLCertVerificationError):
            request(srv, "GET", "/healthz", ca=certs / "ca.crt")
        # a broken pair keeps the last good one
        (live / "tls.key").write_text("garbage")
        assert request(srv, "GET", "/healthz", ca=live / "ca.crt")[0] == 200
    finally:
        srv.shutdown()


def test_runnable_serves_until_stop(certs: Path) -> None:
    srv = WebhookServer(
        validators(),
        cert_file=str(certs / "tls.crt"),
        key_file=str(certs / "tls.key"),
        bind_address="127.0.0.1:0",
    )
    stop = threading.Event()
    t = threading.Thread(target=srv.start, args=(stop,), daemon=True)
    t.start()
    assert srv.serving.wait(10)
    port = srv.port
    assert port is not None
    assert request(srv, "GET", "/healthz", ca=certs / "ca.crt")[0] == 200
    stop.set()
    t.join(10)
    assert not t.is_alive() and srv.port is None and not srv.serving.is_set()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_bad_certificate_fails_serve(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("not a cert")
    (tmp_path / "tls.key").write_text("not a key")
    srv = WebhookServer(
        validators(),
        cert_file=str(tmp_path / "tls.crt"),
        key_file=str(tmp_path / "tls.key"),
        bind_address="127.0.0.1:0",
    )
    with pytest.raises(ssl.SSLError):
        srv.serve()
    assert srv.port is None


def test_disabled_bind_address_refused(certs: Path) -> None:
    with pytest.raises(ValueError, match="disables the server"):
        WebhookServer(
            validators(), cert_file=str(certs / "tls.crt"), key_file=str(certs / "tls.key"), bind_address="0"
        )


def test_request_metrics(server: WebhookServer, certs: Path, registry: CollectorRegistry) -> None:
    request(server, "POST", ES_PATH, review_body(sample("elasticscaler")), ca=certs / "ca.crt")
    request(server, "POST", ES_PATH, b"nope", ca=certs / "ca.crt")
    value = registry.get_sample_value
    assert value("controller_runtime_webhook_requests_total", {"webhook": ES_PATH, "code": "200"}) == 1
    assert value("controller_runtime_webhook_requests_total", {"webhook": ES_PATH, "code": "400"}) == 1
    assert value("controller_runtime_webhook_latency_seconds_count", {"webhook": ES_PATH}) == 2
    assert value("controller_runtime_webhook_requests_in_flight", {"webhook": ES_PATH}) == 0


def test_shipped_configuration_is_generated() -> None:
    assert MANIFEST.read_text() == render_yaml()
    doc: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    assert doc == validating_webhook_configuration()
    hooks = doc["webhooks"]
    assert len(hooks) == len(KINDS) == 6
    for hook, info in zip(hooks, KINDS.values(), strict=True):
        assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
        assert hook["rules"][0]["resources"] == [info.plural]
        assert hook["clientConfig"]["service"] == {
            "name": "escaler-webhook",
            "namespace": "escaler-system",
            "path": info.webhook_path,
            "port": 443,
        }
        assert "caBundle" not in hook["clientConfig"]  # the manager (or cert-manager) sets it
