"""Serving certificates clients can verify: one CA and one CA-signed pair, kept in one Secret.

Contract:

* ``ServingCertSecret(rest, ref, policy, clock)`` owns one ``kubernetes.io/tls`` Secret (``ref``:
  namespace and name) holding ``ca.crt`` (the CA bundle clients trust: the current CA first, then the
  previous one while it is still valid), ``ca.key`` (the current CA's key), ``tls.crt`` (a serving
  certificate signed by that CA for ``policy.dns_names``) and ``tls.key``. ``ensure()`` **gets or
  creates** it and returns the ``Bundle`` in effect:

  - absent → a new CA and serving pair are created; a create that answers 409 (another replica
    created it first) re-reads the Secret and adopts it when it is valid, so two replicas racing at
    start end up serving the same certificate;
  - present and valid → adopted as is (nothing written);
  - the serving certificate within a third of its own lifetime of expiry, or not covering every
    name of ``policy.dns_names``, or not signed by the CA, or not matching ``tls.key`` → a new
    serving certificate from the same CA (clients that trust the CA keep working);
  - the CA within a third of its lifetime of expiry → a new CA (and serving certificate); ``ca.crt``
    then carries the new CA and the old one until the old one expires, so a client or a replica
    still on the old certificate verifies during the changeover;
  - a Secret that does not parse (a missing or garbled key, a CA that is not a CA or does not match
    ``ca.key``) → replaced with a new CA and pair;
  - a Secret of another ``type`` → ``ServingCertError`` (the type is immutable: delete it).

  Every replacement says why in one log line (``assess`` gives the reason). Writes are
  compare-and-swap (a create fails when the Secret exists; an update carries the resourceVersion
  read), and a 409 re-reads and decides again, at most ``MAX_ATTEMPTS`` times; every call has a
  total deadline of ``REQUEST_TIMEOUT`` seconds. Time (validity, renewal) is ``clock.now()``.
* ``assess(data, policy, now)`` is the decision alone, ``(action, reason)``; ``issue(...)`` builds
  the new Secret data for an action. Keys are EC P-256; certificates are backdated by
  ``BACKDATE`` for clock skew; a serving certificate never outlives its CA.
* ``ServingCertFiles(directory)`` writes a ``Bundle``'s ``tls.crt``, ``tls.key`` (mode 0600) and
  ``ca.crt`` into a private directory, each replaced atomically and only when its bytes changed;
  the servers' ``CertificateReloader`` picks a change up on its next connection.
* ``WebhookCABundle(rest, name)``: ``sync(ca_pem)`` sets ``clientConfig.caBundle`` of every webhook
  of the one ValidatingWebhookConfiguration ``name`` to ``ca_pem`` with a JSON patch, only for the
  webhooks whose bundle differs, guarded by a ``test`` of the resourceVersion read (a concurrent
  change fails it: the next pass decides again); an absent configuration is logged, not created.
  It answers ``patched``, ``current`` (nothing to do) or ``absent``.
* ``CAConfigMap(rest, ref)``: ``sync(ca_pem)`` creates one ConfigMap with ``ca.crt`` or updates
  that key when it differs (compare-and-swap): the CA for clients that may not read the Secret,
  which holds the CA key.
* ``ServingCerts`` ties them together for the manager: ``provision()`` (before any server binds)
  ensures the Secret and writes the files; as a runnable on every replica it repeats that every
  ``check_interval`` seconds of its clock, so a renewal — its own or another replica's — reaches
  the files before the old certificate expires. ``publish_ca()`` (the manager runs it from a
  leader runnable, through its write fence) publishes the CA of a fresh read of the Secret to the
  ConfigMap and the webhook configuration's caBundle.

Bounds: one Secret and one webhook configuration, named by flags; a Secret value larger than
``MAX_PEM_BYTES`` is treated as garbled.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from escaler.clock import Clock
from escaler.errors import ConnectionFailure, StatusError

__all__ = [
    "ABSENT",
    "BACKDATE",
    "CA_CERT",
    "CA_KEY",
    "CURRENT",
    "DEFAULT_CA_LIFETIME",
    "DEFAULT_CERT_LIFETIME",
    "DEFAULT_CHECK_INTERVAL",
    "MAX_ATTEMPTS",
    "PATCHED",
    "REQUEST_TIMEOUT",
    "TLS_CERT",
    "TLS_KEY",
    "Bundle",
    "CAConfigMap",
    "CertPolicy",
    "SecretRef",
    "ServingCertError",
    "ServingCertFiles",
    "ServingCertSecret",
    "ServingCerts",
    "WebhookCABundle",
    "assess",
    "issue",
    "service_dns_names",
]

_log = logging.getLogger(__name__)

DAY = 86400.0
# a CA lives five years and is replaced in the last third of that (20 months before expiry)
DEFAULT_CA_LIFETIME = 5 * 365 * DAY
# a serving certificate lives one year and is replaced in its last four months
DEFAULT_CERT_LIFETIME = 365 * DAY
# how often every replica re-reads the Secret (and renews what is due)
DEFAULT_CHECK_INTERVAL = 3600.0
# certificates start this long before "now": a peer whose clock is behind still accepts them
BACKDATE = datetime.timedelta(minutes=5)
# total seconds of one API call
REQUEST_TIMEOUT = 10.0
# get/decide/write rounds before ensure() gives up (each lost race costs one)
MAX_ATTEMPTS = 5
# a Secret value larger than this is garbled, not parsed
MAX_PEM_BYTES = 64 * 1024

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
SECRET_TYPE = "kubernetes.io/tls"
MANAGED_BY = {"app.kubernetes.io/managed-by": "escaler"}

# what WebhookCABundle.sync did
PATCHED, CURRENT, ABSENT = "patched", "current", "absent"

# what assess() decides
KEEP, CREATE, REPLACE, RENEW_SERVING, RENEW_CA = "keep", "create", "replace", "renew-serving", "renew-ca"

_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")


class ServingCertError(Exception):
    """The Secret cannot be brought to a valid state (the message says why and what to do)."""


class Requester(Protocol):
    """What this module needs of ``escaler.kube.rest.RestClient``."""

    def request(self, method: str, path: str, *, query: Any = None, body: object = None,
                content_type: str = "application/json", timeout: Any = None,
                retries: bool = True) -> dict[str, Any]: ...


@dataclass(frozen=True)
class SecretRef:
    """Where the Secret lives."""

    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str, flag: str = "--serving-cert-secret") -> SecretRef:
        """``NAMESPACE/NAME``; ``ValueError`` naming ``flag`` and the rule otherwise."""
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name:
            raise ValueError(f"{flag}: {text!r} must be NAMESPACE/NAME")
        for what, value, limit in (("namespace", namespace, 63), ("name", name, 253)):
            if len(value) > limit or not _DNS1123.match(value):
                raise ValueError(f"{flag}: the {what} {value!r} is not a valid Kubernetes name "
                                 f"(lower-case letters, digits, '-' and '.', at most {limit} characters)")
        return cls(namespace, name)

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.name}"

    @property
    def collection(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a Service is called by in the cluster: ``svc``, ``svc.ns``, ``svc.ns.svc``,
    ``svc.ns.svc.cluster.local``."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local")


@dataclass(frozen=True)
class CertPolicy:
    """What the serving certificate must be: its names and the lifetimes (seconds)."""

    # every SAN the serving certificate must carry (DNS names or IP addresses); at least one
    dns_names: tuple[str, ...]
    ca_lifetime: float = DEFAULT_CA_LIFETIME
    cert_lifetime: float = DEFAULT_CERT_LIFETIME

    def __post_init__(self) -> None:
        if not self.dns_names:
            raise ValueError("CertPolicy.dns_names: at least one name is required")
        for name in self.dns_names:
            if not _is_ip(name) and (len(name) > 253 or not _DNS_NAME.match(name)):
                raise ValueError(f"CertPolicy.dns_names: {name!r} is neither a DNS name nor an IP address")
        if not self.ca_lifetime > 0 or not self.cert_lifetime > 0:
            raise ValueError("CertPolicy: ca_lifetime and cert_lifetime must be > 0 seconds")
        if self.cert_lifetime > self.ca_lifetime:
            raise ValueError("CertPolicy.cert_lifetime: must not exceed ca_lifetime (a serving "
                             "certificate never outlives its CA)")


@dataclass(frozen=True)
class Bundle:
    """The PEM material in effect (the Secret's data)."""

    ca_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def from_data(cls, data: Mapping[str, bytes]) -> Bundle:
        return cls(data[CA_CERT], data[CA_KEY], data[TLS_CERT], data[TLS_KEY])

    def data(self) -> dict[str, bytes]:
        return {CA_CERT: self.ca_pem, CA_KEY: self.ca_key_pem, TLS_CERT: self.cert_pem, TLS_KEY: self.key_pem}

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the serving certificate (DER), as ``AB:CD:...``."""
        cert = x509.load_pem_x509_certificate(self.cert_pem)
        return cert.fingerprint(hashes.SHA256()).hex(":").upper()


# ---------------------------------------------------------------------------------- the decision


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _utc(when: datetime.datetime) -> datetime.datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def _not_before(cert: x509.Certificate) -> datetime.datetime:
    return _utc(cert.not_valid_before_utc)


def _not_after(cert: x509.Certificate) -> datetime.datetime:
    return _utc(cert.not_valid_after_utc)


def _due(cert: x509.Certificate, now: datetime.datetime) -> bool:
    """Within the last third of its own lifetime (or expired)."""
    lifetime = _not_after(cert) - _not_before(cert)
    return _not_after(cert) - now < lifetime / 3


def _certs(pem: bytes) -> list[x509.Certificate]:
    if len(pem) > MAX_PEM_BYTES:
        raise ValueError(f"larger than {MAX_PEM_BYTES} bytes")
    certs = x509.load_pem_x509_certificates(pem)
    if not certs:
        raise ValueError("no certificate")
    return certs


def _key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    if len(pem) > MAX_PEM_BYTES:
        raise ValueError(f"larger than {MAX_PEM_BYTES} bytes")
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"a {type(key).__name__}, not an EC private key")
    return key


def _same_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return bool(cert.public_key().public_bytes(*fmt) == key.public_key().public_bytes(*fmt))


def _sans(cert: x509.Certificate) -> set[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    names = {str(n) for n in ext.get_values_for_type(x509.DNSName)}
    names |= {str(ip) for ip in ext.get_values_for_type(x509.IPAddress)}
    return names


def assess(data: Mapping[str, bytes] | None, policy: CertPolicy, now: datetime.datetime) -> tuple[str, str]:
    """``(action, reason)``: ``keep``, ``create`` (no Secret), ``replace`` (a new CA and pair),
    ``renew-serving`` (a new pair from the same CA) or ``renew-ca`` (a new CA and pair)."""
    if data is None:
        return CREATE, "the Secret does not exist"
    now = _utc(now)
    parsed: dict[str, Any] = {}
    for name, load in ((CA_CERT, _certs), (CA_KEY, _key), (TLS_CERT, _certs), (TLS_KEY, _key)):
        if name not in data:
            return REPLACE, f"it has no {name}"
        try:
            parsed[name] = load(data[name])
        except ValueError as exc:
            return REPLACE, f"its {name} does not parse ({exc})"
    ca: x509.Certificate = parsed[CA_CERT][0]
    try:
        is_ca = ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        return REPLACE, f"the first certificate of its {CA_CERT} is not a CA"
    if not _same_key(ca, parsed[CA_KEY]):
        return REPLACE, f"its {CA_KEY} is not the key of its CA"
    if _not_after(ca) <= now or _due(ca, now):
        return RENEW_CA, f"its CA expires {_not_after(ca).isoformat()}, within a third of its lifetime"
    cert: x509.Certificate = parsed[TLS_CERT][0]
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return RENEW_SERVING, "its serving certificate is not signed by its CA"
    if not _same_key(cert, parsed[TLS_KEY]):
        return RENEW_SERVING, f"its {TLS_KEY} is not the key of its serving certificate"
    missing = [n for n in policy.dns_names if n not in _sans(cert)]
    if missing:
        return RENEW_SERVING, f"its serving certificate does not cover {', '.join(missing)}"
    if _not_before(cert) > now + BACKDATE:
        return RENEW_SERVING, f"its serving certificate is not valid before {_not_before(cert).isoformat()}"
    if _not_after(cert) <= now or _due(cert, now):
        return RENEW_SERVING, (f"its serving certificate expires {_not_after(cert).isoformat()}, "
                               "within a third of its lifetime")
    return KEEP, "valid"


# ---------------------------------------------------------------------------------- issuing


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _new_ca(policy: CertPolicy,
            now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "escaler"),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"escaler-ca@{int(now.timestamp())}")])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(seconds=policy.ca_lifetime))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _new_serving(policy: CertPolicy, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
                 now: datetime.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(n)) if _is_ip(n) else x509.DNSName(n) for n in policy.dns_names]
    not_after = min(now + datetime.timedelta(seconds=policy.cert_lifetime), _not_after(ca))
    common_name = next((n for n in policy.dns_names if len(n) <= 64), "escaler")
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(max(now - BACKDATE, _not_before(ca)))
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def issue(action: str, data: Mapping[str, bytes] | None, policy: CertPolicy,
          now: datetime.datetime) -> dict[str, bytes]:
    """The Secret data after ``action`` (not ``keep``) on ``data``."""
    now = _utc(now)
    if action == RENEW_SERVING:
        assert data is not None
        bundle = _certs(data[CA_CERT])
        ca, ca_key = bundle[0], _key(data[CA_KEY])
        # the previous CA stays in the bundle only while it is valid
        kept = [c for c in bundle if _not_after(c) > now]
        ca_pem = b"".join(_pem(c) for c in kept) if ca in kept else _pem(ca)
    elif action in (CREATE, REPLACE, RENEW_CA):
        ca, ca_key = _new_ca(policy, now)
        ca_pem = _pem(ca)
        if action == RENEW_CA and data is not None:
            # the old CA (still valid) stays trusted until its certificates are gone
            old = [c for c in _certs(data[CA_CERT])[:1] if _not_after(c) > now]
            ca_pem += b"".join(_pem(c) for c in old)
    else:
        raise ValueError(f"issue: unknown action {action!r}")
    cert, key = _new_serving(policy, ca, ca_key, now)
    return {CA_CERT: ca_pem, CA_KEY: _pem_key(ca_key), TLS_CERT: _pem(cert), TLS_KEY: _pem_key(key)}


# ---------------------------------------------------------------------------------- the Secret


def _decode(secret: Mapping[str, Any]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    raw = secret.get("data") or {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            if isinstance(v, str):
                try:
                    out[k] = base64.b64decode(v, validate=True)
                except ValueError:
                    out[k] = b""
    return out


class ServingCertSecret:
    """Gets or creates the Secret (see the module docstring); thread-safe (``ensure`` serialised)."""

    def __init__(self, rest: Requester, ref: SecretRef, policy: CertPolicy, clock: Clock,
                 *, timeout: float = REQUEST_TIMEOUT) -> None:
        # the API client, the Secret and what it must hold; fixed
        self.rest = rest
        self.ref = ref
        self.policy = policy
        self.clock = clock
        self.timeout = timeout
        # serialises ensure() within this process (replicas race through the API server's CAS)
        self._mu = threading.Lock()

    def read(self) -> tuple[dict[str, Any] | None, dict[str, bytes] | None]:
        """The Secret and its decoded data, ``(None, None)`` when it does not exist."""
        try:
            secret = self.rest.request("GET", self.ref.path, timeout=self.timeout, retries=False)
        except StatusError as exc:
            if exc.code == 404:
                return None, None
            raise
        kind = secret.get("type") or "Opaque"
        if kind != SECRET_TYPE:
            raise ServingCertError(
                f"Secret {self.ref} has type {kind}, not {SECRET_TYPE}, and a Secret's type cannot be "
                f"changed: delete it (kubectl -n {self.ref.namespace} delete secret {self.ref.name}) and "
                "the manager creates it")
        return secret, _decode(secret)

    def ensure(self) -> Bundle:
        """The valid Bundle, created or renewed as needed; ``ServingCertError`` or the API error
        when it cannot be had."""
        with self._mu:
            for _attempt in range(MAX_ATTEMPTS):
                secret, data = self.read()
                action, reason = assess(data, self.policy, self.clock.now())
                if action == KEEP:
                    assert data is not None
                    return Bundle.from_data(data)
                new = issue(action, data, self.policy, self.clock.now())
                try:
                    self._write(secret, new)
                except StatusError as exc:
                    if exc.code == 409:
                        _log.info("serving certificate Secret %s changed under us (%s); reading it again",
                                  self.ref, exc.reason or "Conflict")
                        continue
                    raise
                level = logging.WARNING if action == REPLACE else logging.INFO
                _log.log(level, "serving certificate Secret %s: %s because %s", self.ref,
                         {CREATE: "created", REPLACE: "replaced with a new CA",
                          RENEW_SERVING: "new serving certificate from the same CA",
                          RENEW_CA: "new CA (the old one stays in ca.crt while valid)"}[action], reason,
                         extra={"secret": str(self.ref), "action": action, "reason": reason})
                return Bundle.from_data(new)
            raise ServingCertError(
                f"Secret {self.ref}: still changing under us after {MAX_ATTEMPTS} attempts")

    def _write(self, secret: dict[str, Any] | None, data: Mapping[str, bytes]) -> None:
        encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
        if secret is None:
            body = {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
                    "metadata": {"name": self.ref.name, "namespace": self.ref.namespace,
                                 "labels": dict(MANAGED_BY)},
                    "data": encoded}
            self.rest.request("POST", self.ref.collection, body=body, timeout=self.timeout, retries=False)
            return
        meta = secret.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), **MANAGED_BY}
        metadata = {k: v for k, v in meta.items() if k != "managedFields"}
        body = {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
                "metadata": {**metadata, "labels": labels}, "data": encoded}
        # the resourceVersion read makes this a compare-and-swap: 409 when another writer came first
        self.rest.request("PUT", self.ref.path, body=body, timeout=self.timeout, retries=False)


# ---------------------------------------------------------------------------------- files


class ServingCertFiles:
    """A ``Bundle`` as ``tls.crt``, ``tls.key`` and ``ca.crt`` in one private directory."""

    def __init__(self, directory: str) -> None:
        # the directory (created 0700 if missing); fixed
        self.directory = directory
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)

    @property
    def cert_file(self) -> str:
        return os.path.join(self.directory, TLS_CERT)

    @property
    def key_file(self) -> str:
        return os.path.join(self.directory, TLS_KEY)

    @property
    def ca_file(self) -> str:
        return os.path.join(self.directory, CA_CERT)

    def write(self, bundle: Bundle) -> bool:
        """Write what changed (the key first: a reloader that sees only one changed file fails to
        load the pair and keeps the previous one until both are in place); True if anything did."""
        changed = False
        for path, data, mode in ((self.key_file, bundle.key_pem, 0o600),
                                 (self.cert_file, bundle.cert_pem, 0o644),
                                 (self.ca_file, bundle.ca_pem, 0o644)):
            try:
                with open(path, "rb") as f:
                    if f.read() == data:
                        continue
            except OSError:
                pass
            tmp = f"{path}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            changed = True
        return changed


# ---------------------------------------------------------------------------------- the webhook


class WebhookCABundle:
    """Keeps one ValidatingWebhookConfiguration's caBundle equal to the CA bundle."""

    def __init__(self, rest: Requester, name: str, *, timeout: float = REQUEST_TIMEOUT) -> None:
        # the client and the configuration's name; fixed
        self.rest = rest
        self.name = name
        self.timeout = timeout

    @property
    def path(self) -> str:
        return f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{self.name}"

    def sync(self, ca_pem: bytes) -> str:
        """Patch the webhooks whose caBundle differs: ``PATCHED``, ``CURRENT`` (nothing to do) or
        ``ABSENT`` (no such configuration)."""
        try:
            config = self.rest.request("GET", self.path, timeout=self.timeout, retries=False)
        except StatusError as exc:
            if exc.code == 404:
                _log.warning("ValidatingWebhookConfiguration %s does not exist: no caBundle to set",
                             self.name)
                return ABSENT
            raise
        want = base64.b64encode(ca_pem).decode()
        ops: list[dict[str, Any]] = []
        for i, hook in enumerate(config.get("webhooks") or []):
            client = hook.get("clientConfig") if isinstance(hook, dict) else None
            if not isinstance(client, dict) or client.get("caBundle") == want:
                continue
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": want})
        if not ops:
            return CURRENT
        rv = (config.get("metadata") or {}).get("resourceVersion", "")
        patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}, *ops]
        self.rest.request("PATCH", self.path, body=patch, content_type="application/json-patch+json",
                          timeout=self.timeout, retries=False)
        _log.info("ValidatingWebhookConfiguration %s: caBundle of %d webhook(s) set to the serving CA "
                  "(sha256 %s)", self.name, len(ops), hashlib.sha256(ca_pem).hexdigest()[:16])
        return PATCHED


