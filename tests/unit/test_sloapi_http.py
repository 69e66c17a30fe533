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

# the routes of the tests' clusters, by namespace (a route is a serviceId in a namespace)
CHAT = "/config/namespaces/team-a/chat"
BATCH = "/config/namespaces/team-b/batch"
OTHER = "/config/namespaces/team-c/other"
SHARED = "/config/namespaces/team-a/shared"
NOWHERE = "/config/namespaces/team-a/nowhere"


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
    ("GET", "/config"), ("GET", CHAT), ("PUT", CHAT), ("DELETE", CHAT),
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
        denied = r.client.put(CHAT, headers=_bearer("bob-token"), json={"highPriority": True})
        missing = r.client.put(NOWHERE, headers=_bearer("bob-token"), json={"highPriority": True})
        assert _error(denied) == _error(missing) == (404, "not_found")
        assert denied.json()["error"]["message"] == (
            "route 'chat' not found in namespace 'team-a', or user 'bob' may not patch it")
        for resp in (denied, missing):
            assert "chat-slo" not in resp.text
        # the list still says 403 (it names kinds, no route or object)
        assert _error(r.client.get("/config", headers=_bearer("bob-token"))) == (403, "forbidden")
        # alice may read team-a but not another namespace's route, nor patch a job route
        assert r.client.get(CHAT, headers=_bearer("alice-token")).status_code == 200
        assert _error(r.client.get(OTHER, headers=_bearer("alice-token"))) == (404, "not_found")
        assert _error(r.client.delete(BATCH, headers=_bearer("alice-token"))) == (404, "not_found")
        assert r.cluster.writes == []


def test_probing_routes_spends_the_users_denial_budget_whether_they_exist_or_not() -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        codes = [r.client.get(f"/config/namespaces/team-a/{name}", headers=_bearer("bob-token")).status_code
                 for name in ["chat", "nowhere-1", "other", "nowhere-2"] * 3]
        assert codes[:10] == [404] * 10 and codes[10:] == [429, 429], codes


def test_listing_among_many_namespaces_charges_no_denial_per_namespace_it_may_not_see() -> None:
    """A tenant allowed to list its own namespace's routes, in a cluster where 24 other namespaces
    hold routes: each listing reviews every namespace (cached), but a namespace filtered out is not
    a denied request, so twenty listings in a row all answer 200 (before: the first listing spent
    the user's budget of 10 on the namespaces it may not see, and then 429). A user who may list
    nothing is charged one denial per listing."""
    slos = [llm_slo(f"slo-{i}", f"r{i}", namespace=f"team-{i:02d}") for i in range(25)]
    auth = FakeAuthenticator(tokens={"alice-token": ALICE, "bob-token": BOB},
                             allow={("alice", "list", "llmslorequirements", "team-00", "")})
    with start_service(FakeSLOCluster(slos), auth=auth) as r:
        for _ in range(20):
            resp = r.client.get("/config", headers=_bearer("alice-token"))
            assert resp.status_code == 200, resp.text
            assert [x["route"] for x in resp.json()["routes"]] == ["r0"]
        codes = [r.client.get("/config", headers=_bearer("bob-token")).status_code for _ in range(12)]
        assert codes[:10] == [403] * 10 and codes[10:] == [429, 429], codes


def test_allowed_user_reads_and_writes() -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        resp = r.client.put(CHAT, headers=_bearer("alice-token"), json={"highPriority": True})
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
        assert _error(r.client.get(SHARED, headers=_bearer("bob-token"))) == (404, "not_found")
        assert _error(r.client.get(SHARED, headers=_bearer("alice-token"))) == (409, "conflict")


