"""The SSRF address policy (escaler.signals.netpolicy), its use at connect time by
escaler.signals.fetch (after DNS resolution, on the checked address), TLS, bearer tokens and the
opt-in label of bearer-token Secrets (escaler.signals.bearer)."""

from __future__ import annotations

import base64
import ipaddress
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fakeapi import wait_until
from outbound_fakes import FakeSecrets, HttpsServer, ScratchCA, make_ca

from escaler.cli.flags import endpoint_networks
from escaler.signals.bearer import BEARER_TOKEN_HOSTS_ANNOTATION, BEARER_TOKEN_LABEL, secret_key_reader
from escaler.signals.fetch import MAX_TIMEOUT_SECONDS, FetchError, HttpClient, fetch
from escaler.signals.netpolicy import AddressPolicy, canonical_address, parse_networks

# address, what the refusal says
DENIED: list[tuple[str, str]] = [
    ("127.0.0.1", "loopback (127.0.0.0/8)"),
    ("127.45.6.7", "loopback (127.0.0.0/8)"),
    ("::1", "loopback (::1/128)"),
    ("::ffff:127.0.0.1", "loopback (127.0.0.0/8)"),
    ("::127.0.0.1", "loopback (127.0.0.0/8)"),
    ("2002:7f00:1::", "loopback (127.0.0.0/8)"),
    ("169.254.1.1", "link-local (169.254.0.0/16)"),
    ("fe80::1", "link-local (fe80::/10)"),
    ("0.0.0.0", "unspecified (0.0.0.0/8)"),
    ("::", "unspecified (::/128)"),
    ("224.0.0.1", "multicast (224.0.0.0/4)"),
    ("ff02::1", "multicast (ff00::/8)"),
    ("255.255.255.255", "broadcast (255.255.255.255/32)"),
    ("240.0.0.1", "reserved (240.0.0.0/4)"),
    ("169.254.169.254", "cloud metadata service"),
    ("::ffff:169.254.169.254", "cloud metadata service"),
    ("64:ff9b::a9fe:a9fe", "cloud metadata service"),
    ("fd00:ec2::254", "cloud metadata service (AWS IPv6)"),
    # issue 27 item 16: GCP's metadata server on an IPv6-only VM (a ULA address, allowed before)
    ("fd20:ce::254", "cloud metadata service (GCP IPv6)"),
    ("100.100.100.200", "cloud metadata service (Alibaba Cloud)"),
    ("168.63.129.16", "Azure WireServer"),
]

# private ranges stay allowed (in-cluster Prometheus), and so do the TEST-NETs is_private covers
ALLOWED = ["10.0.0.7", "172.16.3.4", "192.168.1.1", "fd12::1", "8.8.8.8", "192.0.2.1", "198.51.100.7",
           "100.64.0.1", "2001:db8::1", "::ffff:10.0.0.1"]


@pytest.mark.parametrize(("address", "what"), DENIED, ids=[d[0] for d in DENIED])
def test_denied_by_default(address: str, what: str) -> None:
    reason = AddressPolicy().refusal(ipaddress.ip_address(address))
    assert reason is not None and what in reason and str(ipaddress.ip_address(address)) in reason


@pytest.mark.parametrize("address", ALLOWED)
def test_allowed_by_default(address: str) -> None:
    assert AddressPolicy().refusal(ipaddress.ip_address(address)) is None


def test_allow_networks_re_allow_what_they_cover() -> None:
    policy = AddressPolicy(parse_networks("127.0.0.0/8, 169.254.0.0/16"))
    assert policy.refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert policy.refusal(ipaddress.ip_address("::ffff:127.0.0.2")) is None
    assert policy.refusal(ipaddress.ip_address("169.254.20.10")) is None  # node-local DNS, say
    assert policy.refusal(ipaddress.ip_address("::1")) is not None  # IPv6 loopback not covered
    # a metadata address is re-allowed only when named exactly
    reason = policy.refusal(ipaddress.ip_address("169.254.169.254"))
    assert reason is not None and "169.254.169.254/32" in reason
    assert AddressPolicy(parse_networks("169.254.169.254/32")).refusal(
        ipaddress.ip_address("169.254.169.254")) is None


