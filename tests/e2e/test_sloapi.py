"""The SLO API against the real API server (issue 12, docs/sloapi.md, seed 002), with a live
``python -m escaler slo-api`` running as a user bound to exactly ``manifests/rbac/slo-api.yaml``.

Seed 002's cases against the cluster: job routes GET/PUT keep ``promql``, LLM fields refused on job
routes, DELETE keeps ``queue`` (and clears an LLM route's ttft/otps), the list, a serviceId on both
kinds → 409 for reads and writes, ``pdengine`` and zero bounds written, ``queue`` validation, the
CRD's CEL refusal (422) → 400 rebuilt from the causes without the CR name; a missing JobSLO CRD
still ready; auth on: 401 without a token, 403 for a user without RBAC, 200 for an allowed one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import ROOT, Cluster, eventually
from .sloapi_helpers import (
    PROMQL_QUEUE,
    PROMQL_TTFT,
    SLOApi,
    apply_in,
    bind_owner,
    job_slo,
    llm_slo,
    route_path,
    sa_token,
    slo_api_token,
    spec_of,
    start_slo_api,
    three_routes,
    wait_route,
    wait_routes,
)

pytestmark = pytest.mark.e2e


_REFUSED = re.compile(r'HTTP/1\.1\\?" 403\b|\bForbidden\b')


def _refusals(log: str) -> list[str]:
    """The log lines saying the API server answered 403 (urllib3's request line) or Forbidden."""
    return [line for line in log.splitlines() if _REFUSED.search(line)]


def _error(resp: object) -> tuple[int, str, str]:
    body = resp.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return resp.status_code, body["error"]["code"], body["error"]["message"]  # type: ignore[attr-defined]


def test_routes_against_the_api_server(cluster: Cluster, namespace: str, tmp_path: Path,
                                       slo_apis: list[SLOApi]) -> None:
    ns = namespace
    apply_in(cluster, ns, *three_routes())
    api = start_slo_api(cluster, tmp_path, namespace=ns)
    slo_apis.append(api)

    # list: both kinds, summary shape
    routes = wait_routes(api, 3)
    assert [(r["route"], r["kind"]) for r in routes] == [
        ("batch-embed", "job"), ("chat-llama", "llm"), ("pd-llama", "llm")]
    assert set(routes[0]) == {"namespace", "route", "kind", "highPriority", "bounds", "observed"}
    # no manager runs here: what the engine observed is the objectives alone, no status yet
    assert routes[0]["observed"] == {"objectives": [
        {"signal": "queueDepth", "objective": "queue depth <= 200", "measured": None}],
        "decision": None, "ready": None}
    assert {r["namespace"] for r in routes} == {ns}
    # the unscoped path of 0.1: gone, for a route that exists as for one that does not
    for path in ("/config/chat-llama", "/config/nope"):
        assert _error(api.call("GET", path))[:2] == (410, "gone")

    # job route: GET, PUT keeps promql
    got = api.call("GET", route_path(ns, "batch-embed")).json()
    assert got["queue"] == {"maxDepth": 200, "promql": PROMQL_QUEUE}
    resp = api.call("PUT", route_path(ns, "batch-embed"), json={"queue": {"maxDepth": 50}})
    assert resp.status_code == 200, resp.text
    assert spec_of(cluster, ns, "jobslorequirements", "batch-cr")["queue"] == {
        "maxDepth": 50, "promql": PROMQL_QUEUE}

    # LLM fields refused on a job route, nothing written
    status, code, message = _error(api.call("PUT", route_path(ns, "batch-embed"),
                                            json={"ttft": {"targetMs": 100}}))
    assert (status, code) == (400, "invalid_request") and message.startswith("ttft: is a field of llm routes")

    # queue validation
    assert _error(api.call("PUT", route_path(ns, "batch-embed"), json={"queue": {"maxDepth": 0}}))[:2] == (
        400, "invalid_request")
    assert _error(api.call("PUT", route_path(ns, "batch-embed"), json={"queue": None}))[2] == (
        "queue: is required on a job route and cannot be removed")

    # DELETE keeps a job route's queue; clears an LLM route's ttft/otps
    assert api.call("DELETE", route_path(ns, "batch-embed")).json()["queue"]["promql"] == PROMQL_QUEUE
    assert "queue" in spec_of(cluster, ns, "jobslorequirements", "batch-cr")
    resp = api.call("DELETE", route_path(ns, "chat-llama"))
    assert resp.status_code == 200, resp.text
    spec = spec_of(cluster, ns, "llmslorequirements", "chat-cr")
    assert "ttft" not in spec and "otps" not in spec and spec["bounds"]["max"]["value"] == 8

    # a PUT merges into the stored objective: ttft back with its query, then promql left out
    resp = api.call("PUT", route_path(ns, "chat-llama"),
                    json={"ttft": {"targetMs": 900, "promql": PROMQL_TTFT}})
    assert resp.status_code == 200, resp.text
    resp = api.call("PUT", route_path(ns, "chat-llama"), json={"ttft": {"targetMs": 500}})
    assert resp.status_code == 200, resp.text
    assert spec_of(cluster, ns, "llmslorequirements", "chat-cr")["ttft"] == {
        "targetMs": 500, "percentile": 90, "promql": PROMQL_TTFT}

    # pdengine and zero bounds reach the cluster
    pd = {"min": {"type": "pdengine", "value": 0}, "max": {"type": "pdengine", "value": 2}}
    assert api.call("PUT", route_path(ns, "pd-llama"), json={"bounds": pd}).status_code == 200
    assert spec_of(cluster, ns, "llmslorequirements", "pd-cr")["bounds"] == pd
    zero = {"min": {"type": "replica", "value": 0}, "max": {"type": "replica", "value": 0}}
    assert api.call("PUT", route_path(ns, "chat-llama"), json={"bounds": zero}).status_code == 200
    assert spec_of(cluster, ns, "llmslorequirements", "chat-cr")["bounds"] == zero

    # the CRD's CEL refuses the merged spec: 422 → 400 from the causes, never naming the CR
    for body in ({"bounds": {"max": {"type": "concurrency"}}},
                 {"bounds": {"min": {"type": "pdengine", "value": 1},
                             "max": {"type": "pdengine", "value": 2}}},
                 {"bounds": {"max": {"value": 1}}}):
        route = "pd-llama" if body["bounds"].get("max", {}).get("value") == 1 else "chat-llama"
        resp = api.call("PUT", route_path(ns, route), json=body)
        status, code, message = _error(resp)
        assert (status, code) == (400, "invalid_request"), resp.text
        assert "bounds" in message, message
        for secret in ("chat-cr", "pd-cr", ns, "LLMSLORequirement", "spec."):
            assert secret not in resp.text, (secret, resp.text)
    assert spec_of(cluster, ns, "llmslorequirements", "chat-cr")["bounds"] == zero
    # one cause: its spec.bounds.max.type shown as the route body's bounds.max.type
    resp = api.call("PUT", route_path(ns, "chat-llama"), json={"bounds": {"max": {"type": "concurrency"}}})
    assert _error(resp) == (
        400, "invalid_request",
        "bounds.max.type: Invalid value: bounds.min.type and bounds.max.type must be the same")

    # unknown route
    assert _error(api.call("GET", route_path(ns, "nope")))[:2] == (404, "not_found")
    # the shipped RBAC was enough: the API server never refused the SLO API (a status of 403 on a
    # request line; a bare "403" could be part of a client port such as 127.0.0.1:44038)
    assert _refusals(api.output(tail=10**7)) == []


def test_service_id_on_both_kinds_is_409(cluster: Cluster, namespace: str, tmp_path: Path,
                                         slo_apis: list[SLOApi]) -> None:
    ns = namespace
    apply_in(cluster, ns, llm_slo("shared-llm", "shared"), job_slo("shared-job", "shared"))
    api = start_slo_api(cluster, tmp_path, namespace=ns)
    slo_apis.append(api)
    wait_routes(api, 2)
    message = f"serviceId shared is defined by more than one SLO requirement CRs in namespace {ns}"
    assert _error(api.call("GET", route_path(ns, "shared"))) == (409, "conflict", message)
    assert _error(api.call("PUT", route_path(ns, "shared"), json={"highPriority": True})) == (
        409, "conflict", message)
    assert _error(api.call("DELETE", route_path(ns, "shared"))) == (409, "conflict", message)
    assert spec_of(cluster, ns, "llmslorequirements", "shared-llm")["highPriority"] is False
    assert "ttft" in spec_of(cluster, ns, "llmslorequirements", "shared-llm")
    # the conflict ends when one CR goes
    cluster.kubectl("delete", "jobslorequirements.llm.escaler.io", "shared-job", "-n", ns)
    eventually(lambda: api.call("GET", route_path(ns, "shared")).status_code == 200, timeout=30,
               what="route resolved after the conflict ended")


def test_auth_token_401_404_200(cluster: Cluster, namespace: str, tmp_path: Path,
                                slo_apis: list[SLOApi]) -> None:
    ns = namespace
    apply_in(cluster, ns, llm_slo("chat-cr", "chat-llama"))
    api = start_slo_api(cluster, tmp_path, namespace=ns, auth="token")
    slo_apis.append(api)
    stranger = slo_api_token(cluster, ns, "stranger")
    owner = slo_api_token(cluster, ns, "owner")
    bind_owner(cluster, ns, "owner")
    # no token, a token for another audience: 401
    assert _error(api.call("GET", "/config"))[:2] == (401, "unauthorized")
    assert api.call("GET", "/config").headers["WWW-Authenticate"] == "Bearer"
    wrong_audience = sa_token(cluster, ns, "owner", audience="https://kubernetes.default.svc")
    chat = route_path(ns, "chat-llama")
    assert _error(api.call("GET", chat, token=wrong_audience))[:2] == (401, "unauthorized")
    # the owner's token for the manager's API (audience escaler) is not one for the SLO API
    # (issue 27 item 8: before, both accepted the same audience)
    managers_audience = sa_token(cluster, ns, "owner")
    status, code, message = _error(api.call("GET", chat, token=managers_audience))
    assert (status, code) == (401, "unauthorized") and "--audience escaler-slo-api" in message, message
    # an authenticated user without RBAC: the same 404 as a route that does not exist, naming neither
    # the namespace nor the CR behind it (issue 27 item 14)
    status, code, message = _error(api.call("PUT", route_path(ns, "chat-llama"), token=stranger,
                                            json={"highPriority": True}))
    assert (status, code) == (404, "not_found")
    user = f"system:serviceaccount:{ns}:stranger"
    assert message == f"route 'chat-llama' not found in namespace '{ns}', or user '{user}' may not patch it"
    missing = api.call("PUT", route_path(ns, "no-such-route"), token=stranger, json={"highPriority": True})
    assert _error(missing)[:2] == (404, "not_found")
    assert _error(api.call("GET", "/config", token=stranger))[:2] == (403, "forbidden")
    # the owner (escaler-slo-owner bound in the namespace): 200 (RBAC may take a moment to apply)
    eventually(lambda: api.call("GET", chat, token=owner).status_code == 200, timeout=30,
               what="owner allowed")
    resp = api.call("PUT", route_path(ns, "chat-llama"), token=owner, json={"highPriority": True})
    assert resp.status_code == 200, resp.text
    assert spec_of(cluster, ns, "llmslorequirements", "chat-cr")["highPriority"] is True
    assert [r["route"] for r in api.call("GET", "/config", token=owner).json()["routes"]] == ["chat-llama"]
    # probes, the form and the document need no token
    for path in ("/healthz", "/readyz", "/", "/openapi.json"):
        assert api.call("GET", path).status_code == 200, path
    # tokens are never logged
    for token in (owner, stranger, wrong_audience, managers_audience):
        assert token not in api.output(tail=10**7)


@pytest.mark.serial  # serial tier (docs/testing.md): it deletes a shipped CRD
def test_missing_job_crd_is_indexed_as_empty(cluster: Cluster, namespace: str, tmp_path: Path,
                                             slo_apis: list[SLOApi]) -> None:
    ns = namespace
    crd = ROOT / "manifests" / "crds" / "jobslorequirements.llm.escaler.io.yaml"
    apply_in(cluster, ns, llm_slo("chat-cr", "chat-llama"))
    cluster.kubectl("delete", "-f", str(crd), "--wait=true")
    try:
        api = start_slo_api(cluster, tmp_path, namespace=ns)  # waits for /readyz 200
        slo_apis.append(api)
        wait_route(api, ns, "chat-llama")
        assert [r["route"] for r in api.call("GET", "/config").json()["routes"]] == ["chat-llama"]
        assert "JobSLORequirement is not served by this cluster" in api.output()
    finally:
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
        cluster.wait_established("jobslorequirements.llm.escaler.io")
