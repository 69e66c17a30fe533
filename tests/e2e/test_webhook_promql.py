"""Tenant PromQL refused at admission (issue 27), on the real API server: ``kubectl create`` of an
object whose query reads another namespace's series fails, naming the field and the rule, and
nothing is stored; the same object reading its own namespace is created.

The manager serves its webhook (the shipped configuration, registered for this test's namespace
only) with the default confinement (no ``--promql-*`` flag: label ``namespace``) and runs as its own
client-certificate user. Created in the test's namespace:

* an ElasticScaler whose ``ExternalServer`` query is ``sum(x{namespace="other"})``: refused naming
  ``spec.trigger.metricsTrigger.metrics[0].externalServer.query``;
* an LLMScaler whose Prometheus metric reads the same: refused naming
  ``spec.prometheus.metrics[0].query``;
* both again reading ``namespace="<the test's namespace>"``: created.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually
from .es_helpers import metrics_trigger, scaler
from .test_llmscaler import llms
from .webhook import manager_with_webhook, submit

pytestmark = pytest.mark.e2e

PROMETHEUS = "http://prometheus.monitoring:9090"


def _external(query: str) -> dict[str, Any]:
    return {"type": "ExternalServer", "externalServer": {
        "endpoint": PROMETHEUS, "query": query, "timeoutSeconds": 2,
        "target": {"type": "AverageValue", "averageValue": "10"}}}


def _live(cluster: Cluster, namespace: str) -> bool:
    """The webhook answers for this namespace: an unregistered algorithm (webhook-only) is refused."""
    probe = scaler("probe", "web", metrics_trigger(_external(f'sum(x{{namespace="{namespace}"}})'),
                                                   algorithm="no-such-algorithm"))
    ok, _ = submit(cluster, namespace, probe)
    if ok:
        cluster.kubectl("delete", "es", "probe", "-n", namespace, check=False)
    return not ok


def _stored(cluster: Cluster, namespace: str, resource: str, name: str) -> bool:
    return bool(cluster.kubectl("get", resource, name, "-n", namespace, "--ignore-not-found", "-o", "name")
                .strip())


def test_a_query_reading_another_namespace_is_refused_at_admission_naming_the_field(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    stolen = 'sum(x{namespace="other"})'
    own = f'sum(x{{namespace="{namespace}"}})'
    rule = f'every series selector must hold namespace="{namespace}"'
    with manager_with_webhook(cluster, tmp_path, namespace=namespace, user="webhook-promql") as mgr:
        eventually(lambda: _live(cluster, namespace), timeout=30,
                   what=f"the webhook to take effect; manager log:\n{mgr.output()[-3000:]}")

        ok, out = submit(cluster, namespace, scaler("thief", "web", metrics_trigger(_external(stolen))))
        assert not ok, f"the create was accepted: {out}"
        assert "spec.trigger.metricsTrigger.metrics[0].externalServer.query" in out and rule in out, out
        assert 'x{namespace="other"} does not' in out, out
        assert not _stored(cluster, namespace, "es", "thief")

        ok, out = submit(cluster, namespace, llms("thief-llm", "web", prom=PROMETHEUS, queries={stolen: 8}))
        assert not ok, f"the create was accepted: {out}"
        assert "spec.prometheus.metrics[0].query" in out and rule in out, out
        assert not _stored(cluster, namespace, "llms", "thief-llm")

        ok, out = submit(cluster, namespace, scaler("own", "web", metrics_trigger(_external(own))))
        assert ok, f"the create was refused: {out}"
        ok, out = submit(cluster, namespace, llms("own-llm", "web", prom=PROMETHEUS, queries={own: 8}))
        assert ok, f"the create was refused: {out}"
        assert _stored(cluster, namespace, "es", "own") and _stored(cluster, namespace, "llms", "own-llm")