# ---------------------------------------------------------------------------------- the runnable


class CAConfigMap:
    """Publishes the CA bundle as ``ca.crt`` of one ConfigMap, for clients that may not read the
    Secret (it holds the CA key)."""

    def __init__(self, rest: Requester, ref: SecretRef, *, timeout: float = REQUEST_TIMEOUT) -> None:
        # the client and where the ConfigMap lives (the Secret's namespace); fixed
        self.rest = rest
        self.ref = ref
        self.timeout = timeout

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.ref.namespace}/configmaps/{self.ref.name}"

    @property
    def collection(self) -> str:
        return f"/api/v1/namespaces/{self.ref.namespace}/configmaps"

    def sync(self, ca_pem: bytes) -> str:
        """Create the ConfigMap, or update its ``ca.crt`` when it differs (compare-and-swap on the
        resourceVersion read): ``PATCHED`` or ``CURRENT``."""
        want = ca_pem.decode()
        try:
            current = self.rest.request("GET", self.path, timeout=self.timeout, retries=False)
        except StatusError as exc:
            if exc.code != 404:
                raise
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": self.ref.name, "namespace": self.ref.namespace,
                                 "labels": dict(MANAGED_BY)},
                    "data": {CA_CERT: want}}
            self.rest.request("POST", self.collection, body=body, timeout=self.timeout, retries=False)
            _log.info("ConfigMap %s created with the serving CA (ca.crt)", self.ref)
            return PATCHED
        data = current.get("data") or {}
        if isinstance(data, dict) and data.get(CA_CERT) == want:
            return CURRENT
        meta = {k: v for k, v in (current.get("metadata") or {}).items() if k != "managedFields"}
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": {**(data if isinstance(data, dict) else {}), CA_CERT: want}}
        self.rest.request("PUT", self.path, body=body, timeout=self.timeout, retries=False)
        _log.info("ConfigMap %s: ca.crt set to the serving CA", self.ref)
        return PATCHED


