"""The SLO API's routes over an in-memory cluster (FastAPI TestClient; ``sloapi_fakes``).

Seed 002's test list ("How it was tested") → test here:

* job routes GET / PUT keeps ``promql``         → test_job_route_get, test_job_put_keeps_promql
* LLM fields refused on job routes             → test_llm_fields_refused_on_job_route
* DELETE keeps ``queue``                       → test_delete_job_route_keeps_queue
                                                 (and test_delete_llm_route_clears_ttft_otps)
* list                                         → test_list_both_kinds_in_summary_shape
* a serviceId shared across kinds is 409       → test_service_id_on_two_kinds_is_409
* a missing JobSLO CRD still syncs (ready)     → test_sloapi_index.py::test_missing_job_crd_still_ready
* a relist of one kind keeps the other         → test_sloapi_index.py::test_relist_of_one_kind_keeps_the_other
* pdengine / zero bounds                       → test_pdengine_and_zero_bounds
* queue validation                             → test_queue_validation
* 422 → 400 without the CR name                → test_422_is_400_without_the_cr_name
"""

from __future__ import annotations

from typing import Any

import pytest

from escaler.errors import ConnectionFailure, StatusError
from tests.unit.fakeapi import wait_until
from tests.unit.sloapi_fakes import (
    PROMQL_OTPS,
    PROMQL_QUEUE,
    PROMQL_TTFT,
    FakeSLOCluster,
    job_slo,
    llm_slo,
    start_service,
)

# the routes of the tests' clusters, by namespace (a route is a serviceId in a namespace)
CHAT = "/config/namespaces/team-a/chat-llama"
BATCH = "/config/namespaces/team-b/batch-embed"
SHARED = "/config/namespaces/team-a/shared"
NOPE = "/config/namespaces/team-a/nope"
# each route's namespace in _cluster() (llm_slo defaults to team-a, job_slo to team-b)
NS_OF = {"chat-llama": "team-a", "pd-llama": "team-a", "batch-embed": "team-b"}


def _cluster() -> FakeSLOCluster:
    return FakeSLOCluster([
        llm_slo("chat-llama-slo", "chat-llama"),
        llm_slo("pd-llama-slo", "pd-llama", deployType="pd",
                bounds={"min": {"type": "pdengine", "value": 1}, "max": {"type": "pdengine", "value": 2}}),
        job_slo("batch-embed-slo", "batch-embed"),
    ])


def _error(resp: Any) -> tuple[int, str, str]:
    body = resp.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message"}, body
    return resp.status_code, body["error"]["code"], body["error"]["message"]


def test_job_route_get() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.get(BATCH)
        assert resp.status_code == 200, resp.text
        assert resp.json() == {
            "route": "batch-embed", "kind": "job", "highPriority": False, "concurrencyPerReplica": 1,
            "queue": {"maxDepth": 200, "promql": PROMQL_QUEUE},
            "bounds": {"min": {"type": "concurrency", "value": 0}, "max": {"type": "replica", "value": 4}},
            # no status yet: the objective, nothing measured, no decision
            "observed": {"objectives": [{"signal": "queueDepth", "objective": "queue depth <= 200",
                                         "measured": None}], "decision": None, "ready": None},
        }


def test_llm_route_get() -> None:
    with start_service(_cluster()) as r:
        body = r.client.get(CHAT).json()
        assert body["kind"] == "llm" and body["deployType"] == "aggregated"
        assert body["ttft"] == {"targetMs": 800, "percentile": 90, "promql": PROMQL_TTFT}
        assert body["otps"] == {"target": 20, "promql": PROMQL_OTPS}
        assert "queue" not in body
        # never the CR's identity
        assert "chat-llama-slo" not in r.client.get(CHAT).text


def test_job_put_keeps_promql() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(BATCH, json={"queue": {"maxDepth": 50}, "highPriority": True})
        assert resp.status_code == 200, resp.text
        assert resp.json()["queue"] == {"maxDepth": 50, "promql": PROMQL_QUEUE}
        assert resp.json()["highPriority"] is True
        stored = r.cluster.apis["job"].get("team-b/batch-embed-slo")
        assert stored is not None and stored["spec"]["queue"] == {"maxDepth": 50, "promql": PROMQL_QUEUE}
        # the write was a merge patch of only the given fields
        assert r.cluster.writes == [("job", "team-b", "batch-embed-slo",
                                     {"spec": {"queue": {"maxDepth": 50}, "highPriority": True}})]