def test_a_service_id_in_another_namespace_is_another_route() -> None:
    """Issue 27 item 5: bob registers alice's serviceId in his namespace; alice's route is unaffected
    (no 409, her own SLO), bob reads and writes only his, and nothing answered names the other."""
    cluster = _cluster()
    cluster.apis["llm"].create(llm_slo("hijack", "chat", namespace="team-b", highPriority=True))
    auth = _auth()
    auth.allow |= {("bob", "get", "*", "team-b", "*"), ("bob", "patch", "*", "team-b", "*")}
    with start_service(cluster, auth=auth) as r:
        mine = r.client.get(CHAT, headers=_bearer("alice-token"))
        assert mine.status_code == 200 and mine.json()["highPriority"] is False, mine.text
        put = r.client.put(CHAT, headers=_bearer("alice-token"), json={"highPriority": True})
        assert put.status_code == 200, put.text
        assert r.cluster.writes[-1][:3] == ("llm", "team-a", "chat-slo")
        theirs = r.client.get("/config/namespaces/team-b/chat", headers=_bearer("bob-token"))
        assert theirs.status_code == 200 and theirs.json()["highPriority"] is True
        # bob on alice's route: the same 404 as a route that does not exist, naming nothing of hers
        stolen = r.client.put(CHAT, headers=_bearer("bob-token"), json={"highPriority": False})
        assert _error(stolen) == (404, "not_found") and "chat-slo" not in stolen.text
        assert len(r.cluster.writes) == 1


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
@pytest.mark.parametrize("token", [None, "alice-token"], ids=["anonymous", "owner"])
def test_the_unscoped_path_of_0_1_is_gone_and_tells_nothing(method: str, token: str | None) -> None:
    with start_service(_cluster(), auth=_auth()) as r:
        headers = _bearer(token) if token else {}
        body = {} if method == "PUT" else None
        known = r.client.request(method, "/config/chat", headers=headers, json=body)
        unknown = r.client.request(method, "/config/nowhere", headers=headers, json=body)
        assert _error(known) == _error(unknown) == (410, "gone")
        assert known.json() == unknown.json()
        assert "/config/namespaces/<namespace>/<route>" in known.json()["error"]["message"]
        assert r.service.auth is not None and r.service.auth.authenticator.reviews == []  # type: ignore[attr-defined]
        assert r.cluster.writes == []


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
        resp = r.client.put(CHAT, content=b'{"highPriority": true, "x": "' + b"a" * 2000 + b'"}',
                            headers={"Content-Type": "application/json"})
        assert _error(resp) == (413, "payload_too_large")

        def chunks() -> Any:
            for _ in range(4):
                yield b"a" * 500

        assert _error(r.client.put(CHAT, content=chunks())) == (413, "payload_too_large")
        assert r.cluster.writes == []


@pytest.mark.parametrize("raw, fragment", [
    (b"{not json", "request body is not valid JSON"),
    (b'{"highPriority": "\xff"}', "not UTF-8"),
    (b"[" * 60000, "nested too deeply"),
    (b"", "request body is not valid JSON"),
], ids=["syntax", "utf8", "deep", "empty"])
def test_malformed_json_is_400(raw: bytes, fragment: str) -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(CHAT, content=raw, headers={"Content-Type": "application/json"})
        assert _error(resp) == (400, "invalid_request")
        assert fragment in resp.json()["error"]["message"]


def test_media_types() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(CHAT, content=b"highPriority=true",
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert _error(resp) == (415, "unsupported_media_type")
        ok = r.client.put(CHAT, content=b'{"highPriority": true}',
                          headers={"Content-Type": "application/merge-patch+json"})
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("method, path, status, code", [
    ("GET", "/nope", 404, "not_found"),
    ("POST", "/config", 405, "method_not_allowed"),
    ("PATCH", CHAT, 405, "method_not_allowed"),
    ("GET", "/config/a/b", 404, "not_found"),
    ("GET", "/config/namespaces/a/b/c", 404, "not_found"),
], ids=["path", "post-list", "patch-route", "slash", "too-deep"])
def test_framework_errors_use_the_envelope(method: str, path: str, status: int, code: str) -> None:
    with start_service(_cluster()) as r:
        assert _error(r.client.request(method, path)) == (status, code)


def test_openapi_describes_every_route_with_errors() -> None:
    with start_service(_cluster()) as r:
        doc = r.client.get("/openapi.json").json()
        paths = doc["paths"]
        assert set(paths) == {"/", "/healthz", "/readyz", "/config", "/config/namespaces/{namespace}/{route}",
                              "/config/{route}"}
        route = "/config/namespaces/{namespace}/{route}"
        assert set(paths[route]) == {"get", "put", "delete"}
        assert {op: set(v["responses"]) for op, v in paths["/config/{route}"].items()} == {
            op: {"410"} for op in ("get", "put", "delete")}
        put = paths[route]["put"]
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
