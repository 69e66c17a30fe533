"""``GET /decisions/v1/namespaces/{namespace}/{serviceId}`` over real loopback HTTP on the manager's
``ApiServer``, wired by ``setup_slo``: 200 with ``{"replicas", "reason", "signals", "time"}`` (what an
LLMScaler Custom provider reads), a held decision still 200, 404 for an unknown serviceId, 409 when two
requirements (of either kind) of one namespace define it, 503 before the first decision and for an
invalid spec (saying why), the error envelope, GET only, and the book's per-uid entries (a recreated
requirement never serves its predecessor's decision).

Issue 27 item 5: a serviceId is scoped by namespace. Two namespaces using one serviceId do not
conflict and each reads its own decision; the route needs a bearer token (401 without one) and
``get`` on the requirement (a denied route is the same 404 as a missing one, both charged to the
user's denial budget, then 429 without a review); nothing answered names another namespace or
object; the unscoped route of 0.1 answers 410 naming the new one, without credentials and without
telling whether the serviceId exists."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, deployment
from test_slo_reconciler import DEPTH_Q, JOB, LLM, OTPS_Q, TTFT_Q, Rig, job_req, llm_req

from escaler.reconcilers.kit.watchkey import NOT_SYNCED_RETRY_SECONDS
from escaler.reconcilers.slo.decisions import (
    DecisionBook,
    Decisions,
    DecisionsAPI,
    Owner,
    Unavailable,
    route_key,
)
from escaler.runtime.apiserver import ApiError, ApiRequest, ApiServer
from escaler.runtime.authfilter import RequestAuth
from escaler.runtime.authn import AccessDecision, Attributes, ResourceAttributes, UserInfo
from escaler.runtime.types import Request, Result

OTHER = "rival"
# bearer token → user
TOKENS = {"team-token": "alice", "rival-token": "mallory"}


class Policy:
    """Tokens from ``TOKENS``; a user may ``get`` SLO requirements in the namespaces ``grants`` lists."""

    def __init__(self) -> None:
        self.grants: dict[str, set[str]] = {"alice": {NS}, "mallory": {OTHER}}
        # every SubjectAccessReview asked for, in order
        self.reviews: list[tuple[str, ResourceAttributes]] = []

    def authenticate(self, token: str) -> UserInfo | None:
        name = TOKENS.get(token)
        return UserInfo(name) if name is not None else None

    def authorize(self, user: UserInfo, attributes: Attributes) -> AccessDecision:
        assert isinstance(attributes, ResourceAttributes)
        self.reviews.append((user.username, attributes))
        ok = (attributes.verb == "get" and attributes.group == "llm.escaler.io"
              and attributes.resource in ("llmslorequirements", "jobslorequirements")
              and attributes.namespace in self.grants.get(user.username, set()))
        return AccessDecision(ok)


class RouteRig(Rig):
    """The SLO engine with its route on a real ``ApiServer`` (plain HTTP, authenticated by ``Policy``)."""

    def __init__(self) -> None:
        self.policy = Policy()
        self.server = ApiServer("127.0.0.1:0", insecure=True, authenticator=self.policy)
        super().__init__(api_server=self.server)

    def get(self, path: str, method: str = "GET", token: str | None = "team-token") -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)
        try:
            conn.request(method, path, headers={"Authorization": f"Bearer {token}"} if token else {})
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, json.loads(body) if body else None
        finally:
            conn.close()

    def reconcile_in(self, ns: str, kind: str = LLM, name: str = "chat") -> None:
        for r in ("llmslorequirements", "jobslorequirements", "deployments"):
            self.h.wait_synced(r)
        rec = self.engine.controllers[kind].reconciler
        if rec.reconcile(Request(ns, name)) == Result(requeue_after=NOT_SYNCED_RETRY_SECONDS):
            self.h.wait_listed()
            rec.reconcile(Request(ns, name))


def route(service_id: str, ns: str = NS) -> str:
    return f"/decisions/v1/namespaces/{ns}/{service_id}"


def in_ns(obj: dict[str, Any], ns: str) -> dict[str, Any]:
    obj["metadata"]["namespace"] = ns
    if "uid" in obj["metadata"]:
        obj["metadata"]["uid"] = f"{ns}-{obj['metadata']['uid']}"
    return obj


@pytest.fixture
def rig() -> Iterator[RouteRig]:
    r = RouteRig()
    r.h.api("deployments").create(deployment("web", 4))
    r.start()
    r.server.serve()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.h.stop()


def test_a_decision_is_served_to_a_user_allowed_to_get_the_requirement(rig: RouteRig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    code, body = rig.get(route("chat-llama"))
    assert code == 200
    assert body["replicas"] == 6 and "scale up 4 -> 6" in body["reason"]
    assert body["signals"]["ttftMs"] == 1200.0 and body["time"].endswith("Z")
    # the review names the requirement itself: get on llmslorequirements/chat in its namespace
    assert rig.policy.reviews[-1] == ("alice", ResourceAttributes(
        verb="get", group="llm.escaler.io", resource="llmslorequirements", namespace=NS, name="chat"))
    assert rig.get("/decisions/v1/namespaces")[0] == 404
    assert rig.get(route("chat-llama"), "POST")[0] == 405


@pytest.mark.parametrize("token", [None, "not-a-token"], ids=["no-token", "invalid-token"])
def test_the_route_needs_a_valid_bearer_token(rig: RouteRig, token: str | None) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    code, body = rig.get(route("chat-llama"), token=token)
    assert code == 401 and body["error"]["code"] == "unauthorized"
    assert "replicas" not in json.dumps(body) and "chat" not in body["error"]["message"]
    assert rig.policy.reviews == []


def test_a_route_the_user_may_not_get_is_the_same_404_as_a_missing_one(rig: RouteRig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    denied = rig.get(route("chat-llama"), token="rival-token")
    missing = rig.get(route("nope"), token="rival-token")
    assert denied[0] == missing[0] == 404
    assert denied[1]["error"]["message"] == (
        f"no LLMSLORequirement or JobSLORequirement in namespace {NS} defines serviceId chat-llama, "
        "or user 'mallory' may not get it")
    assert missing[1]["error"]["message"].replace("nope", "chat-llama") == denied[1]["error"]["message"]
    assert "replicas" not in json.dumps(denied[1])


def test_denied_and_missing_routes_charge_the_users_denial_budget(rig: RouteRig) -> None:
    rig.api().create(llm_req())
    rig.h.wait_synced("llmslorequirements")
    codes = [rig.get(route("chat-llama" if i % 2 else f"nope-{i}"), token="rival-token")[0]
             for i in range(12)]
    assert codes[:10] == [404] * 10 and set(codes[10:]) == {429}
    reviews = len(rig.policy.reviews)
    assert rig.get(route("chat-llama"), token="rival-token")[0] == 429
    assert len(rig.policy.reviews) == reviews  # past the budget: no review at all
    # another user is not affected
    assert rig.get(route("chat-llama"))[0] == 503


def test_unknown_service_is_404_in_the_error_envelope(rig: RouteRig) -> None:
    code, body = rig.get(route("nope"))
    assert code == 404
    assert body == {"error": {"code": "not_found", "message": (
        f"no LLMSLORequirement or JobSLORequirement in namespace {NS} defines serviceId nope, "
        "or user 'alice' may not get it")}}


def test_the_same_service_id_in_two_namespaces_is_no_conflict(rig: RouteRig) -> None:
    """Issue 27 item 5: mallory registers alice's serviceId in her own namespace; alice's route and
    decision are unaffected, mallory reads only her own, and no answer names the other namespace."""
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    rig.h.api("deployments").create(in_ns(deployment("web", 1), OTHER))
    rig.api().create(in_ns(llm_req(), OTHER))
    rig.reconcile_in(OTHER)
    rig.reconcile()
    assert rig.ready()[1] == "Sized"
    code, mine = rig.get(route("chat-llama"))
    assert code == 200 and mine["replicas"] == 6
    code, theirs = rig.get(route("chat-llama", OTHER), token="rival-token")
    assert code == 200, theirs
    assert "scale up 1 -> 2" in theirs["reason"]  # sized from its own target (1 replica), not alice's
    # neither may read the other's route, and the answer does not tell it exists
    for token, ns in (("rival-token", NS), ("team-token", OTHER)):
        code, body = rig.get(route("chat-llama", ns), token=token)
        assert code == 404
        other = OTHER if ns == NS else NS
        assert other not in json.dumps(body)


def test_a_service_id_on_two_requirements_of_one_namespace_is_409_naming_no_object(rig: RouteRig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0, DEPTH_Q: 10.0})
    rig.api().create(llm_req(service_id="shared"))
    rig.api(JOB).create(job_req(service_id="shared"))
    rig.reconcile()
    rig.reconcile(JOB, "batch")
    code, body = rig.get(route("shared"))
    assert code == 409 and body["error"] == {
        "code": "conflict",
        "message": f"serviceId shared is defined by more than one SLO requirement CRs in namespace {NS}"}
    # the job route alone still answers
    rig.api(JOB).delete(f"{NS}/batch")
    rig.h.wait_synced("jobslorequirements")
    assert rig.get(route("shared"))[0] == 200


@pytest.mark.parametrize("token", [None, "team-token", "rival-token"], ids=["anonymous", "owner", "other"])
def test_the_unscoped_route_of_0_1_is_gone_and_tells_nothing(rig: RouteRig, token: str | None) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    known = rig.get("/decisions/chat-llama", token=token)
    unknown = rig.get("/decisions/nope", token=token)
    assert known[0] == unknown[0] == 410 and known[1] == unknown[1]
    assert known[1]["error"]["code"] == "gone"
    assert "GET /decisions/v1/namespaces/<namespace>/<serviceId>" in known[1]["error"]["message"]
    assert "customProvider.serviceId" in known[1]["error"]["message"]
    assert rig.policy.reviews == []


def test_a_held_decision_is_still_served_and_says_it_is_held(rig: RouteRig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    rig.h.clock.step(30)
    rig.answers[TTFT_Q] = "Prometheus query failed: timeout"
    rig.reconcile()
    code, body = rig.get(route("chat-llama"))
    assert code == 200 and body["replicas"] == 6
    assert "signals missing (ttftMs: Prometheus query failed: timeout)" in body["reason"]


def test_no_decision_yet_and_invalid_spec_are_503_saying_why(rig: RouteRig) -> None:
    rig.api().create(llm_req())
    rig.h.wait_synced("llmslorequirements")  # the route finds the requirement in the cache
    code, body = rig.get(route("chat-llama"))
    assert code == 503 and "has no decision yet" in body["error"]["message"]
    bad = llm_req("broken", service_id="broken")
    bad["spec"]["bounds"] = {"min": {"type": "replica", "value": 5}, "max": {"type": "replica", "value": 2}}
    rig.api().create(bad)
    rig.reconcile(LLM, "broken")
    rig.h.wait_synced("llmslorequirements")  # the InvalidSpec condition the reconcile wrote
    code, body = rig.get(route("broken"))
    assert code == 503 and body["error"]["code"] == "unavailable"
    assert "InvalidSpec: spec.bounds.min.value" in body["error"]["message"]


def test_a_recreated_requirement_does_not_serve_its_predecessors_decision() -> None:
    book = DecisionBook()
    entries: list[dict[str, Any]] = []

    class Indexer:
        def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
            return entries if value == route_key(NS, "x") else []

    book.add_kind(LLM, Indexer())
    book.put(LLM, Request(NS, "chat"), "uid-1", {"replicas": 3})
    entries.append({"metadata": {"namespace": NS, "name": "chat", "uid": "uid-2"}})
    assert book.owners(NS, "x") == [Owner(LLM, NS, "chat", "uid-2")]
    assert book.owners(OTHER, "x") == []
    assert book.served(Owner(LLM, NS, "chat", "uid-2")) is None
    assert book.served(Owner(LLM, NS, "chat", "uid-1")) is not None
    book.forget(LLM, Request(NS, "chat"))
    assert len(book) == 0


def test_the_handler_fails_closed_without_a_reviewed_user() -> None:
    """Registered without the server's filter (a public route by mistake), the handler refuses rather
    than answer an unauthenticated caller."""

    api = DecisionsAPI(Decisions(DecisionBook()), {}, auth=RequestAuth(Policy()))
    request = ApiRequest("GET", route("chat"), {"namespace": NS, "serviceId": "chat"}, {}, {}, None, None)
    with pytest.raises(ApiError) as err:
        api.handle(request)
    assert err.value.status == 401


@pytest.mark.parametrize(("status", "expected"), [
    ({"decision": {"replicas": 4, "reason": "scale up 2 -> 4"},
      "conditions": [{"type": "Ready", "status": "True", "reason": "Sized"}]}, {"replicas": 4}),
    ({"decision": {"replicas": 4}, "conditions": [{"type": "Ready", "status": "False",
                                                   "reason": "InvalidSpec"}]}, "shard 1 of 2"),
    ({}, "shard 1 of 2"),
], ids=["held-decision", "invalid-spec", "no-decision"])
def test_in_process_reads_on_another_shard_use_the_decision_the_status_holds(
        status: dict[str, Any], expected: Any) -> None:
    """A sharded manager: the requirement's shard is led elsewhere, so this replica's book is empty;
    the in-process lookup (an LLMScaler's serviceId) answers what the cached status holds, the route
    still 503 naming the shard."""
    book = DecisionBook()
    obj = {"metadata": {"namespace": NS, "name": "chat", "uid": "u"}, "spec": {"serviceId": "x"},
           "status": status}

    class Indexer:
        def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
            return [obj] if value == route_key(NS, "x") else []

    book.add_kind(LLM, Indexer())
    decisions = Decisions(book, lambda owner: "shard 1 of 2 is not led by this replica")
    got = decisions.lookup(NS, "x")
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got["replicas"] == expected["replicas"]
    else:
        assert isinstance(got, str) and expected in got
    assert isinstance(decisions.lookup(OTHER, "x"), str)  # another namespace: nothing held there
    with pytest.raises(Unavailable) as err:
        decisions.answer(NS, "x")
    assert err.value.status == 503
