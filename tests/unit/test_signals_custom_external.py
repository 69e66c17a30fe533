"""escaler.signals.custom and .external: per-pod averages and totals from the metrics adapters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from test_kube_fakeapi import FakeAPI, Reply, Req, status

from escaler.signals import CustomCollector, ExternalCollector, Sample

NS = "ns1"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/pods/*/"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/"


@dataclass(frozen=True)
class Target:
    kind: str = "Deployment"
    name: str = "web"
    selector: str = "app=web"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as a:
        yield a


def custom_items(metric: str, values: list[Any]) -> dict[str, Any]:
    return {"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
            "items": [{"describedObject": {"kind": "Pod", "namespace": NS, "name": f"p{i}",
                                           "apiVersion": "/v1"},
                       "metric": {"name": metric}, "timestamp": "2026-01-01T00:00:00Z", "value": v}
                      for i, v in enumerate(values)]}


def external_items(metric: str, values: list[Any]) -> dict[str, Any]:
    return {"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1",
            "metadata": {}, "items": [{"metricName": metric, "metricLabels": {"q": str(i)},
                                       "timestamp": "2026-01-01T00:00:00Z", "value": v}
                                      for i, v in enumerate(values)]}


# ---- custom ---------------------------------------------------------------------------------------

CUSTOM_CASES: list[tuple[str, list[Any], float | str]] = [
    ("average-of-pods", ["1", "2", "500m"], 3.5 / 3),
    ("one-pod", ["4"], 4.0),
    ("quantity-suffixes", ["1k", "1500"], 1250.0),
    ("no-items", [], "no values of vllm:num_requests_waiting for the pods of Deployment ns1/web (app=web)"),
    ("bad-value-names-the-pod", ["1", "many"], "vllm:num_requests_waiting of pod p1: 'many'"),
    ("missing-value", ["1", None], "of pod p1"),
]


@pytest.mark.parametrize(("values", "expected"), [c[1:] for c in CUSTOM_CASES],
                         ids=[c[0] for c in CUSTOM_CASES])
def test_custom(api: FakeAPI, values: list[Any], expected: float | str) -> None:
    metric = "vllm:num_requests_waiting"
    api.on("GET", re.escape(CUSTOM + metric), lambda _r: Reply(200, custom_items(metric, values)))
    s = CustomCollector(api.rest()).collect(NS, metric, Target())
    if isinstance(expected, str):
        assert s.error is not None and expected in s.error
    else:
        assert s.value == pytest.approx(expected)
    (req,) = api.reqs("GET", CUSTOM)
    assert req.q() == {"labelSelector": "app=web"}


def test_custom_metric_selector(api: FakeAPI) -> None:
    api.on("GET", re.escape(CUSTOM + "rps"), lambda _r: Reply(200, custom_items("rps", ["2"])))
    assert CustomCollector(api.rest()).collect(NS, "rps", Target(), "verb=GET") == Sample(2.0)
    assert api.reqs("GET", CUSTOM)[0].q() == {"labelSelector": "app=web", "metricLabelSelector": "verb=GET"}


def test_custom_not_served(api: FakeAPI) -> None:
    s = CustomCollector(api.rest()).collect(NS, "rps", Target())
    assert s.error is not None and "custom metrics adapter" in s.error and "404" in s.error


def test_custom_needs_a_pod_selector(api: FakeAPI) -> None:
    s = CustomCollector(api.rest()).collect(NS, "rps", Target(selector=""))
    assert s.error is not None and "no pod selector" in s.error
    assert api.reqs() == []


# ---- external -------------------------------------------------------------------------------------

EXTERNAL_CASES: list[tuple[str, list[Any], str, int, float | str]] = [
    ("value-is-the-total", ["10", "20500m"], "Value", 3, 30.5),
    ("average-value-divides-by-replicas", ["10", "20"], "AverageValue", 3, 10.0),
    ("value-from-zero-replicas", ["7"], "Value", 0, 7.0),
    ("average-value-at-zero-replicas", ["7"], "AverageValue", 0, "the target has 0 replicas"),
    ("no-series", [], "Value", 1, "no series of external metric queue_depth (q=llama)"),
    ("bad-value", ["1", "x"], "Value", 1, "'x' is not a Kubernetes quantity"),
    ("overflow", ["1e400"], "Value", 1, "out of range"),
]


@pytest.mark.parametrize(("values", "target_type", "replicas", "expected"), [c[1:] for c in EXTERNAL_CASES],
                         ids=[c[0] for c in EXTERNAL_CASES])
def test_external(api: FakeAPI, values: list[Any], target_type: str, replicas: int,
                  expected: float | str) -> None:
    api.on("GET", EXTERNAL + "queue_depth", lambda _r: Reply(200, external_items("queue_depth", values)))
    s = ExternalCollector(api.rest()).collect(NS, "queue_depth", "q=llama", target_type, replicas)
    if isinstance(expected, str):
        assert s.error is not None and expected in s.error
    else:
        assert s.value == pytest.approx(expected)
    assert api.reqs("GET", EXTERNAL)[0].q() == {"labelSelector": "q=llama"}


def test_external_without_selector_sends_none(api: FakeAPI) -> None:
    api.on("GET", EXTERNAL + "qd", lambda _r: Reply(200, external_items("qd", ["3"])))
    assert ExternalCollector(api.rest()).total(NS, "qd") == Sample(3.0)
    assert api.reqs("GET", EXTERNAL)[0].query == []


@pytest.mark.parametrize(("code", "fragment"), [
    (404, "external metrics adapter"), (503, "not answering"), (401, "RBAC"),
    (403, "grants external.metrics.k8s.io by metric name: add the metric to the ClusterRole "
          "escaler-manager-metrics"),
], ids=["404", "503", "401", "403-names-the-role"])
def test_external_errors(api: FakeAPI, code: int, fragment: str) -> None:
    def fail(_r: Req) -> Reply:
        return Reply(code, status(code, "X", "nope"))

    api.on("GET", EXTERNAL + "qd", fail)
    s = ExternalCollector(api.rest()).collect(NS, "qd", "", "Value", 1)
    assert s.error is not None and fragment in s.error


def test_external_body_without_items(api: FakeAPI) -> None:
    api.on("GET", EXTERNAL + "qd", lambda _r: Reply(200, {"kind": "ExternalMetricValueList"}))
    s = ExternalCollector(api.rest()).collect(NS, "qd", "", "Value", 1)
    assert s.error is not None and "no items list" in s.error