def test_canonical_address() -> None:
    assert str(canonical_address(ipaddress.ip_address("::ffff:1.2.3.4"))) == "1.2.3.4"
    assert str(canonical_address(ipaddress.ip_address("::1"))) == "::1"
    assert str(canonical_address(ipaddress.ip_address("::"))) == "::"
    assert str(canonical_address(ipaddress.ip_address("2001:db8::1"))) == "2001:db8::1"


@pytest.mark.parametrize("text", ["127.0.0.1/8", "banana", "10.0.0.0/33", "::1/129"])
def test_parse_networks_errors_name_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--allow-endpoint-networks") as got:
        parse_networks(text)
    assert repr(text) in str(got.value)


def test_flag_parser() -> None:
    assert endpoint_networks("") == ()
    assert [str(n) for n in endpoint_networks("127.0.0.0/8,fd00::/8,10.1.2.3")] == [
        "127.0.0.0/8", "fd00::/8", "10.1.2.3/32"]


def test_host_refusal_of_metadata_names() -> None:
    p = AddressPolicy(parse_networks("169.254.169.254/32"))
    for host in ("metadata", "metadata.google.internal.", "Instance-Data.EC2.Internal"):
        assert p.host_refusal(host) is not None
    assert p.host_refusal("prometheus.monitoring") is None


# ---- at connect time ---------------------------------------------------------------------------


class Resolver:
    """Scripted DNS: host -> addresses; counts lookups."""

    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        if host not in self.answers:
            raise OSError(-2, "Name or service not known")
        return self.answers[host]


@pytest.mark.parametrize(("answers", "what"), [
    (["127.0.0.1"], "127.0.0.1 is loopback"),
    (["::ffff:169.254.169.254"], "cloud metadata service"),
    (["10.0.0.7", "127.0.0.1"], "127.0.0.1 is loopback"),  # one bad answer refuses the name
], ids=["loopback", "mapped-metadata", "mixed"])
def test_a_name_resolving_to_a_denied_address_is_refused(answers: list[str], what: str) -> None:
    dns = Resolver({"prom.evil.example": answers})
    with pytest.raises(FetchError) as got:
        fetch(HttpClient(resolver=dns), "http://prom.evil.example:9090/api/v1/query", timeout=2)
    assert what in str(got.value) and "prom.evil.example" in str(got.value)
    assert dns.calls == ["prom.evil.example"]


def test_unresolvable_name() -> None:
    with pytest.raises(FetchError, match=r"cannot resolve host 'nowhere\.example'"):
        fetch(HttpClient(resolver=Resolver({})), "http://nowhere.example/", timeout=2)


def test_a_hung_lookup_is_bounded_by_the_deadline() -> None:
    release = threading.Event()

    def hung(host: str, port: int) -> Sequence[str]:
        release.wait(10)
        return ["10.0.0.7"]

    try:
        with pytest.raises(FetchError, match=r"timed out after 0\.3s"):
            fetch(HttpClient(resolver=hung), "http://slow-dns.example/", timeout=0.3)
    finally:
        release.set()


def test_timeout_is_capped() -> None:
    assert MAX_TIMEOUT_SECONDS == 30


# ---- TLS and bearer tokens ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> ScratchCA:
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def prom(ca: ScratchCA) -> Iterator[HttpsServer]:
    srv = HttpsServer(ca, lambda _p: (200, b'{"ok": true}')).start()
    yield srv
    srv.stop()


def _client(ca: ScratchCA, dns: Resolver | None = None) -> HttpClient:
    return HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")), resolver=dns,
                      ssl_context=ca.client_context())


def test_https_with_a_bearer_token(ca: ScratchCA, prom: HttpsServer) -> None:
    resp = fetch(_client(ca), prom.url + "/q", timeout=5, params={"query": "sum(x)"}, bearer_token="s3cret")
    assert resp.status == 200 and resp.body == b'{"ok": true}'
    (seen,) = prom.seen
    assert seen.path == "/q?query=sum%28x%29" and seen.headers["authorization"] == "Bearer s3cret"
    assert "cookie" not in seen.headers


