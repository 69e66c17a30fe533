"""Who holds a target (issue 8 item 4), what target errors touch (item 10), and what a restart or a
leader change remembers (item 6), at the reconciler level on the in-process fake API."""

from __future__ import annotations

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

from escaler.informers.factory import ResourceKey
from escaler.reconcilers.kit.bindings import TargetKey
from escaler.reconcilers.kit.claims import Claims
from escaler.reconcilers.kit.report import CLAIM_RECHECK_SECONDS

WEB = TargetKey(NS, "apps", "Deployment", "web")
OLDER, YOUNGER = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
LABELS = {"elasticscaler.io/name": "x", "elasticscaler.io/namespace": NS}


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as hh:
        yield hh


def _valid(name: str, created: str, **kw: Any) -> dict[str, Any]:
    return scaler(name, metrics_trigger(external_metric("queue", "10")), created=created, **kw)


# id → an older scaler that cannot act
CANNOT_ACT: list[tuple[str, dict[str, Any]]] = [
    ("algorithm-not-registered",
     scaler("old", metrics_trigger(external_metric(), algorithm="no-such-algorithm"), created=OLDER)),
    ("min-above-max", scaler("old", metrics_trigger(external_metric()), created=OLDER, min_replicas=5,
                             max_replicas=3)),
    ("hpa-with-external-server",
     scaler("old", metrics_trigger(external_server_metric(), algorithm="HPA"), created=OLDER)),
    ("does-not-parse", {**_valid("old", OLDER), "spec": {"targetRef": {"apiVersion": "apps/v1",
                                                                      "kind": "Deployment", "name": "web"},
                                                         "trigger": {"type": "Nonsense"}}}),
]


@pytest.mark.parametrize("old", [o for _, o in CANNOT_ACT], ids=[i for i, _ in CANNOT_ACT])
def test_an_older_scaler_that_cannot_act_does_not_hold_the_target(h: Harness, old: dict[str, Any]) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(old)
    h.api("elasticscalers").create(_valid("young", YOUNGER))
    h.start()
    h.collector.values["queue"] = 40.0
    h.reconcile("old")
    h.reconcile("young")
    assert h.replicas() == 4
    validated = h.condition("young", "Validated")
    assert validated is not None and (validated["status"], validated["reason"]) == ("True", "Valid")
    old_validated = h.condition("old", "Validated")
    assert old_validated is not None and old_validated["status"] == "False"
    assert old_validated["reason"] != "TargetConflict"


def test_claims_index_function_excludes_what_cannot_act() -> None:
    claims = Claims()
    assert claims.target_of(_valid("a", OLDER)) == WEB
    for _, obj in CANNOT_ACT:
        assert claims.target_of(obj) is None
    assert claims.target_of(_valid("a", OLDER, mode="Advisory")) is None


def test_a_valid_older_scaler_still_wins(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(_valid("old", OLDER))
    h.api("elasticscalers").create(_valid("young", YOUNGER))
    h.start()
    h.collector.values["queue"] = 40.0
    h.reconcile("young")
    assert h.replicas() == 2
    assert h.client.count("patch", "deployments") == 0
    young = h.condition("young", "Validated")
    assert young is not None and (young["status"], young["reason"]) == ("False", "TargetConflict")


def test_an_older_llmscaler_holds_the_target_across_kinds(h: Harness) -> None:
    """The binding index is shared by every scaler kind: an LLMScaler claim source registered on the
    same TargetBindings makes the younger ElasticScaler a TargetConflict loser."""
    llm_informer = h.mgr.informers.informer_for(ResourceKey("llm.escaler.io", "v1alpha1", "llmscalers"))
    h.es.bindings.add_source(
        "LLMScaler", llm_informer,
        lambda o: TargetKey.from_ref(NS, "apps/v1", "Deployment", o["spec"]["targetRef"]["name"]))
    h.api("deployments").create(deployment("web", 2))
    h.api("llmscalers").create({"apiVersion": "llm.escaler.io/v1alpha1", "kind": "LLMScaler",
                                "metadata": {"name": "llm", "namespace": NS, "creationTimestamp": OLDER},
                                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                       "name": "web"}}})
    h.api("elasticscalers").create(_valid("es", YOUNGER))
    h.start()
    h.wait_synced("llmscalers")
    h.collector.values["queue"] = 40.0
    h.reconcile("es")
    assert h.replicas() == 2
    cond = h.condition("es", "Validated")
    assert cond is not None and cond["reason"] == "TargetConflict"
    assert "LLMScaler team/llm" in cond["message"]