def test_llm_put_keeps_promql_and_merges_nested() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(CHAT, json={"ttft": {"targetMs": 500}})
        assert resp.status_code == 200, resp.text
        assert resp.json()["ttft"] == {"targetMs": 500, "percentile": 90, "promql": PROMQL_TTFT}
        assert resp.json()["otps"] == {"target": 20, "promql": PROMQL_OTPS}


@pytest.mark.parametrize("body, field", [
    ({"ttft": {"targetMs": 100, "promql": "x"}}, "ttft"),
    ({"otps": {"target": 5}}, "otps"),
    ({"deployType": "pd"}, "deployType"),
], ids=["ttft", "otps", "deployType"])
def test_llm_fields_refused_on_job_route(body: dict[str, Any], field: str) -> None:
    with start_service(_cluster()) as r:
        status, code, message = _error(r.client.put(BATCH, json=body))
        assert (status, code) == (400, "invalid_request")
        assert message.startswith(f"{field}: is a field of llm routes (LLMSLORequirement), not of job routes")
        assert r.cluster.writes == []


def test_queue_refused_on_llm_route() -> None:
    with start_service(_cluster()) as r:
        status, _, message = _error(r.client.put(CHAT, json={"queue": {"maxDepth": 3}}))
        assert status == 400
        assert message.startswith("queue: is a field of job routes (JobSLORequirement), not of llm routes")


def test_delete_job_route_keeps_queue() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.delete(BATCH)
        assert resp.status_code == 200, resp.text
        assert resp.json()["queue"] == {"maxDepth": 200, "promql": PROMQL_QUEUE}
        # nothing to clear: no write at all
        assert r.cluster.writes == []


def test_delete_llm_route_clears_ttft_otps() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.delete(CHAT)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert "ttft" not in body and "otps" not in body
        assert body["bounds"] == {"min": {"type": "replica", "value": 1},
                                  "max": {"type": "replica", "value": 8}}
        assert r.cluster.writes == [
            ("llm", "team-a", "chat-llama-slo", {"spec": {"ttft": None, "otps": None}})]
        # once the index has seen the write, a second DELETE has nothing left to clear
        wait_until(lambda: "ttft" not in r.client.get(CHAT).json(), what="write seen")
        assert r.client.delete(CHAT).status_code == 200
        assert len(r.cluster.writes) == 1


def test_list_both_kinds_in_summary_shape() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.get("/config")
        assert resp.status_code == 200, resp.text
        routes = resp.json()["routes"]
        assert [{k: v for k, v in r.items() if k != "observed"} for r in routes] == [
            {"namespace": "team-b", "route": "batch-embed", "kind": "job", "highPriority": False,
             "bounds": {"min": {"type": "concurrency", "value": 0}, "max": {"type": "replica", "value": 4}}},
            {"namespace": "team-a", "route": "chat-llama", "kind": "llm", "highPriority": False,
             "bounds": {"min": {"type": "replica", "value": 1}, "max": {"type": "replica", "value": 8}}},
            {"namespace": "team-a", "route": "pd-llama", "kind": "llm", "highPriority": False,
             "bounds": {"min": {"type": "pdengine", "value": 1}, "max": {"type": "pdengine", "value": 2}}},
        ]
        assert [[o["objective"] for o in r["observed"]["objectives"]] for r in routes] == [
            ["queue depth <= 200"], ["TTFT p90 <= 800 ms", "OTPS >= 20 tokens/s"],
            ["TTFT p90 <= 800 ms", "OTPS >= 20 tokens/s"]]
        assert all(r["observed"]["decision"] is None for r in routes)


@pytest.mark.parametrize("method, body", [("GET", None), ("PUT", {"highPriority": True}), ("DELETE", None)],
                         ids=["get", "put", "delete"])
def test_service_id_on_two_kinds_is_409(method: str, body: dict[str, Any] | None) -> None:
    cluster = _cluster()
    cluster.apis["job"].create(job_slo("shared-job", "shared", namespace="team-a"))
    cluster.apis["llm"].create(llm_slo("shared-llm", "shared", namespace="team-a"))
    with start_service(cluster) as r:
        resp = r.client.request(method, SHARED, json=body)
        assert _error(resp) == (
            409, "conflict",
            "serviceId shared is defined by more than one SLO requirement CRs in namespace team-a")
        assert r.cluster.writes == []


