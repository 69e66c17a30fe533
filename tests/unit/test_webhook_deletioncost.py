"""The admission webhook on spec.scaleDown.podDeletionCost: its Prometheus endpoint is held to the
manager's --allowed-endpoint-hosts (what CEL cannot know), and the CEL rules' Python twins refuse a
non-Deployment target and HPA mode with the field path."""

from __future__ import annotations

from typing import Any

import pytest
from webhook_samples import sample

from escaler.scaling.endpoints import parse_host_patterns
from escaler.webhook.checks import CheckContext
from escaler.webhook.validation import validate_object

PATH = "spec.scaleDown.podDeletionCost"


def _with_cost(endpoint: str = "http://prometheus.monitoring:9090", **changes: Any) -> dict[str, Any]:
    obj = sample("elasticscaler", changes)
    obj["spec"]["scaleDown"] = {"podDeletionCost": {"prometheus": {
        "endpoint": endpoint, "query": "sum by (pod) (vllm:num_requests_running)"}}}
    return obj


@pytest.mark.parametrize(
    ("url", "allowed"),
    [("http://prometheus.monitoring:9090", True), ("http://evil.example:9090", False)],
    ids=["allowed-host", "other-host"],
)
def test_the_endpoint_is_held_to_the_allowed_hosts(url: str, allowed: bool) -> None:
    ctx = CheckContext(parse_host_patterns("prometheus.monitoring"))
    obj = _with_cost(url)
    obj["spec"]["trigger"]["metricsTrigger"]["metrics"] = [
        m for m in obj["spec"]["trigger"]["metricsTrigger"]["metrics"] if m["type"] != "ExternalServer"]
    errors = validate_object("ElasticScaler", obj, ctx).errors
    assert (errors == []) == allowed, [str(e) for e in errors]
    if not allowed:
        assert [e.path for e in errors] == [f"{PATH}.prometheus.endpoint"]
        assert "--allowed-endpoint-hosts" in errors[0].message


def test_a_statefulset_target_is_refused_naming_the_field() -> None:
    obj = _with_cost(**{"spec.targetRef.kind": "StatefulSet"})
    errors = validate_object("ElasticScaler", obj).errors
    assert [e.path for e in errors] == [PATH]
    assert "needs a targetRef of kind Deployment" in errors[0].message


def test_a_valid_policy_is_admitted() -> None:
    assert validate_object("ElasticScaler", _with_cost()).errors == []
