"""The SLO API's HTTP edges: auth (401/403/429), body limits, malformed JSON, media types, the
error envelope of FastAPI's own errors, ``/openapi.json`` and the form."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.runtime.authn import UserInfo
from escaler.sloapi.app import BodyLimit, create_app
from tests.unit.sloapi_fakes import FakeAuthenticator, FakeSLOCluster, job_slo, llm_slo, start_service

ALICE = UserInfo("alice", groups=("slo-owners",))
BOB = UserInfo("bob")


def _cluster() -> FakeSLOCluster:
    return FakeSLOCluster([llm_slo("chat-slo", "chat", namespace="team-a"),
                           llm_slo("other-slo", "other", namespace="team-c"),
                           job_slo("batch-slo", "batch", namespace="team-b")])


def _auth() -> FakeAuthenticator:
    return FakeAuthenticator(
        tokens={"alice-token": ALICE, "bob-token": BOB},
        allow={("alice", "get", "*", "team-a", "*"),
               ("alice", "patch", "llmslorequirements", "team-a", "chat-slo"),
               ("alice", "list", "llmslorequirements", "team-a", ""),
               ("alice", "list", "jobslorequirements", "", "")})


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _error(resp: Any) -> tuple[int, str]:
    return resp.status_code, resp.json()["error"]["code"]


@pytest.mark.parametrize("method, path", [
    ("GET", "/config"), ("GET", "/config/chat"), ("PUT", "/config/chat"), ("DELETE", "/config/chat"),
], ids=["list", "get", "put", "delete"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Basic YTpi"}, _bearer("wrong")],
                         ids=["none", "basic", "invalid"])
def test_401_without_a_valid_token(method: str, path: str, headers: dict[str, str]) -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        resp = r.client.request(method, path, headers=headers, json={} if method == "PUT" else None)
        assert _error(resp) == (401, "unauthorized")
        assert resp.headers["www-authenticate"] == "Bearer"
        assert r.cluster.writes == []


def test_a_route_the_user_may_not_touch_is_answered_as_one_that_does_not_exist() -> None:
    # issue 27 item 14: a 403 named the namespace and CR behind a route, and 403 vs 404 told a caller
    # whether a route exists; both are now the same 404, which names neither
    with start_service(_cluster(), auth=_auth()) as r:
        denied = r.client.put("/config/chat", headers=_bearer("bob-token"), json={"highPriority": True})
        missing = r.client.put("/config/nowhere", headers=_bearer("bob-token"), json={"highPriority": True})
        assert _error(denied) == _error(missing) == (404, "not_found")
        assert denied.json()["error"]["message"] == "route 'chat' not found, or user 'bob' may not patch it"
        for resp in (denied, missing):
            assert "team-a" not in resp.text and "chat-slo" not in resp.text
        # the list still says 403 (it names kinds, no route or object)
        assert _error(r.client.get("/config", headers=_bearer("bob-token"))) == (403, "forbidden")
        # alice may read team-a but not another namespace's route, nor patch a job route
        assert r.client.get("/config/chat", headers=_bearer("alice-token")).status_code == 200
        assert _error(r.client.get("/config/other", headers=_bearer("alice-token"))) == (404, "not_found")
        assert _error(r.client.delete("/config/batch", headers=_bearer("alice-token"))) == (404, "not_found")
        assert r.cluster.writes == []


def test_probing_routes_spends_the_users_denial_budget_whether_they_exist_or_not() -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        codes = [r.client.get(f"/config/{name}", headers=_bearer("bob-token")).status_code
                 for name in ["chat", "nowhere-1", "other", "nowhere-2"] * 3]
        assert codes[:10] == [404] * 10 and codes[10:] == [429, 429], codes


def test_allowed_user_reads_and_writes() -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        resp = r.client.put("/config/chat", headers=_bearer("alice-token"), json={"highPriority": True})
        assert resp.status_code == 200, resp.text
        assert resp.json()["highPriority"] is True
        # the list shows what alice may list: LLM routes of team-a, job routes everywhere
        listed = r.client.get("/config", headers=_bearer("alice-token")).json()["routes"]
        assert [x["route"] for x in listed] == ["batch", "chat"]
        # the token is never in a review record or a response
        assert all("alice-token" not in str(x) for x in r.service.auth.authenticator.reviews)  # type: ignore[union-attr]


def test_conflict_only_after_authorization() -> None:
    cluster = _cluster()
    cluster.apis["job"].create(job_slo("shared-job", "shared", namespace="team-a"))
    cluster.apis["llm"].create(llm_slo("shared-llm", "shared", namespace="team-a"))
    with start_service(cluster, auth=_auth()) as r:
        assert _error(r.client.get("/config/shared", headers=_bearer("bob-token"))) == (404, "not_found")
        assert _error(r.client.get("/config/shared", headers=_bearer("alice-token"))) == (409, "conflict")


def test_failed_authentications_are_rate_limited() -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        codes = [r.client.get("/config", headers=_bearer(f"bad-{i}")).status_code for i in range(12)]
        assert codes[:10] == [401] * 10
        assert codes[10:] == [429, 429]
        assert "retry-after" in r.client.get("/config", headers=_bearer("bad")).headers


def test_probes_form_and_openapi_need_no_token() -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        for path in ("/healthz", "/readyz", "/", "/openapi.json"):
            assert r.client.get(path).status_code == 200, path


def test_body_too_large_is_413() -> None:
    with start_service(_cluster(), max_body_bytes=1024) as r:
        resp = r.client.put("/config/chat", content=b'{"highPriority": true, "x": "' + b"a" * 2000 + b'"}',
                            headers={"Content-Type": "application/json"})
        assert _error(resp) == (413, "payload_too_large")

        def chunks() -> Any:
            for _ in range(4):
                yield b"a" * 500

        assert _error(r.client.put("/config/chat", content=chunks())) == (413, "payload_too_large")
        assert r.cluster.writes == []


@pytest.mark.parametrize("raw, fragment", [
    (b"{not json", "request body is not valid JSON"),
    (b'{"highPriority": "\xff"}', "not UTF-8"),
    (b"[" * 60000, "nested too deeply"),
    (b"", "request body is not valid JSON"),
], ids=["syntax", "utf8", "deep", "empty"])
def test_malformed_json_is_400(raw: bytes, fragment: str) -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put("/config/chat", content=raw, headers={"Content-Type": "application/json"})
        assert _error(resp) == (400, "invalid_request")
        assert fragment in resp.json()["error"]["message"]


def test_media_types() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put("/config/chat", content=b"highPriority=true",
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert _error(resp) == (415, "unsupported_media_type")
        ok = r.client.put("/config/chat", content=b'{"highPriority": true}',
                          headers={"Content-Type": "application/merge-patch+json"})
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("method, path, status, code", [
    ("GET", "/nope", 404, "not_found"),
    ("POST", "/config", 405, "method_not_allowed"),
    ("PATCH", "/config/chat", 405, "method_not_allowed"),
    ("GET", "/config/a/b", 404, "not_found"),
], ids=["path", "post-list", "patch-route", "slash"])
def test_framework_errors_use_the_envelope(method: str, path: str, status: int, code: str) -> None:
    with start_service(_cluster()) as r:
        assert _error(r.client.request(method, path)) == (status, code)


def test_openapi_describes_every_route_with_errors() -> None:
    with start_service(_cluster()) as r:
        doc = r.client.get("/openapi.json").json()
        paths = doc["paths"]
        assert set(paths) == {"/", "/healthz", "/readyz", "/config", "/config/{route}"}
        assert set(paths["/config/{route}"]) == {"get", "put", "delete"}
        put = paths["/config/{route}"]["put"]
        assert {"200", "400", "401", "404", "409", "413", "502", "503"} <= set(put["responses"])
        assert "403" not in put["responses"]  # a denied route is answered 404, as a missing one
        assert put["responses"]["400"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"}
        schemas = doc["components"]["schemas"]
        assert {"ErrorResponse", "LLMRoutePatch", "JobRoutePatch", "RouteList", "LLMRoute",
                "JobRoute"} <= set(schemas)
        assert set(schemas["JobRoutePatch"]["properties"]) == {
            "highPriority", "concurrencyPerReplica", "queue", "bounds"}
        assert "$ref" in str(put["requestBody"]["content"]["application/json"]["schema"])
        # every $ref resolves
        refs = {s.split("/")[-1] for s in _refs(doc)}
        assert refs <= set(schemas), refs - set(schemas)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [x for v in node.values() for x in _refs(v)]
    if isinstance(node, list):
        return [x for v in node for x in _refs(v)]
    return []


def test_form_is_self_contained() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.get("/")
        assert resp.headers["content-type"].startswith("text/html")
        csp = resp.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "connect-src 'self'" in csp
        assert "http://" not in resp.text and "https://" not in resp.text
        for element in ('id="routes"', 'id="bound-value"', 'id="save-bound"', 'id="message"', 'id="token"'):
            assert element in resp.text
        assert "innerHTML" not in resp.text


@pytest.mark.parametrize("kwargs, message", [
    ({"max_body_bytes": -1}, "BodyLimit.max_body_bytes"),
    ({"body_deadline": 0}, "BodyLimit.body_deadline"),
], ids=["max-body", "deadline"])
def test_body_limit_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BodyLimit(lambda *a: None, **kwargs)  # type: ignore[arg-type, return-value]


def test_create_app_validation() -> None:
    with start_service(_cluster()) as r, pytest.raises(ValueError, match=r"create_app\.worker_threads"):
        create_app(r.service, worker_threads=0)


def test_behind_a_trusted_proxy_each_client_has_its_own_failed_login_budget() -> None:
    # issue 27 item 14: behind an ingress every request came from its address, so one attacker spent
    # every client's failed-authentication budget
    from escaler.signals.netpolicy import parse_networks

    with start_service(_cluster(), auth=_auth(), trusted_proxies=parse_networks("10.0.0.0/8"),
                       peer="10.1.2.3") as r:
        attacker = {"X-Forwarded-For": "203.0.113.9"}
        codes = [r.client.get("/config", headers={**_bearer(f"bad-{i}"), **attacker}).status_code
                 for i in range(12)]
        assert codes[10:] == [429, 429]
        # another client behind the same ingress still authenticates (a bad token: 401, not 429)
        other = {**_bearer("bad-x"), "X-Forwarded-For": "198.51.100.7"}
        assert r.client.get("/config", headers=other).status_code == 401
        # a forged left-hand entry does not move the attacker to another budget
        forged = {**_bearer("bad-y"), "X-Forwarded-For": "198.51.100.7, 203.0.113.9"}
        assert r.client.get("/config", headers=forged).status_code == 429


def test_client_address_believes_forwarded_for_only_from_a_trusted_proxy() -> None:
    from escaler.signals.netpolicy import parse_networks
    from escaler.sloapi.clients import client_address

    proxies = parse_networks("10.0.0.0/8, fd00::/8")
    assert client_address("203.0.113.9", "198.51.100.7", proxies) == "203.0.113.9"  # not a proxy: peer
    assert client_address("10.0.0.5", "198.51.100.7", proxies) == "198.51.100.7"
    assert client_address("10.0.0.5", "1.2.3.4, 198.51.100.7, 10.0.0.9", proxies) == "198.51.100.7"
    assert client_address("10.0.0.5", None, proxies) == "10.0.0.5"
    assert client_address("10.0.0.5", "10.0.0.7", proxies) == "10.0.0.5"  # only proxies: the proxy
    assert client_address("10.0.0.5", "not-an-ip", proxies) == "10.0.0.5"
    assert client_address("fd00::1", "2001:db8::7", proxies) == "2001:db8::7"
    assert client_address("10.0.0.5", "198.51.100.7", ()) == "10.0.0.5"  # none trusted: never believed