def test_tls_verifies_the_url_host_not_the_checked_address(ca: ScratchCA, prom: HttpsServer) -> None:
    # the name resolves to the server's address, but the certificate is for localhost
    port = prom.url.rsplit(":", 1)[1]
    dns = Resolver({"prom.example": ["127.0.0.1"]})
    with pytest.raises(FetchError, match="TLS certificate not trusted"):
        fetch(_client(ca, dns), f"https://prom.example:{port}/", timeout=5, bearer_token="s3cret")
    assert prom.seen == []


def test_a_connection_goes_to_the_checked_address(ca: ScratchCA, prom: HttpsServer) -> None:
    dns = Resolver({"localhost": ["127.0.0.1"]})
    fetch(_client(ca, dns), prom.url + "/", timeout=5)
    assert dns.calls == ["localhost"]  # one lookup, the one the policy judged


@pytest.mark.parametrize("token", ["a\r\nX-Injected: 1", "tok\n", " lead"], ids=["crlf", "lf", "space"])
def test_a_token_that_is_not_a_header_value_is_refused(ca: ScratchCA, prom: HttpsServer, token: str) -> None:
    with pytest.raises(FetchError, match="not a valid HTTP header value") as got:
        fetch(_client(ca), prom.url + "/", timeout=5, bearer_token=token)
    assert token not in str(got.value)
    assert prom.seen == []


def test_a_token_is_never_sent_over_plain_http() -> None:
    with pytest.raises(FetchError, match="only sent over https://"):
        fetch(HttpClient(), "http://prom.example/", timeout=1, bearer_token="s3cret")


# ---- bearer-token Secrets opt in -----------------------------------------------------------------


HOST = "prometheus.monitoring.svc"


def _secret(labels: dict[str, str] | None, hosts: str | None = HOST) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "prom"}
    if labels is not None:
        meta["labels"] = labels
    if hosts is not None:
        meta["annotations"] = {BEARER_TOKEN_HOSTS_ANNOTATION: hosts}
    return {"metadata": meta, "data": {"token": base64.b64encode(b"s3cret\n").decode()}}


def _refused(read: Any, host: str = HOST, name: str = "prom") -> str:
    with pytest.raises(PermissionError) as got:
        read("team", name, "token", host)
    message = str(got.value)
    assert "s3cret" not in message
    return message


@pytest.mark.parametrize("labels", [None, {}, {BEARER_TOKEN_LABEL: "false"}, {BEARER_TOKEN_LABEL: "True"},
                                    {"other": "true"}],
                         ids=["no-labels", "empty", "false", "wrong-case", "other"])
def test_a_secret_without_the_opt_in_label_is_not_read(labels: dict[str, str] | None) -> None:
    message = _refused(secret_key_reader(FakeSecrets({"prom": _secret(labels)})))  # type: ignore[arg-type]
    assert "Secret team/prom" in message and f'{BEARER_TOKEN_LABEL}: "true"' in message


def test_a_secret_with_the_opt_in_label_is_read_for_the_hosts_it_lists() -> None:
    secrets = FakeSecrets({"prom": _secret({BEARER_TOKEN_LABEL: "true"},
                                           hosts=f"{HOST}, *.thanos.example")})
    read = secret_key_reader(secrets)  # type: ignore[arg-type]
    assert read("team", "prom", "token", HOST) == "s3cret"
    assert read("team", "prom", "token", "query.thanos.example") == "s3cret"


@pytest.mark.parametrize(("hosts", "host"), [(None, HOST), ("", HOST), (HOST, "evil.example"),
                                             ("*.monitoring.svc", "monitoring.svc.evil.example")],
                         ids=["no-annotation", "empty", "another-host", "suffix-trick"])
def test_a_labelled_secret_is_not_sent_to_a_host_it_does_not_list(hosts: str | None, host: str) -> None:
    # issue 27 item 15: the label alone let anyone who can create a scaler send the token to a
    # server of their own
    read = secret_key_reader(FakeSecrets({"prom": _secret({BEARER_TOKEN_LABEL: "true"}, hosts)}))  # type: ignore[arg-type]
    message = _refused(read, host)
    assert f"for host {host}" in message and BEARER_TOKEN_HOSTS_ANNOTATION in message
    assert not hosts or hosts not in message  # the Secret's own list is never echoed


