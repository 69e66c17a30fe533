"""The ElasticScaler reconciler's rarer paths, each asserting exactly what its name says (issue 8,
"Paths no test executes")."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import (
    NS,
    Harness,
    deployment,
    external_metric,
    external_server_metric,
    harness,
    metrics_trigger,
    scaler,
)

from escaler.errors import ConnectionFailure, StatusError
from escaler.reconcilers.kit.watchindex import ROLE_TARGET
from escaler.runtime import Request, Result
from escaler.signals.bearer import secret_key_reader

ES = Request(NS, "es")


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as hh:
        yield hh


def _setup(h: Harness, *objs: dict[str, Any], replicas: int = 2) -> None:
    h.api("deployments").create(deployment("web", replicas))
    for o in objs:
        h.api("elasticscalers").create(o)
    h.start()


def _es(**kw: Any) -> dict[str, Any]:
    return scaler("es", metrics_trigger(external_metric("queue", "10")), **kw)


def _cond(h: Harness, ctype: str) -> tuple[str, str, str]:
    c = h.condition("es", ctype)
    assert c is not None, ctype
    return c["status"], c["reason"], c["message"]


def test_when_the_holder_goes_the_next_claimant_takes_over_and_writes(h: Harness) -> None:
    old = scaler("old", metrics_trigger(external_metric("queue", "10")), created="2026-01-01T00:00:00Z")
    _setup(h, _es(created="2026-01-02T00:00:00Z"), old)
    h.collector.values["queue"] = 40.0
    h.reconcile("old")
    h.reconcile("es")
    assert (h.replicas(), _cond(h, "Validated")[1]) == (4, "TargetConflict")
    h.settle()  # the Deployment controller catches up with the write
    h.api("elasticscalers").delete(f"{NS}/old")
    h.collector.values["queue"] = 80.0
    h.wait_synced()
    h.reconcile("es")
    assert h.replicas() == 8
    assert _cond(h, "Validated")[:2] == ("True", "Valid")
    assert [(d["from"], d["to"]) for d in h.status("es")["recentDecisions"]] == [(4, 8)]


def test_a_scaler_being_deleted_is_forgotten_and_not_written(h: Harness) -> None:
    _setup(h, _es())
    h.collector.values["queue"] = 40.0
    h.reconcile("es")
    assert h.es.watches.held() != {}
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    obj["metadata"]["finalizers"] = ["example.com/keep"]
    h.api("elasticscalers").update(obj)
    h.wait_synced()
    writes = h.client.count("patch", "elasticscalers/status")
    assert h.reconciler.reconcile(ES) == Result()
    assert h.client.count("patch", "elasticscalers/status") == writes
    assert h.es.watches.held() == {}


def test_an_object_that_does_not_parse_says_so_and_writes_nothing_else(h: Harness) -> None:
    bad = _es()
    bad["spec"]["minReplicas"] = "three"
    _setup(h, bad)
    assert h.reconcile("es").requeue_after == 0.0
    status, reason, message = _cond(h, "Validated")
    assert (status, reason) == ("False", "InvalidSpec")
    assert message.startswith("the object does not parse: spec.minReplicas:")
    assert _cond(h, "ScalingActive")[:2] == ("False", "InvalidSpec")
    assert h.replicas() == 2 and h.collector.calls == 0


def test_a_target_kind_not_served_is_target_not_found_and_retried_in_60s(h: Harness) -> None:
    _setup(h, _es(target={"apiVersion": "nowhere.example.com/v1", "kind": "Gadget", "name": "g"}))
    result = h.reconcile("es")
    assert result.requeue_after == 60.0
    assert _cond(h, "AbleToScale") == (
        "False", "TargetNotFound", "Gadget team/g: the API server does not serve kind Gadget in "
        "nowhere.example.com/v1")


def test_a_transient_target_read_error_is_target_unreadable_and_retried(h: Harness) -> None:
    _setup(h, _es())
    h.collector.values["queue"] = 40.0
    h.client.faults[("get", "deployments")] = [StatusError(503, "ServiceUnavailable", "etcd is slow")]
    result = h.reconcile("es")
    assert result.requeue_after == 30.0
    status, reason, message = _cond(h, "AbleToScale")
    assert (status, reason) == ("False", "TargetUnreadable")
    assert "etcd is slow" in message
    assert h.replicas() == 2
    h.reconcile("es")  # the next try reads it
    assert (h.replicas(), _cond(h, "AbleToScale")[1]) == (4, "Synced")


def test_a_connection_failure_on_the_scale_write_is_target_write_failed(h: Harness) -> None:
    _setup(h, _es())
    h.collector.values["queue"] = 40.0
    h.client.faults[("patch", "deployments")] = [ConnectionFailure("connection reset by peer")]
    result = h.reconcile("es")
    assert result == Result(requeue=True)
    status, reason, message = _cond(h, "AbleToScale")
    assert (status, reason) == ("False", "TargetWriteFailed")
    assert message == "writing Deployment team/web: connection reset by peer"
    assert _cond(h, "ScalingActive")[:2] == ("True", "MetricsAvailable")  # computed before the write
    # the counts, deferredSince and lastScaleTime stay as they were (none yet: the first sync), not
    # the count that failed to be written (seed 000; the Reporter is shared with the LLMScaler)
    assert not {"lastScaleTime", "currentReplicas", "desiredReplicas", "deferredSince"} & set(h.status("es"))


def test_the_endpoint_allow_list_is_checked_at_reconcile_before_any_request() -> None:
    with harness(allowed_hosts=("prometheus.monitoring",)) as h:
        h.api("deployments").create(deployment("web", 2))
        h.api("elasticscalers").create(scaler("es", metrics_trigger(external_server_metric())))
        h.start()
        h.reconcile("es")
        status, reason, message = _cond(h, "ScalingActive")
        assert (status, reason) == ("False", "InvalidSpec")
        assert message == ("spec.trigger.metricsTrigger.metrics[0].externalServer.endpoint: host "
                           "prom.example is not in --allowed-endpoint-hosts")
        assert h.collector.calls == 0


def test_the_target_watch_follows_the_target_and_goes_with_the_scaler(h: Harness) -> None:
    _setup(h, _es())
    h.collector.values["queue"] = 20.0
    h.reconcile("es")
    assert h.es.watches.held()[(ES, ROLE_TARGET)].resource == "deployments"
    h.api("elasticscalers").delete(f"{NS}/es")
    h.wait_synced()
    h.reconcile("es")
    assert h.es.watches.held() == {}


# -- the bearer-token Secret reader ---------------------------------------------------------------


class _Secrets:
    def __init__(self, objs: dict[str, dict[str, Any]]) -> None:
        self.objs = objs

    def get(self, m: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        if name not in self.objs:
            raise StatusError(404, "NotFound", f'secrets "{name}" not found')
        # opted in as a bearer token for HOST (escaler.signals.bearer; the rule is tested there)
        return {"metadata": {"labels": {"elasticscaler.io/bearer-token": "true"},
                             "annotations": {"elasticscaler.io/bearer-token-hosts": HOST}}, **self.objs[name]}


HOST = "prometheus.monitoring.svc"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_secret_reader_reads_and_trims_the_key() -> None:
    read = secret_key_reader(_Secrets({"prom": {"data": {"token": _b64("s3cret\n")}}}))  # type: ignore[arg-type]
    assert read(NS, "prom", "token", HOST) == "s3cret"


@pytest.mark.parametrize(("secrets", "key", "error", "match"), [
    # missing: the same refusal as a Secret that did not opt in (no existence oracle)
    ({}, "token", PermissionError, "Secret team/prom is not a bearer token for host"),
    ({"prom": {"data": {"other": _b64("x")}}}, "token", KeyError, "Secret team/prom has no key 'token'"),
    ({"prom": {"data": {"token": "%%%not-base64"}}}, "token", ValueError,
     "Secret team/prom key 'token' is not base64 UTF-8 text"),
    ({"prom": {"data": {"token": base64.b64encode(b"\xff\xfe").decode()}}}, "token", ValueError,
     "Secret team/prom key 'token' is not base64 UTF-8 text"),
], ids=["secret-missing", "key-missing", "not-base64", "not-utf8"])
def test_secret_reader_errors_name_the_secret_and_key_never_the_value(
        secrets: dict[str, Any], key: str, error: type[Exception], match: str) -> None:
    read = secret_key_reader(_Secrets(secrets))  # type: ignore[arg-type]
    with pytest.raises(error) as got:
        read(NS, "prom", key, HOST)
    assert match in str(got.value)
