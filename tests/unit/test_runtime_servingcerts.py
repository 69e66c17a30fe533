"""The serving-certificate Secret (escaler.runtime.servingcerts) against a fake API: get or create,
a race between two replicas, renewal on the injected clock, a Secret that does not cover the names
or does not parse, and the webhook configuration's caBundle patched only when it differs."""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import ssl
import threading
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from fakeapi import wait_until

from escaler.clock import FakeClock
from escaler.errors import StatusError
from escaler.runtime.servingcerts import (
    CA_CERT,
    CA_KEY,
    DEFAULT_CA_LIFETIME,
    DEFAULT_CERT_LIFETIME,
    TLS_CERT,
    TLS_KEY,
    CAConfigMap,
    CertPolicy,
    SecretRef,
    ServingCertError,
    ServingCertFiles,
    ServingCerts,
    ServingCertSecret,
    WebhookCABundle,
    assess,
    service_dns_names,
)

NS, NAME = "escaler-system", "escaler-serving-cert"
REF = SecretRef(NS, NAME)
NAMES = (*service_dns_names("escaler-manager", NS), "escaler-webhook.escaler-system.svc")
POLICY = CertPolicy(NAMES)
START = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
HOOK = "escaler-validating-webhook"
HOOK_PATH = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{HOOK}"


