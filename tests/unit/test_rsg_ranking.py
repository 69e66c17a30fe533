"""``escaler.reconcilers.rsg.ranking``: the scale-down query's answer and its executor plumbing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from executor_fakes import ManualExecutor

from escaler.api.rsg import ResourceScalingGroup, RSGPrometheus
from escaler.clock import FakeClock
from escaler.reconcilers.rsg.ranking import PENDING, GroupRanker, Loads, parse_group_loads
from escaler.runtime.executor import InlineExecutor

PROM = RSGPrometheus(endpoint="http://prometheus:9090", query="sum by (group) (load)")
KEY = ("rsg-group-loads", "team", "pd")


def rsg(generation: int = 1) -> ResourceScalingGroup:
    return ResourceScalingGroup.model_validate({
        "apiVersion": "autoscaling.openfuyao.com/v1alpha1", "kind": "ResourceScalingGroup",
        "metadata": {"name": "pd", "namespace": "team", "uid": "u1", "generation": generation},
        "spec": {"strategy": "GroupReplication", "members": [
            {"name": "p", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "p"}}]}})


def vector(*samples: tuple[dict[str, str], str]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": [1.0, v]} for m, v in samples]}}).encode()


def test_parse_group_loads() -> None:
    body = vector(({"group": "0"}, "3.5"), ({"group": "2", "rsg": "pd"}, "0"))
    assert parse_group_loads(200, body) == {0: 3.5, 2: 0.0}


@pytest.mark.parametrize(("status", "body", "match"), [
    (200, vector(({"pod": "x"}, "1")), "needs a 'group' label"),
    (200, vector(({"group": "0"}, "1"), ({"group": "0"}, "2")), "group 0 appears twice"),
    (200, vector(({"group": "1"}, "NaN")), "group 1 is not a finite number"),
    (200, b"<html>", "not JSON"),
    (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
     "instant vector"),
    (503, json.dumps({"status": "error", "errorType": "unavailable", "error": "down"}).encode(),
     "HTTP 503: unavailable: down"),
    (502, b"secret page bytes", r"HTTP 502, 17 bytes"),
], ids=["no-group-label", "duplicate-group", "nan", "not-json", "matrix", "prometheus-error", "no-echo"])
def test_parse_group_loads_refusals(status: int, body: bytes, match: str) -> None:
    with pytest.raises(ValueError, match=match) as err:
        parse_group_loads(status, body)
    assert "secret" not in str(err.value)


def test_ranker_inline_answers_at_once() -> None:
    def query(prom: RSGPrometheus) -> dict[int, float]:
        return {1: 2.0}

    ranker = GroupRanker(InlineExecutor(FakeClock()), query)
    assert ranker.loads(rsg(), PROM, {0, 1}) == Loads(values={1: 2.0})


def test_ranker_query_failure_is_an_error_not_a_stall() -> None:
    def query(prom: RSGPrometheus) -> dict[int, float]:
        raise ValueError("GET http://prometheus:9090/api/v1/query: timed out after 5s")

    got = GroupRanker(InlineExecutor(FakeClock()), query).loads(rsg(), PROM, {0, 1})
    assert isinstance(got, Loads) and got.error is not None and "timed out" in got.error


def test_ranker_runs_off_the_worker_and_drops_a_stale_answer() -> None:
    calls: list[Any] = []

    def query(prom: RSGPrometheus) -> dict[int, float]:
        calls.append(prom)
        return {0: float(len(calls))}

    ex = ManualExecutor()
    ranker = GroupRanker(ex, query)
    assert ranker.loads(rsg(), PROM, {0, 1}) is PENDING, "the reconcile must not wait for the query"
    assert ranker.loads(rsg(), PROM, {0, 1}) is PENDING, "one query in flight per RSG"
    ex.complete(KEY)
    # the spec changed meanwhile (generation 2): the answer made for generation 1 is not used
    assert ranker.loads(rsg(2), PROM, {0, 1}) is PENDING
    ex.complete(KEY)
    assert ranker.loads(rsg(2), PROM, {0, 1}) == Loads(values={0: 2.0})


@pytest.mark.parametrize("body", [
    {"status": "error", "errorType": "bad_data\x1b[2J",
     "error": "parse error\x1b[31m at\r\n\x07char 3\u202e"},
    {"status": "success", "data": {"resultType": "vector\x1b]0;pwned\x07", "result": []}},
])
def test_an_error_carries_no_control_character_of_the_answer(body: dict[str, Any]) -> None:
    # issue 27 item 13: the tenant's server chooses these bytes; they end up in a condition, an event
    # and `escaler explain` on an operator's terminal
    status = 400 if body["status"] == "error" else 200
    with pytest.raises(ValueError) as err:
        parse_group_loads(status, json.dumps(body).encode())
    text = str(err.value)
    assert all(ch.isprintable() for ch in text), repr(text)
    assert "parse error" in text or "vector" in text
