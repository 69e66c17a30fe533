"""Tenant PromQL stays in its namespace (issue 27 item 4), on the real control plane: a namespace
user who writes a query for another namespace's series gets a refusal naming the field and the rule,
and the shared Prometheus never sees the query; a query confined to the user's own namespace is read.

One manager with the shipped default (no ``--promql-*`` flag: confinement on, label ``namespace``)
and one fake Prometheus holding both tenants' series. In the test's namespace:

* an ElasticScaler ``ExternalServer`` metric reading ``sum(secret_load{namespace="<other>"})`` — on
  the code before, its status showed the other namespace's 900 and the target was scaled to 10;
* an LLMScaler Prometheus metric reading the same series — before, ScalingActive=True and the
  target scaled from it;
* an ElasticScaler reading its own ``sum(load{namespace="<ns>"})``: read and scaled, as always.

Asserted: the first two are refused with the field (``externalServer.query``,
``spec.prometheus.metrics[0].query``) and the rule (``namespace="<ns>"``), their targets keep
their replicas, and the fake Prometheus received the own query several times but never the other's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually
from .es_helpers import apply, deployment, es, replicas, scaler, start_manager
from .test_llmscaler import get, llms

pytestmark = pytest.mark.e2e

USER = "escaler-promql-tenants"
OTHER = "victim-tenant"


def _external(url: str, query: str) -> dict[str, Any]:
    return {"type": "MetricsTrigger", "metricsTrigger": {"scalingAlgorithm": "apa", "metrics": [{
        "type": "ExternalServer",
        "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                           "target": {"type": "AverageValue", "averageValue": "10"}}}]}}


def test_a_tenants_query_for_another_namespace_is_refused_and_never_sent(
    cluster: Cluster, namespace: str, prometheus: PrometheusServer, managers: list[Any], tmp_path: Path
) -> None:
    stolen = f'sum(secret_load{{namespace="{OTHER}"}})'
    own = f'sum(load{{namespace="{namespace}"}})'
    prometheus.set(stolen, 900.0)
    prometheus.set(own, 40.0)
    for name in ("thief", "thief-llm", "own"):
        apply(cluster, namespace, deployment(name, 2))
    apply(cluster, namespace, scaler("thief", "thief", _external(prometheus.url, stolen)))
    apply(cluster, namespace, llms("thief-llm", "thief-llm", prom=prometheus.url, queries={stolen: 8}))
    apply(cluster, namespace, scaler("own", "own", _external(prometheus.url, own)))
    manager = start_manager(cluster, tmp_path, user=USER, namespace=namespace, poll="2s")
    managers.append(manager)

    rule = f'every series selector must hold namespace="{namespace}"'

    def thief_refused() -> str | None:
        conds = (es(cluster, namespace, "thief").get("status") or {}).get("conditions") or []
        active = next((c for c in conds if c["type"] == "ScalingActive"), {})
        message = str(active.get("message", ""))
        refused = active.get("status") == "False" and f"externalServer.query: {rule}" in message
        return message if refused else None

    try:
        eventually(thief_refused, timeout=60, what="the ElasticScaler's refusal")
    except AssertionError as err:
        raise AssertionError(f"{err}\nstatus: {es(cluster, namespace, 'thief').get('status')}\n"
                             f"log:\n{manager.output(3000)}") from None

    def llm_refused() -> dict[str, Any] | None:
        conds = {c["type"]: c for c in (get(cluster, namespace, "thief-llm").get("status") or {})
                 .get("conditions") or []}
        active = conds.get("ScalingActive") or {}
        ok = (active.get("status"), active.get("reason")) == ("False", "InvalidSpec") and \
            str(active.get("message", "")).startswith(f"spec.prometheus.metrics[0].query: {rule}")
        return active if ok else None

    eventually(llm_refused, timeout=60, what="the LLMScaler's InvalidSpec")
    eventually(lambda: replicas(cluster, namespace, "own") == 4, timeout=60,
               what="the own-namespace query read and scaled 2 -> 4")
    eventually(lambda: prometheus.queries.count(own) >= 3, timeout=30, what="several polls of the own query")
    assert stolen not in prometheus.queries, "the other namespace's query reached Prometheus"
    assert replicas(cluster, namespace, "thief") == 2 and replicas(cluster, namespace, "thief-llm") == 2
    assert manager.alive(), manager.output(2000)