def test_unknown_route_is_404() -> None:
    with start_service(_cluster()) as r:
        for method in ("GET", "PUT", "DELETE"):
            resp = r.client.request(method, NOPE, json={} if method == "PUT" else None)
            assert _error(resp) == (404, "not_found", "route 'nope' not found in namespace 'team-a'")


@pytest.mark.parametrize("route, bounds", [
    ("pd-llama", {"min": {"type": "pdengine", "value": 0}, "max": {"type": "pdengine", "value": 2}}),
    ("pd-llama", {"min": {"type": "pdengine", "value": 0}, "max": {"type": "pdengine", "value": 0}}),
    ("chat-llama", {"min": {"type": "replica", "value": 0}, "max": {"type": "replica", "value": 0}}),
    ("chat-llama", {"min": {"type": "concurrency", "value": 0}, "max": {"type": "concurrency", "value": 64}}),
    ("batch-embed", {"min": {"type": "replica", "value": 0}, "max": {"type": "replica", "value": 0}}),
], ids=["pdengine-min-zero", "pdengine-both-zero", "llm-replica-zero", "llm-concurrency", "job-zero"])
def test_pdengine_and_zero_bounds(route: str, bounds: dict[str, Any]) -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(f"/config/namespaces/{NS_OF[route]}/{route}", json={"bounds": bounds})
        assert resp.status_code == 200, resp.text
        assert resp.json()["bounds"] == bounds


@pytest.mark.parametrize("route, bounds, message", [
    ("chat-llama", {"min": {"type": "pdengine", "value": 1}, "max": {"type": "pdengine", "value": 2}},
     "bounds: Invalid value: bounds of type pdengine require deployType pd"),
    ("pd-llama", {"max": {"value": 1}},
     "bounds.max.value: Invalid value: bounds.max.value of type pdengine must not be 1"),
    ("chat-llama", {"min": {"type": "concurrency"}},
     "bounds.max.type: Invalid value: bounds.min.type and bounds.max.type must be the same"),
    ("chat-llama", {"min": {"value": 9}},
     "bounds.min.value: Invalid value: bounds.min.value must be less than or equal to "
     "bounds.max.value"),
], ids=["pdengine-needs-pd", "pdengine-max-1", "mixed-types", "min-above-max"])
def test_cross_field_bound_rules_come_back_as_400(route: str, bounds: dict[str, Any], message: str) -> None:
    with start_service(_cluster()) as r:
        path = f"/config/namespaces/{NS_OF[route]}/{route}"
        assert _error(r.client.put(path, json={"bounds": bounds})) == (400, "invalid_request", message)


@pytest.mark.parametrize("queue, message", [
    ({"maxDepth": 0}, "queue.maxDepth: must be an integer >= 1, got 0"),
    ({"maxDepth": 2.5}, "queue.maxDepth: must be an integer >= 1, got 2.5"),
    ({"maxDepth": "10"}, "queue.maxDepth: must be an integer >= 1, got '10'"),
    ({"maxDepth": True}, "queue.maxDepth: must be an integer >= 1, got true"),
    ({"promql": ""}, "queue.promql: must be a non-empty PromQL string, got ''"),
    ({"promql": "x" * 4097}, "queue.promql: must be at most 4096 characters, got 4097"),
    ({"depth": 3}, "queue.depth: unknown field; queue takes maxDepth, promql"),
    (None, "queue: is required on a job route and cannot be removed"),
    ([1], "queue: must be an object, got an array"),
], ids=["zero", "fraction", "string", "bool", "empty-promql", "long-promql", "unknown", "null", "array"])
def test_queue_validation(queue: Any, message: str) -> None:
    with start_service(_cluster()) as r:
        assert _error(r.client.put(BATCH, json={"queue": queue})) == (
            400, "invalid_request", message)
        assert r.cluster.writes == []


def test_job_bound_types() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(BATCH, json={"bounds": {"max": {"type": "concurrency"}}})
        assert _error(resp) == (
            400, "invalid_request", "bounds.max.type: must be replica on a job route, got 'concurrency'")
        resp = r.client.put(BATCH, json={"bounds": {"min": {"type": "pdengine"}}})
        assert _error(resp) == (
            400, "invalid_request",
            "bounds.min.type: must be replica or concurrency on a job route, got 'pdengine'")


def test_422_is_400_without_the_cr_name() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(CHAT, json={"bounds": {"max": {"type": "concurrency"}}})
        status, code, message = _error(resp)
        assert (status, code) == (400, "invalid_request")
        # the single cause's spec.bounds.max.type is shown as the route body's bounds.max.type
        assert message == ("bounds.max.type: Invalid value: bounds.min.type and bounds.max.type "
                           "must be the same")
        assert "chat-llama-slo" not in resp.text and "LLMSLORequirement" not in resp.text
        assert "spec." not in message


