"""What the SLO API shows of the decision engine's status (issue 29 part B): ``escaler.sloapi.observed``
renders each route's objectives, the measured values and the decision as data, the route bodies and
the listing carry it, a ``PUT`` of a GET body ignores it, and the form inserts it as text."""

from __future__ import annotations

import math
from typing import Any

import pytest

from escaler.reconcilers.slo import kinds as engine
from escaler.sloapi.form import FORM_HTML
from escaler.sloapi.kinds import JOB, LLM
from escaler.sloapi.observed import SIGNALS, observed
from tests.unit.sloapi_fakes import FakeSLOCluster, job_slo, llm_slo, start_service

NOW = "2026-12-06T22:00:00Z"


def _ready(status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": NOW}


def _with_status(obj: dict[str, Any], signals: dict[str, Any], *, replicas: int = 4,
                 reason: str = "TTFT p90 (ms) 612 vs target 800 (ratio 0.765): holding 4",
                 ready: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**obj, "status": {"observedGeneration": 1, "decision": {
        "replicas": replicas, "reason": reason, "signals": signals, "time": NOW},
        "conditions": [ready or _ready("True", "Sized", "every signal was read")]}}


def test_the_signal_keys_are_the_engines() -> None:
    assert SIGNALS == {"ttft": engine.TTFT, "otps": engine.OTPS, "queue": engine.QUEUE_DEPTH}


def test_an_llm_route_with_a_decision() -> None:
    obj = _with_status(llm_slo("c", "chat", ttft={"targetMs": 800, "percentile": 95, "promql": "q"}),
                       {"currentReplicas": 4, "ttftMs": 612.3456, "ttftTargetMs": 800, "otps": 25,
                        "otpsTarget": 20})
    assert observed(LLM, obj) == {
        "objectives": [
            {"signal": "ttftMs", "objective": "TTFT p95 <= 800 ms", "measured": "TTFT p95 612.3 ms"},
            {"signal": "otps", "objective": "OTPS >= 20 tokens/s", "measured": "OTPS 25 tokens/s"},
        ],
        "decision": {"replicas": 4, "reason": "TTFT p90 (ms) 612 vs target 800 (ratio 0.765): holding 4",
                     "time": NOW},
        "ready": {"status": "True", "reason": "Sized", "message": "every signal was read"},
    }


def test_a_route_with_no_status_yet_shows_its_objectives_only() -> None:
    assert observed(JOB, job_slo("b", "batch")) == {
        "objectives": [{"signal": "queueDepth", "objective": "queue depth <= 200", "measured": None}],
        "decision": None, "ready": None}
    # the percentile defaults to 90 when the spec leaves it out; a route without objectives has none
    no_pct = llm_slo("c", "chat", ttft={"targetMs": 500, "promql": "q"}, otps=None)
    assert [o["objective"] for o in observed(LLM, no_pct)["objectives"]] == ["TTFT p90 <= 500 ms"]
    assert observed(LLM, llm_slo("c", "chat", ttft=None, otps=None))["objectives"] == []


def test_a_held_decision_names_no_value_for_the_missing_signal() -> None:
    held = _ready("False", "SignalsMissing", "ttftMs: HTTP 503; holding the last decision")
    obj = _with_status(job_slo("b", "batch"), {"currentReplicas": 2, "maxDepth": 200}, replicas=2,
                       reason="signals missing (queueDepth: HTTP 503): holding 2", ready=held)
    view = observed(JOB, obj)
    assert view["objectives"][0]["measured"] is None
    assert view["decision"] == {"replicas": 2, "reason": "signals missing (queueDepth: HTTP 503): holding 2",
                                "time": NOW}
    assert view["ready"] == {"status": "False", "reason": "SignalsMissing",
                             "message": "ttftMs: HTTP 503; holding the last decision"}


def test_a_job_route_measures_its_queue() -> None:
    obj = _with_status(job_slo("b", "batch"), {"currentReplicas": 2, "queueDepth": 57, "maxDepth": 200})
    assert observed(JOB, obj)["objectives"] == [
        {"signal": "queueDepth", "objective": "queue depth <= 200", "measured": "queue depth 57"}]


@pytest.mark.parametrize("status", [
    "nonsense", {"decision": "x"}, {"decision": {"replicas": True, "signals": ["ttftMs"]}},
    {"decision": {"signals": {"ttftMs": math.nan, "otps": "25"}}}, {"conditions": "Ready"},
    {"conditions": [{"type": "Ready"}, "x"]}, {"decision": None, "conditions": None},
], ids=repr)
def test_a_malformed_status_shows_less_and_never_raises(status: Any) -> None:
    view = observed(LLM, {**llm_slo("c", "chat"), "status": status})
    assert [o["measured"] for o in view["objectives"]] == [None, None]
    assert view["decision"] is None or view["decision"]["replicas"] is None


def test_values_are_data_not_markup() -> None:
    """A reason or message holding markup comes back unchanged: the form inserts it as text."""
    markup = '<img src=x onerror="alert(1)"> & <b>bold</b>'
    obj = _with_status(llm_slo("c", "chat"), {"ttftMs": 1}, reason=markup,
                       ready=_ready("False", "SignalsMissing", markup))
    view = observed(LLM, obj)
    assert view["decision"]["reason"] == markup and view["ready"]["message"] == markup
    # the page never parses a value as HTML: every value is set with textContent
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "srcdoc"):
        assert sink not in FORM_HTML
    for element in ("observed-objective", "observed-measured", "observed-decision", "observed-reason",
                    "observed-ready", "observed-time"):
        assert f'id="{element}"' in FORM_HTML


def _cluster() -> FakeSLOCluster:
    return FakeSLOCluster([
        _with_status(llm_slo("chat-cr", "chat-llama"), {"currentReplicas": 3, "ttftMs": 950, "otps": 22},
                     replicas=4, reason="TTFT p90 (ms) 950 vs target 800 (ratio 1.188) misses the SLO: "
                                        "scale up 3 -> 4"),
        job_slo("batch-cr", "batch-embed"),
    ])


def test_the_api_carries_observed_in_the_listing_and_the_route() -> None:
    with start_service(_cluster()) as r:
        routes = {x["route"]: x["observed"] for x in r.client.get("/config").json()["routes"]}
        assert routes["batch-embed"]["decision"] is None and routes["batch-embed"]["ready"] is None
        assert [o["measured"] for o in routes["chat-llama"]["objectives"]] == [
            "TTFT p90 950 ms", "OTPS 22 tokens/s"]
        chat = r.client.get("/config/namespaces/team-a/chat-llama").json()
        assert chat["observed"] == routes["chat-llama"]
        assert chat["observed"]["decision"]["replicas"] == 4


def test_a_get_body_puts_back_and_observed_is_never_written() -> None:
    with start_service(_cluster()) as r:
        path = "/config/namespaces/team-a/chat-llama"
        body = r.client.get(path).json()
        same = r.client.put(path, json=body)
        assert same.status_code == 200 and same.json() == body and r.cluster.writes == []
        changed = {**body, "highPriority": True,
                   "observed": {"objectives": [], "decision": {"replicas": 99}, "ready": None}}
        resp = r.client.put(path, json=changed)
        assert resp.status_code == 200, resp.text
        [(_, _, _, patch)] = r.cluster.writes
        assert set(patch) == {"spec"} and patch["spec"]["highPriority"] is True
        assert not {"observed", "status", "decision"} & set(patch["spec"]), patch
        assert resp.json()["observed"]["decision"]["replicas"] == 4  # the engine's, from the written CR
