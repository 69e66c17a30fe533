"""The SSRF guard on the real control plane (issue 9, "Outbound calls"; docs/security.md).

A manager runs with the production default for endpoint addresses, except that one loopback
address, 127.0.0.2, is re-allowed (``--allow-endpoint-networks=127.0.0.2/32``): a fake Prometheus
bound there is the positive control. ElasticScalers any namespace user could create point at

* the cloud metadata address ``http://169.254.169.254/``,
* the manager's own metrics and health-probe ports on 127.0.0.1 (and ``localhost``),
* an 'internal' service on 127.0.0.1 that would answer anyone (it records what it is asked);

each is refused with a condition a user reads with kubectl (``ScalingActive=False``,
``DecisionUnavailable``, a message naming the refused network and the flag), nothing of the
internal answers is echoed, and the internal service is never asked. The control scaler on
127.0.0.2 scales.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Cluster, PrometheusServer, eventually, wait_synced
from .es_helpers import (
    QUICK,
    Manager,
    apply,
    cond,
    deployment,
    es,
    metrics_trigger,
    replicas,
    scaler,
    start_manager,
)
from .webhook import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    return {"metrics": free_port(), "probe": free_port()}


@pytest.fixture
def manager(cluster: Cluster, namespace: str, tmp_path_factory: pytest.TempPathFactory,
            ports: dict[str, int]) -> Iterator[Manager]:
    m = start_manager(
        cluster, tmp_path_factory.mktemp("es-ssrf"), user="escaler-ssrf", poll="1s", namespace=namespace,
        allow_endpoint_networks="127.0.0.2/32",
        extra_args=[f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
                    f"--health-probe-bind-address=127.0.0.1:{ports['probe']}"],
    )
    wait_synced(m.proc, m.log)
    try:
        yield m
    finally:
        m.stop()


def _server(endpoint: str, query: str) -> dict[str, Any]:
    return {"type": "ExternalServer", "externalServer": {
        "endpoint": endpoint, "query": query, "target": {"type": "AverageValue", "averageValue": "10"},
        "timeoutSeconds": 2}}


def test_internal_endpoints_are_refused_with_a_clear_condition(
    cluster: Cluster, namespace: str, manager: Manager, ports: dict[str, int]
) -> None:
    control = PrometheusServer(host="127.0.0.2").start()
    internal = PrometheusServer(host="127.0.0.1").start()  # would answer anyone
    try:
        q = f'sum(load{{namespace="{namespace}"}})'
        control.set(q, 40)  # 40 at 10 per replica: 4 wanted
        internal.set(q, 40)
        refused = {
            "metadata": ("http://169.254.169.254/", "cloud metadata service"),
            "own-metrics": (f"http://127.0.0.1:{ports['metrics']}", "127.0.0.1 is loopback (127.0.0.0/8)"),
            "own-probe": (f"http://localhost:{ports['probe']}", "is loopback"),
            "internal": (internal.url, "127.0.0.1 is loopback (127.0.0.0/8)"),
        }
        for name, (endpoint, _) in refused.items():
            apply(cluster, namespace, deployment(f"app-{name}", 1))
            apply(cluster, namespace, scaler(name, f"app-{name}", metrics_trigger(_server(endpoint, q)),
                                             annotations=QUICK))
        apply(cluster, namespace, deployment("app-control", 1))
        apply(cluster, namespace, scaler("control", "app-control", metrics_trigger(_server(control.url, q)),
                                         annotations=QUICK))

        # the positive control: the re-allowed address is reached and the target scaled
        eventually(lambda: replicas(cluster, namespace, "app-control") >= 2, timeout=60,
                   what=f"the control scaler scales; log:\n{manager.output()}")
        assert control.queries, "the control Prometheus was never queried"

        for name, (_endpoint, what) in refused.items():
            def refused_now(name: str = name) -> tuple[str, str, str] | None:
                c = cond(es(cluster, namespace, name), "ScalingActive")
                return c if c[0] == "False" else None

            eventually(refused_now, timeout=40, what=f"{name} refused; log:\n{manager.output()}")
            status, reason, message = cond(es(cluster, namespace, name), "ScalingActive")
            assert (status, reason) == ("False", "DecisionUnavailable"), (name, status, reason, message)
            assert what in message and "may not reach it" in message, (name, message)
            # nothing of what an internal port would have said
            for leak in ("# HELP", "# TYPE", "workqueue_", '"status"', "resultType"):
                assert leak not in message.replace("Prometheus query failed", ""), (name, leak, message)
            assert replicas(cluster, namespace, f"app-{name}") == 1
        assert internal.queries == [], "the manager queried a loopback service for a scaler"
    finally:
        control.stop()
        internal.stop()