# -- StateTrigger: claim before the first write --------------------------------------------------------


def _tidal(name: str, desired: int) -> dict[str, Any]:
    return {"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"elasticscaler.io/name": f"es-{name}", "elasticscaler.io/namespace": NS}},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
            "status": {"desiredReplicas": desired}}


def _state(name: str, created: str) -> dict[str, Any]:
    return scaler(f"es-{name}", {"type": "StateTrigger"}, created=created,
                  target={"apiVersion": "tidal.io/v1alpha1", "kind": "Tidal", "name": name})


def test_state_trigger_claims_its_resolved_target_before_writing_it(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create(_tidal("day", 6))
    h.api("tidals").create(_tidal("night", 3))
    h.api("elasticscalers").create(_state("day", YOUNGER))
    h.api("elasticscalers").create(_state("night", OLDER))
    h.start()
    # first syncs (after the informers they start have listed): each records its claim and writes
    # nothing to the target
    for name in ("es-day", "es-night"):
        results = []
        while "resolvedTargetRef" not in h.status(name):
            assert len(results) < 5, results
            results.append(h.reconcile_once(name))
            h.wait_listed()
        assert results[-1].requeue_after == CLAIM_RECHECK_SECONDS
        assert h.client.count("patch", "deployments") == 0
    assert h.status("es-day")["resolvedTargetRef"]["name"] == "web"
    assert h.status("es-night")["resolvedTargetRef"]["name"] == "web"
    # with both claims in the index, only the older one ever writes
    h.wait_synced()
    h.reconcile("es-day")
    h.reconcile("es-night")
    assert h.replicas() == 3
    day = h.condition("es-day", "Validated")
    assert day is not None and day["reason"] == "TargetConflict"


def test_a_broken_chain_drops_the_claim(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create(_tidal("day", 6))
    h.api("elasticscalers").create(_state("day", OLDER))
    h.start()
    h.reconcile("es-day")
    h.wait_synced()
    h.reconcile("es-day")
    assert h.replicas() == 6
    broken = _tidal("day", 6)
    broken["spec"]["targetRef"]["name"] = "gone"
    obj = h.api("tidals").get(f"{NS}/day")
    assert obj is not None
    h.api("tidals").update({**obj, "spec": broken["spec"]})
    h.wait_synced("tidals")
    h.reconcile("es-day")
    assert "resolvedTargetRef" not in h.status("es-day")
    cond = h.condition("es-day", "Validated")
    assert cond is not None and cond["reason"] == "TargetChainInvalid"


# -- item 10: target errors touch AbleToScale only --------------------------------------------------


def test_a_target_error_leaves_validated_as_it_was(h: Harness) -> None:
    stale = {"type": "Validated", "status": "False", "reason": "TargetConflict", "message": "an older one",
             "observedGeneration": 1, "lastTransitionTime": "2025-12-31T00:00:00Z"}
    obj = _valid("es", OLDER)
    obj["status"] = {"conditions": [stale]}
    h.api("elasticscalers").create(obj)  # no Deployment web: TargetNotFound
    h.start()
    h.reconcile("es")
    assert h.condition("es", "Validated") == stale
    able = h.condition("es", "AbleToScale")
    assert able is not None and (able["status"], able["reason"]) == ("False", "TargetNotFound")


# -- item 6: a restart or a new leader never scales down earlier than one leader would -------------------


def test_a_restart_during_the_scale_down_window_does_not_scale_down_early(h: Harness) -> None:
    window = 60
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(_valid("es", OLDER, annotations={
        "elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": str(window)}))
    h.start()
    h.collector.values["queue"] = 40.0
    h.reconcile("es")  # spike: 2 → 4 at t=0
    assert h.replicas() == 4
    h.settle()
    h.clock.step(10)
    # the manager restarts (or another replica takes over) at t=10: a new process, same cluster
    with harness(cluster=h.cluster, clock=h.clock) as h2:
        h2.start()
        h2.collector.values["queue"] = 10.0  # the load is gone: 1 replica wanted
        h2.reconcile("es")
        assert h2.replicas() == 4  # the seeded window holds the current count
        h2.clock.step(window - 1)  # t=69: one leader would already have scaled down at t=60
        h2.reconcile("es")
        assert h2.replicas() == 4
        h2.clock.step(1)  # t=70 = restart + window
        h2.reconcile("es")
        assert h2.replicas() == 2  # apa's one-step limit halves it