def test_422_with_several_causes_and_none() -> None:
    with start_service(_cluster()) as r:
        r.cluster.fail_next_write(StatusError(422, "Invalid", 'x "secret-name" is invalid', {"causes": [
            {"field": "spec.ttft.targetMs", "message": "Invalid value: 0: spec.ttft.targetMs in body should "
                                                        "be greater than 0"},
            {"field": "spec.otps.promql", "message": "Required value"}]}))
        _, _, message = _error(r.client.put(CHAT, json={"highPriority": True}))
        assert message == ("ttft.targetMs: Invalid value: 0: ttft.targetMs in body should be greater than 0; "
                           "otps.promql: Required value")
        r.cluster.fail_next_write(StatusError(422, "Invalid", 'x "secret-name" is invalid', {}))
        resp = r.client.put(CHAT, json={"highPriority": True})
        assert _error(resp)[0] == 400 and "secret-name" not in resp.text


@pytest.mark.parametrize("exc, status, code", [
    (StatusError(500, "InternalError", 'etcd down for "chat-llama-slo"'), 502, "upstream_error"),
    (StatusError(403, "Forbidden", "slo-api cannot patch"), 502, "upstream_error"),
    (ConnectionFailure("connection refused"), 502, "upstream_error"),
    (StatusError(404, "NotFound", "gone"), 404, "not_found"),
    (StatusError(409, "Conflict", "changed"), 409, "conflict"),
], ids=["500", "403-own-rbac", "unreachable", "deleted-meanwhile", "conflict"])
def test_other_upstream_failures(exc: Exception, status: int, code: str) -> None:
    with start_service(_cluster()) as r:
        r.cluster.fail_next_write(exc)
        resp = r.client.put(CHAT, json={"highPriority": True})
        assert _error(resp)[:2] == (status, code)
        assert "chat-llama-slo" not in resp.text


def test_no_op_put_is_not_written() -> None:
    with start_service(_cluster()) as r:
        current = r.client.get(CHAT).json()
        resp = r.client.put(CHAT, json=current)
        assert resp.status_code == 200, resp.text
        assert resp.json() == current
        assert r.client.put(CHAT, json={"ttft": {"targetMs": 800}}).status_code == 200
        assert r.cluster.writes == []


@pytest.mark.parametrize("body, message", [
    ({"route": "other"}, "route: is read-only on the SLO API (current value 'chat-llama'); leave it out of "
                         "the request"),
    ({"kind": "job"}, "kind: is read-only on the SLO API (current value 'llm'); leave it out of the request"),
    ({"deployType": "pd"}, "deployType: is read-only on the SLO API (current value 'aggregated'); leave it "
                           "out of the request"),
    ({"serviceId": "x"}, "serviceId: unknown field; takes highPriority, concurrencyPerReplica, ttft, otps, "
                         "bounds"),
    ({"ttft": {"targetMs": -1}}, "ttft.targetMs: must be a number > 0, got -1"),
    ({"ttft": {"percentile": 101}}, "ttft.percentile: must be a number in (0, 100], got 101"),
    ({"bounds": {"min": {"value": -1}}}, "bounds.min.value: must be an integer >= 0, got -1"),
    ({"bounds": {"mid": {}}}, "bounds.mid: unknown field; bounds takes min, max"),
    ({"highPriority": "yes"}, "highPriority: must be true or false, got 'yes'"),
    ({"concurrencyPerReplica": 0}, "concurrencyPerReplica: must be an integer >= 1, got 0"),
    ([], "request body: must be an object, got an array"),
], ids=["route", "kind", "deployType", "serviceId", "targetMs", "percentile", "negative-bound", "bounds-key",
        "highPriority", "concurrency", "array"])
def test_llm_body_validation(body: Any, message: str) -> None:
    with start_service(_cluster()) as r:
        assert _error(r.client.put(CHAT, json=body)) == (400, "invalid_request", message)
        assert r.cluster.writes == []


def test_removing_an_objective_with_null() -> None:
    with start_service(_cluster()) as r:
        resp = r.client.put(CHAT, json={"otps": None, "bounds": None})
        assert resp.status_code == 200, resp.text
        assert "otps" not in resp.json() and resp.json()["bounds"] is None
        assert "ttft" in resp.json()
