"""``GET /decisions/{serviceId}`` over real loopback HTTP on the manager's ``ApiServer``, wired by
``setup_slo``: 200 with ``{"replicas", "reason", "signals", "time"}`` (what an LLMScaler Custom
provider reads), a held decision still 200, 404 for an unknown serviceId, 409 when two requirements
(of either kind) define it, 503 before the first decision and for an invalid spec (saying why), the
error envelope, a public route (no token needed although the server authenticates every other
route), GET only, and the book's per-uid entries (a recreated requirement never serves its
predecessor's decision)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, deployment
from test_slo_reconciler import DEPTH_Q, JOB, LLM, OTPS_Q, TTFT_Q, Rig, job_req, llm_req

from escaler.reconcilers.slo.decisions import DecisionBook, Owner
from escaler.runtime.apiserver import ApiServer
from escaler.runtime.authn import AccessDecision, Attributes, UserInfo
from escaler.runtime.types import Request


class DenyAll:
    """An authenticator that accepts no token: only public routes answer."""

    def authenticate(self, token: str) -> UserInfo | None:
        return None

    def authorize(self, user: UserInfo, attributes: Attributes) -> AccessDecision:
        raise AssertionError("a public route is never authorized")


class RouteRig(Rig):
    """The SLO engine with its route on a real ``ApiServer`` (plain HTTP, every non-public route
    authenticated by ``DenyAll``)."""

    def __init__(self) -> None:
        self.server = ApiServer("127.0.0.1:0", insecure=True, authenticator=DenyAll())
        super().__init__(api_server=self.server)

    def get(self, path: str, method: str = "GET") -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=5)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            body = resp.read()
            return resp.status, json.loads(body) if body else None
        finally:
            conn.close()


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


def test_a_decision_is_served_without_credentials(rig: RouteRig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    code, body = rig.get("/decisions/chat-llama")
    assert code == 200
    assert body["replicas"] == 6 and "scale up 4 -> 6" in body["reason"]
    assert body["signals"]["ttftMs"] == 1200.0 and body["time"].endswith("Z")
    # every other path still needs a token: the server authenticates
    assert rig.get("/decisions")[0] == 404
    assert rig.get("/decisions/chat-llama", "POST")[0] == 405


def test_a_held_decision_is_still_served_and_says_it_is_held(rig: RouteRig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    rig.h.clock.step(30)
    rig.answers[TTFT_Q] = "Prometheus query failed: timeout"
    rig.reconcile()
    code, body = rig.get("/decisions/chat-llama")
    assert code == 200 and body["replicas"] == 6
    assert "signals missing (ttftMs: Prometheus query failed: timeout)" in body["reason"]


def test_unknown_service_is_404_in_the_error_envelope(rig: RouteRig) -> None:
    code, body = rig.get("/decisions/nope")
    assert code == 404
    assert body == {"error": {"code": "not_found",
                              "message": "no LLMSLORequirement or JobSLORequirement defines serviceId nope"}}


def test_a_service_id_on_two_requirements_across_kinds_is_409(rig: RouteRig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0, DEPTH_Q: 10.0})
    rig.api().create(llm_req(service_id="shared"))
    rig.api(JOB).create(job_req(service_id="shared"))
    rig.reconcile()
    rig.reconcile(JOB, "batch")
    code, body = rig.get("/decisions/shared")
    assert code == 409 and body["error"]["code"] == "conflict"
    assert body["error"]["message"].startswith(
        "serviceId shared is defined by more than one SLO requirement CRs")
    # the job route alone still answers
    rig.api(JOB).delete(f"{NS}/batch")
    rig.h.wait_synced("jobslorequirements")
    assert rig.get("/decisions/shared")[0] == 200


def test_no_decision_yet_and_invalid_spec_are_503_saying_why(rig: RouteRig) -> None:
    rig.api().create(llm_req())
    rig.h.wait_synced("llmslorequirements")  # the route finds the requirement in the cache
    code, body = rig.get("/decisions/chat-llama")
    assert code == 503 and "has no decision yet" in body["error"]["message"]
    bad = llm_req("broken", service_id="broken")
    bad["spec"]["bounds"] = {"min": {"type": "replica", "value": 5}, "max": {"type": "replica", "value": 2}}
    rig.api().create(bad)
    rig.reconcile(LLM, "broken")
    rig.h.wait_synced("llmslorequirements")  # the InvalidSpec condition the reconcile wrote
    code, body = rig.get("/decisions/broken")
    assert code == 503 and body["error"]["code"] == "unavailable"
    assert "InvalidSpec: spec.bounds.min.value" in body["error"]["message"]


def test_a_recreated_requirement_does_not_serve_its_predecessors_decision() -> None:
    book = DecisionBook()
    entries: list[dict[str, Any]] = []

    class Indexer:
        def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
            return entries

    book.add_kind(LLM, Indexer())
    book.put(LLM, Request(NS, "chat"), "uid-1", {"replicas": 3})
    entries.append({"metadata": {"namespace": NS, "name": "chat", "uid": "uid-2"}})
    assert book.owners("x") == [Owner(LLM, NS, "chat", "uid-2")]
    assert book.served(Owner(LLM, NS, "chat", "uid-2")) is None
    assert book.served(Owner(LLM, NS, "chat", "uid-1")) is not None
    book.forget(LLM, Request(NS, "chat"))
    assert len(book) == 0