class ServingCerts:
    """The manager's serving certificates: the Secret, its files, and where its CA is published
    (the webhook's caBundle, a ConfigMap)."""

    def __init__(self, secret: ServingCertSecret, files: ServingCertFiles, *,
                 webhook: WebhookCABundle | None = None, ca_configmap: CAConfigMap | None = None,
                 check_interval: float = DEFAULT_CHECK_INTERVAL,
                 on_change: Callable[[Bundle], None] | None = None) -> None:
        if not check_interval > 0:
            raise ValueError("ServingCerts.check_interval: must be > 0 seconds")
        # collaborators; fixed
        self.secret = secret
        self.files = files
        self.webhook = webhook
        self.ca_configmap = ca_configmap
        self.check_interval = check_interval
        self.on_change = on_change
        # the bundle last written to the files; None before provision()
        self.bundle: Bundle | None = None

    def provision(self) -> Bundle:
        """Ensure the Secret and write the files; raises when it cannot (the start fails)."""
        bundle = self.secret.ensure()
        if self.files.write(bundle):
            _log.info("serving certificate from Secret %s in %s (SHA-256 %s)", self.secret.ref,
                      self.files.directory, bundle.fingerprint)
            if self.on_change is not None:
                self.on_change(bundle)
        self.bundle = bundle
        return bundle

    def start(self, stop: threading.Event) -> None:
        """Every ``check_interval``: provision again (a failure is logged; the files keep the last
        good pair)."""
        while not self.secret.clock.sleep(self.check_interval, stop):
            try:
                self.provision()
            except (StatusError, ConnectionFailure, ServingCertError, OSError) as exc:
                _log.error("serving certificate Secret %s: %s; still serving the previous certificate",
                           self.secret.ref, exc)
            except Exception:
                _log.exception("serving certificate Secret %s: unexpected failure", self.secret.ref)

    @property
    def publishes(self) -> bool:
        """Whether there is anywhere to publish the CA (a webhook configuration, a ConfigMap)."""
        return self.webhook is not None or self.ca_configmap is not None

    def publish_ca(self) -> str:
        """Publish the CA bundle of a fresh read of the Secret: the ConfigMap, then the webhook
        configuration's caBundle (that ``sync``'s answer; ``ABSENT`` also when there is no
        configuration to keep or no Secret yet, ``CURRENT`` without a webhook)."""
        _secret, data = self.secret.read()
        if data is None or CA_CERT not in data:
            return ABSENT
        if self.ca_configmap is not None:
            self.ca_configmap.sync(data[CA_CERT])
        if self.webhook is None:
            return CURRENT
        return self.webhook.sync(data[CA_CERT])