class FakeRest:
    """Objects by path with resourceVersions: GET, POST (409 when it exists), PUT (409 on a stale
    resourceVersion), JSON PATCH with a resourceVersion ``test``."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.rv = 0
        self.mu = threading.Lock()

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return obj

    def put_object(self, path: str, obj: dict[str, Any]) -> None:
        self.objects[path] = self._stamp(obj)

    def request(self, method: str, path: str, *, query: Any = None, body: Any = None,
                content_type: str = "application/json", timeout: Any = None,
                retries: bool = True) -> dict[str, Any]:
        assert timeout is not None, "every call has a deadline"
        with self.mu:
            self.calls.append((method, path))
            if method == "GET":
                if path not in self.objects:
                    raise StatusError(404, "NotFound", path)
                return copy.deepcopy(self.objects[path])
            if method == "POST":
                target = f"{path}/{body['metadata']['name']}"
                if target in self.objects:
                    raise StatusError(409, "AlreadyExists", target)
                self.objects[target] = self._stamp(body)
                return copy.deepcopy(self.objects[target])
            if method == "PUT":
                current = self.objects.get(path)
                if current is None:
                    raise StatusError(404, "NotFound", path)
                if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    raise StatusError(409, "Conflict", path)
                self.objects[path] = self._stamp(body)
                return copy.deepcopy(self.objects[path])
            if method == "PATCH":
                assert content_type == "application/json-patch+json"
                current = copy.deepcopy(self.objects[path])
                for op in body:
                    if op["op"] == "test":
                        assert op["path"] == "/metadata/resourceVersion"
                        if current["metadata"]["resourceVersion"] != op["value"]:
                            raise StatusError(422, "Invalid", "test failed")
                        continue
                    parts = op["path"].strip("/").split("/")
                    node: Any = current
                    for part in parts[:-1]:
                        node = node[int(part)] if isinstance(node, list) else node[part]
                    node[parts[-1]] = op["value"]
                self.objects[path] = self._stamp(current)
                return copy.deepcopy(self.objects[path])
        raise AssertionError(f"unexpected {method} {path}")

    def writes(self) -> list[tuple[str, str]]:
        return [c for c in self.calls if c[0] != "GET"]

    def data(self) -> dict[str, bytes]:
        raw = self.objects[REF.path]["data"]
        return {k: base64.b64decode(v) for k, v in raw.items()}


def _secret(rest: FakeRest, clock: FakeClock, policy: CertPolicy = POLICY) -> ServingCertSecret:
    return ServingCertSecret(rest, REF, policy, clock)


def _clock() -> FakeClock:
    clock = FakeClock()
    clock.set_wall(START)
    return clock


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem)[0]


def _verifies(tmp_path: Any, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, name: str) -> None:
    """A real TLS handshake in memory: a server with the pair, a client trusting ca_pem only."""
    (tmp_path / "c.pem").write_bytes(cert_pem)
    (tmp_path / "k.pem").write_bytes(key_pem)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(tmp_path / "c.pem"), str(tmp_path / "k.pem"))
    client = ssl.create_default_context(cadata=ca_pem.decode())
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    cs = client.wrap_bio(c_in, c_out, server_hostname=name)
    ss = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for key, sock, src, dst in (("c", cs, c_out, s_in), ("s", ss, s_out, c_in)):
            if not done[key]:
                try:
                    sock.do_handshake()
                    done[key] = True
                except ssl.SSLWantReadError:
                    pass
            dst.write(src.read())
        if all(done.values()):
            return
    raise AssertionError("handshake did not finish")


# ------------------------------------------------------------------------------ get or create


def test_an_absent_secret_is_created_with_a_ca_signed_pair_clients_verify(tmp_path: Any) -> None:
    rest = FakeRest()
    bundle = _secret(rest, _clock()).ensure()
    assert rest.writes() == [("POST", REF.collection)]
    stored = rest.objects[REF.path]
    assert stored["type"] == "kubernetes.io/tls"
    assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "escaler"
    assert rest.data() == bundle.data()
    cert = _cert(bundle.cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(NAMES)
    _verifies(tmp_path, bundle.ca_pem, bundle.cert_pem, bundle.key_pem, "escaler-manager.escaler-system.svc")
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        _verifies(tmp_path, bundle.ca_pem, bundle.cert_pem, bundle.key_pem, "elsewhere.example")


def test_a_valid_secret_is_adopted_without_a_write() -> None:
    rest = FakeRest()
    first = _secret(rest, _clock()).ensure()
    rest.calls.clear()
    again = _secret(rest, _clock()).ensure()
    assert again == first
    assert rest.writes() == []


def test_two_replicas_racing_at_start_serve_the_same_certificate() -> None:
    rest = FakeRest()
    other = _secret(rest, _clock())
    raced: dict[str, Any] = {}
    send = rest.request

    def the_other_replica_creates_first(method: str, path: str, **kw: Any) -> dict[str, Any]:
        # this replica read "absent" and is about to create: the other one gets there first
        if method == "POST" and not raced:
            raced["started"] = True
            raced["bundle"] = other.ensure()
        return send(method, path, **kw)

    rest.request = the_other_replica_creates_first  # type: ignore[method-assign]
    bundle = _secret(rest, _clock()).ensure()
    assert bundle == raced["bundle"]
    assert [m for m, _ in rest.writes()] == ["POST", "POST"]  # one created, one refused with 409
    assert rest.data() == bundle.data()


# ------------------------------------------------------------------------------ renewal


def test_the_serving_certificate_is_renewed_in_its_last_third_with_the_same_ca() -> None:
    rest, clock = FakeRest(), _clock()
    secret = _secret(rest, clock)
    first = secret.ensure()
    clock.set_wall(START + datetime.timedelta(seconds=DEFAULT_CERT_LIFETIME * 0.6))
    assert secret.ensure() == first  # not due yet: nothing written
    clock.set_wall(START + datetime.timedelta(seconds=DEFAULT_CERT_LIFETIME * 0.7))
    renewed = secret.ensure()
    assert renewed.cert_pem != first.cert_pem and renewed.key_pem != first.key_pem
    assert renewed.ca_pem == first.ca_pem and renewed.ca_key_pem == first.ca_key_pem
    assert _cert(renewed.cert_pem).not_valid_after_utc > _cert(first.cert_pem).not_valid_after_utc
    assert rest.writes()[-1] == ("PUT", REF.path)


def test_a_ca_near_expiry_is_replaced_and_the_old_one_stays_trusted_while_valid(tmp_path: Any) -> None:
    rest, clock = FakeRest(), _clock()
    secret = _secret(rest, clock)
    first = secret.ensure()
    old_ca = _cert(first.ca_pem)
    clock.set_wall(START + datetime.timedelta(seconds=DEFAULT_CA_LIFETIME * 0.7))
    renewed = secret.ensure()
    bundle = x509.load_pem_x509_certificates(renewed.ca_pem)
    assert len(bundle) == 2 and bundle[1] == old_ca and bundle[0] != old_ca
    assert _cert(renewed.cert_pem).issuer == bundle[0].subject
    # a client holding the new bundle still verifies the old serving certificate
    old_pair = (first.cert_pem, first.key_pem)
    _verifies(tmp_path, renewed.ca_pem, *old_pair, "escaler-manager")
    assert assess(renewed.data(), POLICY, clock.now())[0] == "keep"


def test_renewal_keeps_a_serving_certificate_within_its_cas_validity() -> None:
    policy = CertPolicy(NAMES, ca_lifetime=300 * 86400.0, cert_lifetime=300 * 86400.0)
    bundle = _secret(FakeRest(), _clock(), policy).ensure()
    assert _cert(bundle.cert_pem).not_valid_after_utc <= _cert(bundle.ca_pem).not_valid_after_utc


# ------------------------------------------------------------------------------ bad Secrets


def test_a_secret_that_does_not_cover_the_names_gets_a_new_serving_certificate(
        caplog: pytest.LogCaptureFixture) -> None:
    rest, clock = FakeRest(), _clock()
    narrow = _secret(rest, clock, CertPolicy(("escaler-manager",))).ensure()
    caplog.set_level("INFO", logger="escaler.runtime.servingcerts")
    wide = _secret(rest, clock).ensure()
    assert wide.ca_pem == narrow.ca_pem and wide.cert_pem != narrow.cert_pem
    sans = _cert(wide.cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(NAMES) <= set(sans.get_values_for_type(x509.DNSName))
    assert "does not cover escaler-manager.escaler-system" in caplog.text


@pytest.mark.parametrize(("key", "value", "why"), [
    (TLS_CERT, b"not a pem", "its tls.crt does not parse"),
    (CA_KEY, b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "its ca.key does not parse"),
    (CA_CERT, None, "it has no ca.crt"),
], ids=["garbled-cert", "garbled-ca-key", "missing-ca"])
def test_a_secret_that_does_not_parse_is_replaced_saying_why(
        key: str, value: bytes | None, why: str, caplog: pytest.LogCaptureFixture) -> None:
    rest, clock = FakeRest(), _clock()
    data = _secret(rest, clock).ensure().data()
    if value is None:
        del data[key]
    else:
        data[key] = value
    obj = rest.objects[REF.path]
    obj["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    caplog.set_level("INFO", logger="escaler.runtime.servingcerts")
    fixed = _secret(rest, clock).ensure()
    assert assess(fixed.data(), POLICY, clock.now()) == ("keep", "valid")
    assert rest.writes()[-1] == ("PUT", REF.path)
    assert why in caplog.text and "replaced with a new CA" in caplog.text


def test_a_ca_that_does_not_match_its_key_is_replaced() -> None:
    rest, clock = FakeRest(), _clock()
    a = _secret(rest, clock).ensure()
    b = ServingCertSecret(FakeRest(), REF, POLICY, clock).ensure()
    mixed = {**a.data(), CA_KEY: b.ca_key_pem}
    assert assess(mixed, POLICY, clock.now()) == ("replace", "its ca.key is not the key of its CA")
    foreign = {**a.data(), TLS_CERT: b.cert_pem, TLS_KEY: b.key_pem}
    assert assess(foreign, POLICY, clock.now()) == (
        "renew-serving", "its serving certificate is not signed by its CA")


def test_a_secret_of_another_type_is_refused_naming_the_fix() -> None:
    rest = FakeRest()
    rest.put_object(REF.path, {"metadata": {"name": NAME, "namespace": NS}, "type": "Opaque", "data": {}})
    with pytest.raises(ServingCertError, match=r"type Opaque, not kubernetes\.io/tls.*delete secret"):
        _secret(rest, _clock()).ensure()
    assert rest.writes() == []


@pytest.mark.parametrize(("text", "message"), [
    ("noslash", "must be NAMESPACE/NAME"),
    ("ns/", "must be NAMESPACE/NAME"),
    ("Bad_NS/name", "the namespace 'Bad_NS' is not a valid Kubernetes name"),
], ids=["no-slash", "no-name", "bad-namespace"])
def test_a_bad_secret_reference_is_refused_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--serving-cert-secret: .*{message}"):
        SecretRef.parse(text)


def test_a_policy_refuses_bad_names_and_lifetimes() -> None:
    with pytest.raises(ValueError, match="at least one name"):
        CertPolicy(())
    with pytest.raises(ValueError, match="'bad name' is neither a DNS name nor an IP"):
        CertPolicy(("bad name",))
    with pytest.raises(ValueError, match="never outlives its CA"):
        CertPolicy(NAMES, ca_lifetime=10.0, cert_lifetime=20.0)


# ------------------------------------------------------------------------------ files and runnable


def test_files_are_private_and_rewritten_only_on_change(tmp_path: Any) -> None:
    rest, clock = FakeRest(), _clock()
    files = ServingCertFiles(str(tmp_path / "certs"))
    certs = ServingCerts(_secret(rest, clock), files)
    bundle = certs.provision()
    assert (tmp_path / "certs").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "certs" / "tls.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "certs" / "tls.crt").read_bytes() == bundle.cert_pem
    assert (tmp_path / "certs" / "ca.crt").read_bytes() == bundle.ca_pem
    assert not (tmp_path / "certs" / "ca.key").exists()
    assert files.write(bundle) is False


def test_the_runnable_picks_up_another_replicas_renewal(tmp_path: Any) -> None:
    rest, clock = FakeRest(), _clock()
    files = ServingCertFiles(str(tmp_path / "certs"))
    certs = ServingCerts(_secret(rest, clock), files, check_interval=3600.0)
    first = certs.provision()
    stop = threading.Event()
    t = threading.Thread(target=certs.start, args=(stop,), daemon=True)
    t.start()
    clock.block_until_waiters(1)
    # months later another replica renews first; this one's next check serves its certificate
    clock.set_wall(START + datetime.timedelta(seconds=DEFAULT_CERT_LIFETIME * 0.7))
    theirs = ServingCertSecret(rest, REF, POLICY, clock).ensure()
    assert theirs.cert_pem != first.cert_pem
    writes = len(rest.writes())
    clock.step(3600.0)
    wait_until(lambda: (tmp_path / "certs" / "tls.crt").read_bytes() == theirs.cert_pem)
    stop.set()
    t.join(5.0)
    assert not t.is_alive()
    assert len(rest.writes()) == writes  # adopted, not renewed again


# ------------------------------------------------------------------------------ the webhook caBundle


def _hook_config(bundle: str | None) -> dict[str, Any]:
    hooks = []
    for i in range(2):
        client: dict[str, Any] = {"service": {"name": "escaler-webhook", "namespace": NS, "path": f"/v{i}"}}
        if bundle is not None:
            client["caBundle"] = bundle
        hooks.append({"name": f"h{i}.escaler.io", "clientConfig": client})
    return {"metadata": {"name": HOOK}, "webhooks": hooks}


def test_the_ca_bundle_is_patched_only_when_it_differs(tmp_path: Any) -> None:
    rest, clock = FakeRest(), _clock()
    rest.put_object(HOOK_PATH, _hook_config("Cg=="))
    certs = ServingCerts(_secret(rest, clock), ServingCertFiles(str(tmp_path)),
                         webhook=WebhookCABundle(rest, HOOK))
    bundle = _secret(rest, clock).ensure()
    assert certs.publish_ca() == "patched"
    want = base64.b64encode(bundle.ca_pem).decode()
    assert [h["clientConfig"]["caBundle"] for h in rest.objects[HOOK_PATH]["webhooks"]] == [want, want]
    patches = [c for c in rest.writes() if c[1] == HOOK_PATH]
    assert patches == [("PATCH", HOOK_PATH)]
    assert certs.publish_ca() == "current"
    assert [c for c in rest.writes() if c[1] == HOOK_PATH] == patches


def test_a_webhook_without_a_bundle_gets_one_and_a_missing_configuration_is_not_created() -> None:
    rest = FakeRest()
    rest.put_object(HOOK_PATH, _hook_config(None))
    assert WebhookCABundle(rest, HOOK).sync(b"PEM") == "patched"
    hooks = rest.objects[HOOK_PATH]["webhooks"]
    assert hooks[1]["clientConfig"]["caBundle"] == base64.b64encode(b"PEM").decode()
    assert WebhookCABundle(rest, "absent").sync(b"PEM") == "absent"
    assert all(path != "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/absent"
               for method, path in rest.writes())


def test_a_concurrent_change_of_the_configuration_fails_the_patch() -> None:
    rest = FakeRest()
    rest.put_object(HOOK_PATH, _hook_config("Cg=="))
    original = rest.request

    def change_between_read_and_patch(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if method == "PATCH":
            rest.put_object(HOOK_PATH, rest.objects[HOOK_PATH])  # a new resourceVersion
        return original(method, path, **kw)

    rest.request = change_between_read_and_patch  # type: ignore[method-assign]
    with pytest.raises(StatusError, match="test failed"):
        WebhookCABundle(rest, HOOK).sync(b"PEM")


def test_a_failed_check_keeps_the_files_and_the_next_one_recovers(tmp_path: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    rest, clock = FakeRest(), _clock()
    certs = ServingCerts(_secret(rest, clock), ServingCertFiles(str(tmp_path / "certs")), check_interval=60.0)
    first = certs.provision()
    send = rest.request
    failures = [StatusError(503, "ServiceUnavailable", "etcd is down")]

    def flaky(method: str, path: str, **kw: Any) -> dict[str, Any]:
        if failures:
            raise failures.pop()
        return send(method, path, **kw)

    rest.request = flaky  # type: ignore[method-assign]
    stop = threading.Event()
    t = threading.Thread(target=certs.start, args=(stop,), daemon=True)
    t.start()
    clock.block_until_waiters(1)
    clock.step(60.0)
    wait_until(lambda: "still serving the previous certificate" in caplog.text)
    assert (tmp_path / "certs" / "tls.crt").read_bytes() == first.cert_pem
    rest.calls.clear()
    clock.block_until_waiters(1)
    clock.step(60.0)
    wait_until(lambda: ("GET", REF.path) in rest.calls)
    stop.set()
    t.join(5.0)
    assert not t.is_alive()
    assert rest.writes() == []


def test_the_ca_is_published_in_a_configmap_and_rewritten_only_when_it_changes(tmp_path: Any) -> None:
    rest, clock = FakeRest(), _clock()
    cm = CAConfigMap(rest, SecretRef(NS, "escaler-ca"))
    certs = ServingCerts(_secret(rest, clock), ServingCertFiles(str(tmp_path)), ca_configmap=cm)
    bundle = certs.provision()
    assert certs.publish_ca() == "current"  # no webhook: nothing to wait for
    assert rest.objects[cm.path]["data"] == {"ca.crt": bundle.ca_pem.decode()}
    assert rest.objects[cm.path]["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "escaler"
    rest.calls.clear()
    certs.publish_ca()
    assert rest.writes() == []
    # a new CA reaches the ConfigMap (an update carrying the resourceVersion read)
    clock.set_wall(START + datetime.timedelta(seconds=DEFAULT_CA_LIFETIME * 0.7))
    renewed = certs.provision()
    certs.publish_ca()
    assert rest.objects[cm.path]["data"]["ca.crt"] == renewed.ca_pem.decode()
    assert ("PUT", cm.path) in rest.writes()


def test_a_server_context_built_elsewhere_serves_the_renewed_pair_without_a_restart(tmp_path: Any) -> None:
    """The SLO API's case: uvicorn builds its context once; the mounted pair is renewed on disk."""
    from escaler.runtime.tls import CertificateReloader, reload_on_handshake

    rest, clock = FakeRest(), _clock()
    files = ServingCertFiles(str(tmp_path / "certs"))
    certs = ServingCerts(_secret(rest, clock), files)
    first = certs.provision()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # what uvicorn builds from the files at start
    ctx.load_cert_chain(files.cert_file, files.key_file)
    reload_on_handshake(ctx, CertificateReloader(files.cert_file, files.key_file, name="slo-api"))

    def served() -> bytes:
        client = ssl.create_default_context(cadata=first.ca_pem.decode())
        c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        cs = client.wrap_bio(c_in, c_out, server_hostname="escaler-manager")
        ss = ctx.wrap_bio(s_in, s_out, server_side=True)
        for _ in range(20):
            for sock, src, dst in ((cs, c_out, s_in), (ss, s_out, c_in)):
                with contextlib.suppress(ssl.SSLWantReadError):
                    sock.do_handshake()
                dst.write(src.read())
        der = cs.getpeercert(binary_form=True)
        assert der is not None
        return der

    assert served() == _cert(first.cert_pem).public_bytes(serialization.Encoding.DER)
    clock.set_wall(START + datetime.timedelta(seconds=DEFAULT_CERT_LIFETIME * 0.7))
    renewed = certs.provision()
    assert renewed.cert_pem != first.cert_pem
    assert served() == _cert(renewed.cert_pem).public_bytes(serialization.Encoding.DER)
