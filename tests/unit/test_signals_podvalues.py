"""escaler.signals.podvalues: a Prometheus answer read as a value per pod (scaleDown.podDeletionCost)
— the pod label, duplicates (the largest), non-finite and non-numeric values skipped, an empty vector
(no values, not an error), unlabelled samples counted, other result types and failures refused
without quoting the body; and the query sent through the outbound client's allow-list hook."""

from __future__ import annotations

import json
from typing import Any

import pytest

from escaler.signals.fetch import HttpClient
from escaler.signals.podvalues import PodValues, parse_pod_values, query_pod_values


def _answer(*samples: tuple[dict[str, str], str], kind: str = "vector") -> bytes:
    result: Any = [{"metric": m, "value": [1.0, v]} for m, v in samples]
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()


def test_one_value_per_pod() -> None:
    got = parse_pod_values(200, _answer(({"pod": "a"}, "3"), ({"pod": "b"}, "0")), "pod")
    assert got == PodValues({"a": 3.0, "b": 0.0})


def test_another_label_names_the_pod() -> None:
    got = parse_pod_values(200, _answer(({"instance_pod": "a", "pod": "x"}, "2"),), "instance_pod")
    assert got.values == {"a": 2.0}


def test_several_samples_of_one_pod_count_as_the_largest() -> None:
    got = parse_pod_values(200, _answer(({"pod": "a", "c": "1"}, "1"), ({"pod": "a", "c": "2"}, "4")), "pod")
    assert got.values == {"a": 4.0}


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-Inf", "busy"], ids=["nan", "inf", "-inf", "word"])
def test_values_that_are_not_finite_numbers_are_skipped(bad: str) -> None:
    got = parse_pod_values(200, _answer(({"pod": "a"}, bad), ({"pod": "b"}, "1")), "pod")
    assert got.values == {"b": 1.0} and got.error is None


def test_an_empty_vector_is_no_values_not_an_error() -> None:
    assert parse_pod_values(200, _answer(), "pod") == PodValues()


def test_samples_without_the_label_are_counted() -> None:
    got = parse_pod_values(200, _answer(({}, "5"), ({"pod": ""}, "1"), ({"pod": "a"}, "2")), "pod")
    assert got.values == {"a": 2.0} and got.unlabelled == 2


@pytest.mark.parametrize(
    ("status", "body", "want"),
    [
        (200, json.dumps({"status": "success", "data": {"resultType": "scalar",
                                                        "result": [1, "2"]}}).encode(),
         "prom: result type 'scalar' is not supported: the query must return an instant vector with one "
         "sample per pod (label 'pod')"),
        (503, json.dumps({"status": "error", "errorType": "unavailable", "error": "down"}).encode(),
         "prom: HTTP 503: (unavailable) down"),
        (200, b"<html>secret page</html>", "prom: the response is not a JSON object (24 bytes)"),
        (200, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode(),
         'prom: query status is not "success": (bad_data) parse error'),
    ],
    ids=["scalar", "http-503", "not-json", "status-error"],
)
def test_failures(status: int, body: bytes, want: str) -> None:
    got = parse_pod_values(status, body, "pod", where="prom")
    assert got.error == want and got.values == {}
    assert "secret" not in (got.error or "")


def test_the_allow_list_hook_refuses_before_any_request() -> None:
    got = query_pod_values(HttpClient(), "http://prometheus.monitoring:9090", "up", "pod", 1.0,
                           allowed=lambda host: False)
    assert got.error is not None and "prometheus.monitoring" in got.error and got.values == {}


def test_an_endpoint_with_a_query_string_is_refused() -> None:
    got = query_pod_values(HttpClient(), "http://prometheus:9090/?x=1", "up", "pod", 1.0)
    assert got.error is not None and got.error.startswith("Prometheus query failed: endpoint")
