"""Issue 27 item 5 on the real control plane: a ``serviceId`` is scoped by namespace, in the
manager's decisions and in the SLO API.

Tenant A (``namespace``) runs an LLMSLORequirement ``serviceId: chat`` and an LLMScaler reading it
(``customProvider.serviceId: chat``). Tenant B (a second namespace) registers the same serviceId,
and points a URL-based Custom provider at A's route on the manager. Asserted as the tenants see it:

* A's requirement stays ``Ready=True/Sized`` (before: ``ServiceIdConflict``, naming B's namespace
  and object) and B's is sized too: no conflict across namespaces;
* A's route answers A's decision to A's token; B's token gets the same 404 on A's route as on a
  route that does not exist (nothing of A's: no replicas, no namespace of B's in A's answers and
  vice versa); each tenant reads its own decision;
* without a token the route is 401, and the unscoped ``GET /decisions/chat`` of 0.1 is 410 without
  a token and whoever asks;
* A's LLMScaler scales A's Deployment to A's decision (not B's), B's to B's; B's URL provider aimed
  at A's route gets no decision (the manager's outbound GET carries no credentials: 401) and B's
  target is not moved by it.

And the SLO API over every namespace (``--auth token``): A's owner still reads and writes A's route
after B registers the serviceId (before: 404, since A's owner may not get B's CR), B's owner gets
the same 404 on A's route as on a missing one, and each listing shows its own namespace's route.

The manager and the SLO API watch every namespace (two tenants), so the tests are in the serial tier.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually
from .es_helpers import Manager, apply, cond, deployment, replicas, start_manager
from .sloapi_helpers import (
    SLOApi,
    apply_in,
    bind_owner,
    route_path,
    slo_api_token,
    spec_of,
    start_slo_api,
)
from .sloapi_helpers import llm_slo as sloapi_llm
from .test_slo_engine import (
    decisions_path,
    http_base,
    http_get,
    llm_scaler,
    llm_slo,
    reader_token,
    ready_is,
    wait_decision,
)

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # serial: the manager watches every namespace

SID = "chat"


@pytest.fixture
def tenant_b(cluster: Cluster) -> Iterator[str]:
    name = f"e2e-tenant-b-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    eventually(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False),
               timeout=120, interval=0.5, what=f"default service account in {name}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def fleet_engine(cluster: Cluster, prometheus: Any, managers: list[Manager], tmp_path: Path) -> Manager:
    """A manager over every namespace, with the SLO engine on the fake Prometheus (plain HTTP API)."""
    mgr = start_manager(cluster, tmp_path, user="slo-tenants",
                        extra_args=[f"--slo-prometheus-endpoint={prometheus.url}", "--api-insecure"])
    managers.append(mgr)

    def answering() -> bool:
        try:  # 410 (404 on the code before the fix, whose route was public)
            return http_get(mgr, "/decisions/warm-up", None)[0] in (404, 410)
        except OSError:
            return not mgr.alive()

    eventually(answering, timeout=40, what="the manager's API answering")
    assert mgr.alive(), mgr.output()
    return mgr


def _scaler_message(cluster: Cluster, ns: str, name: str) -> str:
    obj = cluster.kubectl_json("get", "llmscaler", name, "-n", ns)
    return cond(obj, "ScalingActive")[2] if (obj.get("status") or {}).get("conditions") else ""


def test_a_tenant_registering_another_tenants_service_id_changes_nothing_for_it(
        cluster: Cluster, namespace: str, tenant_b: str, prometheus: Any, fleet_engine: Manager) -> None:
    a, b, mgr = namespace, tenant_b, fleet_engine
    a_ttft, a_otps = f'ttft{{namespace="{a}"}}', f'otps{{namespace="{a}"}}'
    b_ttft, b_otps = f'ttft{{namespace="{b}"}}', f'otps{{namespace="{b}"}}'
    prometheus.set(a_ttft, 1200.0)  # 1.5x the target: A's 2 replicas → 3 (its max bound)
    prometheus.set(a_otps, 25.0)
    prometheus.set(b_ttft, 1600.0)  # 2x: B's 1 replica → 2 (its max bound)
    prometheus.set(b_otps, 25.0)
    apply(cluster, a, deployment("llama", 2))
    apply(cluster, a, llm_slo("chat", SID, "llama", a_ttft, a_otps, maxr=3))
    wait_decision(cluster, a, "chat", lambda o: ready_is("True", "Sized")(o)
                  and o["status"]["decision"]["replicas"] == 3, mgr, what="A sized: 3 replicas")

    # B registers A's serviceId in its own namespace
    apply(cluster, b, deployment("llama", 1))
    apply(cluster, b, llm_slo("chat", SID, "llama", b_ttft, b_otps, maxr=2))
    wait_decision(cluster, b, "chat", lambda o: ((o.get("status") or {}).get("decision") or {}).get(
        "replicas") == 2, mgr, what="B sized: 2 replicas")
    # A is not in conflict with B (the old code: Ready=False/ServiceIdConflict naming B's namespace)
    for ns in (a, b):
        obj = cluster.kubectl_json("get", "llmslo", "chat", "-n", ns)
        assert cond(obj, "Ready")[:2] == ("True", "Sized"), (ns, obj.get("status"))
        other = b if ns == a else a
        assert other not in json.dumps(obj.get("status")), (ns, obj.get("status"))

    # the route: each tenant reads its own decision, and nothing of the other's
    token_a, token_b = reader_token(cluster, a, "tenant-a"), reader_token(cluster, b, "tenant-b")
    code, body = http_get(mgr, decisions_path(a, SID), token_a)
    assert (code, body.get("replicas")) == (200, 3), body
    code, body = http_get(mgr, decisions_path(b, SID), token_b)
    assert (code, body.get("replicas")) == (200, 2), body
    stolen = http_get(mgr, decisions_path(a, SID), token_b)
    missing = http_get(mgr, decisions_path(a, "no-such-route"), token_b)
    assert stolen[0] == missing[0] == 404, (stolen, missing)
    assert stolen[1]["error"]["message"] == missing[1]["error"]["message"].replace("no-such-route", SID)
    assert set(stolen[1]) == {"error"} and "scale up" not in json.dumps(stolen[1])  # nothing of A's
    assert http_get(mgr, decisions_path(b, SID), token_a)[0] == 404
    # no token: refused; the unscoped route of 0.1 is gone, whoever asks
    code, body = http_get(mgr, decisions_path(a, SID), None)
    assert code == 401 and set(body) == {"error"}
    for token in (None, token_a, token_b):
        code, body = http_get(mgr, f"/decisions/{SID}", token)
        assert code == 410 and body["error"]["code"] == "gone", body
        assert a not in json.dumps(body) and b not in json.dumps(body)

    # the scalers: each reads its own namespace's route, in-process
    apply(cluster, a, llm_scaler("chat", "llama", service_id=SID, maxr=6))
    apply(cluster, b, llm_scaler("chat", "llama", service_id=SID, maxr=6))
    # B also aims a URL provider at A's route on the manager: no credentials, no decision
    apply(cluster, b, deployment("probe", 1))
    apply(cluster, b, llm_scaler("probe", "probe", url=f"{http_base(mgr)}{decisions_path(a, SID)}", maxr=6))
    try:
        eventually(lambda: replicas(cluster, a, "llama") == 3 and replicas(cluster, b, "llama") == 2,
                   timeout=90, what="A's llama at A's decision (3), B's at B's (2)")
        eventually(lambda: "HTTP 401" in _scaler_message(cluster, b, "probe"), timeout=60,
                   what="B's URL provider on A's route refused (401)")
    except AssertionError as e:
        raise AssertionError(f"{e}; manager log:\n{mgr.output(3000)}") from None
    assert replicas(cluster, b, "probe") == 1
    a_scaler = cluster.kubectl_json("get", "llmscaler", "chat", "-n", a)
    assert f"serviceId {SID}" in json.dumps(a_scaler.get("status")) and b not in json.dumps(a_scaler)


def _read_route(api: SLOApi, ns: str, route: str, token: str) -> Any:
    """A route as the SLO API serves it: the namespaced path, or — on a server without it (the code
    before issue 27 item 5, run with ESCALER_E2E_SRC) — the unscoped path it had."""
    resp = api.call("GET", route_path(ns, route), token=token)
    if resp.status_code == 404 and "no such path" in resp.text:
        resp = api.call("GET", f"/config/{route}", token=token)
    return resp


def test_the_slo_api_serves_each_tenant_its_own_route(cluster: Cluster, namespace: str, tenant_b: str,
                                                      slo_apis: list[SLOApi], tmp_path: Path) -> None:
    """The SLO API over every namespace (--auth token): B registers A's serviceId; A's owner still
    reads and writes A's route (before: 404, A's owner may not get B's CR), B's owner only B's, and
    neither answer names the other namespace or CR."""
    a, b = namespace, tenant_b
    apply_in(cluster, a, sloapi_llm("chat-a", SID))
    api = start_slo_api(cluster, tmp_path, namespace="", auth="token")
    slo_apis.append(api)
    bind_owner(cluster, a, "owner-a")
    owner_a = slo_api_token(cluster, a, "owner-a")
    eventually(lambda: _read_route(api, a, SID, owner_a).status_code == 200, timeout=30,
               what="A's owner reading A's route")
    apply_in(cluster, b, sloapi_llm("chat-b", SID, highPriority=True))
    bind_owner(cluster, b, "owner-b")
    owner_b = slo_api_token(cluster, b, "owner-b")
    # B's route indexed and B's owner allowed (listing: the same on the code before)
    def listed_by_b() -> list[str]:
        return [r["route"] for r in api.call("GET", "/config", token=owner_b).json().get("routes", [])]

    # polled once a second: while B's RoleBinding is not in force each try is a denial, and denials
    # are budgeted per user (10, then 1 a second; then 429 for that user) — a faster poll would spend
    # B's budget before the assertions below
    eventually(lambda: listed_by_b() == [SID], timeout=30, interval=1.1, what="B's owner listing B's route")
    resp = _read_route(api, a, SID, owner_a)
    assert resp.status_code == 200 and resp.json()["highPriority"] is False, resp.text  # before: 404
    resp = api.call("GET", route_path(b, SID), token=owner_b)
    assert resp.status_code == 200 and resp.json()["highPriority"] is True, resp.text
    resp = api.call("PUT", route_path(a, SID), token=owner_a, json={"bounds": {"max": {"type": "replica",
                                                                                         "value": 5}}})
    assert resp.status_code == 200, resp.text
    assert spec_of(cluster, a, "llmslorequirements", "chat-a")["bounds"]["max"]["value"] == 5
    # B on A's route: the same 404 as a route that does not exist; nothing of A's, no write
    stolen = api.call("PUT", route_path(a, SID), token=owner_b, json={"highPriority": True})
    missing = api.call("PUT", route_path(a, "no-such-route"), token=owner_b, json={"highPriority": True})
    assert stolen.status_code == missing.status_code == 404, (stolen.text, missing.text)
    assert stolen.json()["error"]["message"] == missing.json()["error"]["message"].replace(
        "no-such-route", SID)
    assert "chat-a" not in stolen.text
    assert spec_of(cluster, a, "llmslorequirements", "chat-a").get("highPriority", False) is False
    # the listing: each owner sees its own namespace's route only
    for token, ns in ((owner_a, a), (owner_b, b)):
        # B spent two denials just above: a 429 (its budget) clears within a second
        def listed(token: str = token) -> Any:
            r = api.call("GET", "/config", token=token)
            return r if r.status_code == 200 else None

        listing = eventually(listed, timeout=15, interval=1.1, what=f"{ns}'s owner listing its routes")
        routes = listing.json()["routes"]
        assert [(r["namespace"], r["route"]) for r in routes] == [(ns, SID)], routes
