"""0 GETs per steady-state reconcile (issue 10, "Goals"): every read from an informer cache.

A reconcile after warm-up (caches listed, the scaler's watches held, the first sync done) of a
MetricsTrigger (ExternalServer), a StateTrigger and a SignalTrigger scaler makes no GET — also for
a target whose kind serves only ``/scale`` (a CRD with non-default scale paths): its counts come
from the cached object at the paths its CRD declares, and the write still goes through ``/scale``
with the object's resourceVersion. A cache that does not hold the target yet may GET. And a
bearer-token Secret is read from a label-selected cache: repeated reads make no GET, and only
Secrets labelled ``elasticscaler.io/bearer-token=true`` are listed.

Fails on fec3229: the generic handler GETs ``.../scale`` on every reconcile, and the Secret
reader GETs the Secret on every query.
"""

from __future__ import annotations

import base64
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import (
    NS,
    Harness,
    deployment,
    external_metric,
    external_server_metric,
    metrics_trigger,
    scaler,
)
from fakeapi import FakeAPI
from reads_fakes import SCALABLE_REF, LateHandlers, ScaleClient, crd, production_harness, scalable

from escaler.errors import StatusError
from escaler.informers.dynamic import DynamicInformers
from escaler.signals.bearer import secret_key_reader


@pytest.fixture
def h() -> Iterator[Harness]:
    hh = production_harness()
    try:
        yield hh
    finally:
        hh.stop()


def _client(h: Harness) -> ScaleClient:
    assert isinstance(h.client, ScaleClient)
    return h.client


def _steady_gets(h: Harness, name: str, reconciles: int = 3) -> Counter[str]:
    """GETs made by ``reconciles`` reconciles of ``name`` after a warm-up reconcile."""
    h.reconcile(name)
    h.clock.step(60)
    h.reconcile(name)  # a poll's collection completes inline: a second sync consumes it
    before = _client(h).gets()
    for _ in range(reconciles):
        h.clock.step(31)
        h.reconcile_once(name)
    return _client(h).gets() - before


def test_metrics_trigger_on_a_scale_only_crd_target_makes_no_get(h: Harness) -> None:
    h.api("customresourcedefinitions").create(crd())
    h.api("scalables").create(scalable(2))
    h.api("elasticscalers").create(scaler(
        "es", metrics_trigger(external_server_metric("sum(load)", "10")), target=SCALABLE_REF))
    h.collector.values["sum(load)"] = 40.0  # 40 / 10 → 4 replicas
    h.start()
    h.reconcile("es")
    h.reconcile("es")  # the collection's completion
    assert h.api("scalables").get(f"{NS}/pool")["spec"]["size"] == 4, h.status("es")  # type: ignore[index]
    assert _client(h).count("put", "scalables/scale") == 1  # the write goes through /scale
    assert _steady_gets(h, "es") == Counter()
    assert _client(h).count("get", "scalables/scale") == 0


def test_scale_only_target_uses_the_crd_paths_and_the_objects_resource_version(h: Harness) -> None:
    h.api("customresourcedefinitions").create(crd())
    h.api("scalables").create(scalable(3))
    h.api("elasticscalers").create(scaler(
        "es", metrics_trigger(external_server_metric("sum(load)", "10")), target=SCALABLE_REF))
    h.collector.values["sum(load)"] = 30.0  # 30 / 10 → 3 replicas: no change
    h.start()
    h.reconcile("es")
    h.clock.step(60)
    h.reconcile("es")
    assert h.api("scalables").get(f"{NS}/pool")["spec"]["size"] == 3  # type: ignore[index]
    status = h.status("es")
    assert status.get("currentReplicas") == 3, status
    assert _client(h).count("get", "scalables/scale") == 0