def test_a_missing_secret_is_refused_as_one_not_opted_in() -> None:
    # issue 27 item 15: "not found" and "not labelled" told a scaler writer which Secrets exist
    read = secret_key_reader(FakeSecrets({"other": _secret(None)}))  # type: ignore[arg-type]
    assert _refused(read, name="prom") == _refused(
        secret_key_reader(FakeSecrets({"prom": _secret(None)})), name="prom")  # type: ignore[arg-type]


def test_manifest_rbac_grants_secrets_only_per_namespace() -> None:
    import yaml

    root = Path(__file__).resolve().parents[2]
    docs = [d for d in yaml.safe_load_all((root / "manifests" / "rbac" / "manager.yaml").read_text()) if d]
    for doc in docs:
        for rule in doc.get("rules", []):
            core = "" in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", [])
            if "secrets" in rule.get("resources", []) or (core and "*" in rule.get("resources", [])):
                assert doc["kind"] == "Role", f"{doc['kind']} {doc['metadata']['name']} grants Secrets"
                if doc["metadata"]["name"] == "escaler-serving-cert":
                    # the serving certificate, in the manager's own namespace: create it, then
                    # read and renew that one Secret only (escaler.runtime.servingcerts)
                    assert doc["metadata"]["namespace"] == "escaler-system"
                    assert rule in ({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                                    {"apiGroups": [""], "resources": ["secrets"],
                                     "resourceNames": ["escaler-serving-cert"], "verbs": ["get", "update"]})
                    continue
                # list/watch for the label-selected token cache (escaler.signals.bearer), never more
                assert rule["verbs"] == ["get", "list", "watch"]
    assert json.dumps(docs)  # parsed


# ---- host-name lookups are bounded per tenant ------------------------------------------------------


def test_one_namespaces_slow_names_hold_at_most_its_share_of_the_lookup_threads() -> None:
    # issue 27 item 6: the 32 lookup threads were shared by everyone and an abandoned slow lookup kept
    # its thread, so four namespaces with slow names cut a fifth from 787 to 1.9 jobs/s
    from escaler.signals.fetch import DNS_PER_TENANT
    from escaler.tenant import for_tenant

    gate = threading.Event()
    calls: list[str] = []

    def resolver(host: str, port: int) -> list[str]:
        calls.append(host)
        if host.endswith(".slow.example"):
            gate.wait(10)
        return ["127.0.0.1"]

    client = HttpClient(AddressPolicy(parse_networks("127.0.0.0/8")), resolver=resolver)
    try:
        with for_tenant("team-a"):
            for i in range(DNS_PER_TENANT):  # abandoned at their deadline, still running
                with pytest.raises(Exception):  # noqa: B017 - the internal deadline exception
                    client.resolve(f"h{i}.slow.example", 80, 0.05)
            # another slow name of the same namespace: refused at once, no thread taken
            with pytest.raises(FetchError, match=f"{DNS_PER_TENANT} host name lookups of namespace team-a"):
                client.resolve("h9.slow.example", 80, 5.0)
        assert sorted(calls) == sorted(f"h{i}.slow.example" for i in range(DNS_PER_TENANT))
        # another namespace resolves at once; a name still pending is shared, not looked up again
        with for_tenant("team-b"):
            assert [str(a) for a in client.resolve("fast.example", 80, 5.0)] == ["127.0.0.1"]
            with pytest.raises(Exception):  # noqa: B017 - still slow: the caller's deadline passes
                client.resolve("h0.slow.example", 80, 0.05)
        assert calls.count("h0.slow.example") == 1
        gate.set()
        # team-a's lookups end (their threads finish just after the gate opens): it may look up again
        def resolves_again() -> bool:
            with for_tenant("team-a"):
                try:
                    return [str(a) for a in client.resolve("h9.slow.example", 80, 5.0)] == ["127.0.0.1"]
                except FetchError:
                    return False

        wait_until(resolves_again, what="team-a's lookups ended")
    finally:
        gate.set()
