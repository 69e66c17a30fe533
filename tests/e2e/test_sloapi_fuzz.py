"""schemathesis against ``/openapi.json`` of a live SLO API (issue 12 acceptance): every operation
of the document, with generated paths, bodies and media types — half of the
``/config/namespaces/{namespace}/{route}`` cases aimed at routes that exist, so generated merge
patches reach the real API server (and its CRD validation). No answer may be a 5xx other than a
documented 502 ``upstream_error``, every error must be the ``{"error": {"code", "message"}}``
envelope, and every status must be one the document lists for the operation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import Cluster
from .sloapi_helpers import apply_in, start_slo_api, three_routes, wait_routes

pytestmark = pytest.mark.e2e

# generated cases per operation (the PUT and DELETE ones each reach the API server)
EXAMPLES = 60
ROUTES = ("chat-llama", "pd-llama", "batch-embed")
ROUTE = "/config/namespaces/{namespace}/{route}"
LEGACY = "/config/{route}"


def _fuzz(op: Any, documented: set[int], failures: list[str], seen: set[int], namespace: str) -> None:
    """Run ``EXAMPLES`` generated cases of one operation, recording what is wrong in ``failures``."""

    @given(case=op.as_strategy(), aim=st.booleans(), route=st.sampled_from(ROUTES))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case: Any, aim: bool, route: str) -> None:
        if aim and "route" in (case.path_parameters or {}):
            case.path_parameters = {**case.path_parameters, "route": route}
            if "namespace" in case.path_parameters:
                case.path_parameters["namespace"] = namespace
        resp = case.call()
        seen.add(resp.status_code)
        sent = json.dumps(case.body, default=str)[:300] if case.body is not None else None
        where = f"{op.method.upper()} {case.formatted_path} body={sent}"
        if resp.status_code >= 500 and resp.status_code != 502:
            failures.append(f"{where}: {resp.status_code} {resp.text[:300]}")
        if resp.status_code not in documented:
            failures.append(f"{where}: undocumented status {resp.status_code} {resp.text[:300]}")
        if resp.status_code >= 400:
            body = resp.json()
            if set(body) != {"error"} or set(body["error"]) != {"code", "message"}:
                failures.append(f"{where}: error body not in the envelope: {resp.text[:300]}")

    check()


def test_schemathesis_no_undocumented_5xx(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    ns = namespace
    apply_in(cluster, ns, *three_routes())
    api = start_slo_api(cluster, tmp_path, namespace=ns)
    try:
        wait_routes(api, 3)
        schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
        document = api.call("GET", "/openapi.json").json()
        failures: list[str] = []
        seen: dict[tuple[str, str], set[int]] = {}
        operations = [r.ok() for r in schema.get_all_operations()]
        assert {(op.method.upper(), op.path) for op in operations} >= {
            ("GET", "/config"), ("GET", ROUTE), ("PUT", ROUTE), ("DELETE", ROUTE),
            ("GET", LEGACY), ("PUT", LEGACY), ("DELETE", LEGACY),
            ("GET", "/readyz"), ("GET", "/healthz"), ("GET", "/")}
        for op in operations:
            documented = {int(s) for s in document["paths"][op.path][op.method.lower()]["responses"]}
            _fuzz(op, documented, failures, seen.setdefault((op.method.upper(), op.path), set()), ns)
        assert not failures, "\n".join(failures[:20])
        # the run reached the API server: writes happened, and some were refused as 400
        assert 200 in seen[("PUT", ROUTE)], seen
        assert 400 in seen[("PUT", ROUTE)], seen
        assert seen[("PUT", LEGACY)] <= {400, 410, 413, 415}, seen  # the 0.1 path: gone
        # nothing unexpected was logged (a 500 would be logged at error)
        assert '"level": "error"' not in api.output(tail=10**7), api.output()
    finally:
        api.stop()