@pytest.mark.parametrize("trigger", [
    {"type": "StateTrigger"},
    {"type": "SignalTrigger"},
    metrics_trigger(external_metric("queue", "10"), algorithm="HPA"),
], ids=["state-trigger", "signal-trigger", "metrics-trigger-hpa"])
def test_state_signal_and_hpa_triggers_make_no_get(h: Harness, trigger: dict[str, Any]) -> None:
    h.api("deployments").create(deployment("web", 2))
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}
    if trigger["type"] == "StateTrigger":
        h.api("tidals").create({
            "apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
            "metadata": {"name": "night", "namespace": NS,
                         "labels": {"elasticscaler.io/name": "es", "elasticscaler.io/namespace": NS}},
            "spec": {"rules": [], "targetRef": target}, "status": {"desiredReplicas": 3}})
        target = {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "name": "night"}
    h.api("elasticscalers").create(scaler("es", trigger, target=target))
    h.start()
    assert _steady_gets(h, "es") == Counter()
    # each scaler really works (a refused spec would make no GET trivially)
    assert h.condition("es", "Validated")["status"] == "True", h.status("es")  # type: ignore[index]
    if trigger["type"] == "StateTrigger":
        assert h.replicas() == 3
    if trigger["type"] == "MetricsTrigger":
        assert h.api("horizontalpodautoscalers").objects(), "no companion HPA"


def test_a_cache_that_does_not_hold_the_target_yet_may_get_it(h: Harness) -> None:
    h.api("customresourcedefinitions").create(crd())
    h.api("scalables").create(scalable(2))
    h.start()
    handler = LateHandlers.handler_for(h.reconciler._d.handlers, "example.com/v1", "Scalable")
    snap = handler.read(NS, type("R", (), {"api_version": "example.com/v1", "kind": "Scalable",
                                           "name": "pool"})())
    assert (snap.spec_replicas, snap.status_replicas, snap.selector) == (2, 2, "app=pool")
    assert _client(h).count("get", "scalables") == 1  # no cache: one GET of the object


# ------------------------------------------------------------------------------ bearer tokens


HOST = "prometheus.monitoring.svc"


def _secret(name: str, labelled: bool, token: str = "s3cret") -> dict[str, Any]:
    labels = {"elasticscaler.io/bearer-token": "true"} if labelled else {}
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": NS, "labels": labels,
                         "annotations": {"elasticscaler.io/bearer-token-hosts": HOST}},
            "data": {"token": base64.b64encode(token.encode()).decode()}}


class _CountingSecrets:
    def __init__(self, api: FakeAPI) -> None:
        self.api = api
        self.gets = 0
        self._mu = threading.Lock()

    def get(self, m: Any, name: str, namespace: str | None = None) -> dict[str, Any]:
        with self._mu:
            self.gets += 1
        obj = self.api.get(f"{namespace}/{name}")
        if obj is None:
            raise StatusError(404, "NotFound", f'secrets "{name}" not found')
        return obj


def test_bearer_token_secrets_come_from_a_label_selected_cache() -> None:
    api = FakeAPI([_secret("prom", True), _secret("other", False, "not-for-you")])
    keys: list[Any] = []

    def lw(key: Any) -> Any:
        keys.append(key)
        return api.for_key(key)

    informers = DynamicInformers(lw)
    secrets = _CountingSecrets(api)
    try:
        read = secret_key_reader(secrets, informers=informers)  # type: ignore[arg-type,call-arg]
        assert read(NS, "prom", "token", HOST) == "s3cret"  # first read: the cache is not listed yet
        inf = informers.informer(keys[0])
        assert inf is not None
        from fakeapi import wait_until
        wait_until(inf.has_synced, what="secret cache listed")
        before = secrets.gets
        for _ in range(5):
            assert read(NS, "prom", "token", HOST) == "s3cret"
        assert secrets.gets == before  # steady state: no GET
        # only opted-in Secrets are listed, watched and held
        assert keys[0].label_selector == "elasticscaler.io/bearer-token=true"
        assert keys[0].namespace == NS
        assert [o["metadata"]["name"] for o in inf.store.list()] == ["prom"]
        # a Secret without the label is still refused (read with a GET, so the error says why)
        with pytest.raises(PermissionError, match="is not a bearer token for host"):
            read(NS, "other", "token", HOST)
        # a rotated token is used at the next read
        rotated = _secret("prom", True, "rotated")
        rotated["metadata"]["resourceVersion"] = api.get(f"{NS}/prom")["metadata"]["resourceVersion"]  # type: ignore[index]
        api.update(rotated)
        wait_until(lambda: read(NS, "prom", "token", HOST) == "rotated", what="rotated token seen")
    finally:
        informers.stop_all()

