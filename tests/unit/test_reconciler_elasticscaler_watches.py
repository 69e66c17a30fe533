"""What a namespace user can make the manager watch, and per-scaler state across delete + recreate.

* A target kind is checked from discovery *before* anything is watched: cluster-scoped kinds (a
  cluster-wide list/watch of Nodes or ClusterRoles) and kinds without a handler or a ``scale``
  subresource (Secrets, ConfigMaps, plain CRs) are refused with AbleToScale=False naming the kind
  and the rule, and no informer is registered; a spec that changes to such a kind (or to a kind the
  API server does not serve) drops the target watch it held. A StateTrigger hop of a cluster-scoped
  kind is refused the same way.
* A scaler deleted and recreated under the same name (new uid; the delete and the create can reach
  the reconciler as one queued key) starts afresh: no stabilization window, no signal, no
  remembered status of the old object applies to the new one.
* The per-scaler "already reported" set stays bounded however often the annotations change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import (
    MAPPINGS,
    NS,
    Cluster,
    Harness,
    deployment,
    external_metric,
    harness,
    metrics_trigger,
    scaler,
)
from test_reconciler_elasticscaler_signal import FakeServer, push

from escaler.kube.discovery import ResourceMapping
from escaler.runtime import Request

NODES = ResourceMapping("", "v1", "nodes", "Node", False, frozenset({"status"}))
CLUSTERROLES = ResourceMapping("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
SECRETS = ResourceMapping("", "v1", "secrets", "Secret", True)
CONFIGMAPS = ResourceMapping("", "v1", "configmaps", "ConfigMap", True)
EXTRA = (NODES, CLUSTERROLES, SECRETS, CONFIGMAPS)
FOREIGN = ("nodes", "clusterroles", "secrets", "configmaps", "widgets")


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness(cluster=Cluster((*MAPPINGS, *EXTRA))) as hh:
        yield hh


def target(api_version: str, kind: str, name: str = "x") -> dict[str, str]:
    return {"apiVersion": api_version, "kind": kind, "name": name}


def held(h: Harness) -> set[str]:
    """Resources the reconciler's watch index holds a registration for."""
    registered = h.es.watches.keys()
    return {k.resource for k in registered}


def watched_resources(h: Harness) -> set[str]:
    """``held``, and every resource an informer was ever built for on the fakes."""
    return held(h) | {k.resource for k in h.cluster.keys}


def able(h: Harness, name: str = "es") -> dict[str, Any]:
    cond = h.condition(name, "AbleToScale")
    assert cond is not None, h.status(name)
    return cond


# -- target kinds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "rule"),
    [
        (target("v1", "Node", "node-1"), "kind Node (nodes) is cluster-scoped"),
        (target("rbac.authorization.k8s.io/v1", "ClusterRole", "admin"),
         "kind ClusterRole (clusterroles.rbac.authorization.k8s.io) is cluster-scoped"),
        (target("v1", "Secret", "db-password"), "kind Secret (secrets) is not scalable"),
        (target("v1", "ConfigMap", "settings"), "kind ConfigMap (configmaps) is not scalable"),
        (target("example.com/v1", "Widget", "w"), "kind Widget (widgets.example.com) is not scalable"),
    ],
    ids=["node-cluster-wide", "clusterrole-cluster-wide", "secret", "configmap", "crd-without-scale"],
)
def test_a_kind_that_cannot_be_a_target_is_refused_before_any_watch(h: Harness, ref: dict[str, str],
                                                                     rule: str) -> None:
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric()), target=ref))
    h.start()
    informers_before = set(h.mgr.dynamic_informers.active_keys())
    h.reconcile("es")
    cond = able(h)
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert rule in cond["message"] and cond["message"].startswith("spec.targetRef: ")
    assert not watched_resources(h) & set(FOREIGN), "no informer for a refused kind, not even briefly"
    assert set(h.mgr.dynamic_informers.active_keys()) == informers_before
    assert h.es.watches.held() == {}


@pytest.mark.parametrize(
    "new_ref",
    [target("v1", "Node", "node-1"), target("v1", "Secret", "s"), target("example.com/v9", "Gone", "g")],
    ids=["to-cluster-scoped", "to-unscalable", "to-unserved-kind"],
)
def test_changing_the_target_to_a_refused_kind_drops_the_target_watch(h: Harness,
                                                                       new_ref: dict[str, str]) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric())))
    h.collector.values["queue"] = 10.0
    h.start()
    h.reconcile("es")
    assert held(h) == {"deployments"}
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    obj["spec"]["targetRef"] = new_ref
    h.api("elasticscalers").update(obj)
    h.reconcile("es")
    assert h.es.watches.keys() == [], "the scaler reads no target: it holds no watch"
    assert not watched_resources(h) & set(FOREIGN)
    assert able(h)["status"] == "False"


def test_a_missing_target_of_a_scalable_kind_keeps_its_watch(h: Harness) -> None:
    """NotFound of a valid kind is not a kind error: the target's creation must wake the scaler."""
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric())))
    h.start()
    h.reconcile("es")
    assert able(h)["reason"] == "TargetNotFound"
    assert held(h) == {"deployments"}


def test_a_state_chain_hop_of_a_cluster_scoped_kind_is_not_watched(h: Harness) -> None:
    labels = {"elasticscaler.io/name": "es", "elasticscaler.io/namespace": NS}
    h.api("tidals").create({
        "apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
        "metadata": {"name": "night", "namespace": NS, "labels": labels},
        "spec": {"rules": [], "targetRef": target("v1", "Node", "node-1")},
        "status": {"desiredReplicas": 3}})
    h.api("elasticscalers").create(scaler("es", {"type": "StateTrigger"},
                                          target=target("tidal.io/v1alpha1", "Tidal", "night")))
    h.start()
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "TargetChainInvalid")
    assert "cluster-scoped" in cond["message"]
    assert "nodes" not in watched_resources(h)
    assert h.client.count("get", "nodes") == 0, "a refused kind is not even read with a GET"


def test_a_state_source_of_kind_secret_is_refused(h: Harness) -> None:
    h.api("elasticscalers").create(scaler("es", {"type": "StateTrigger"}, target=target("v1", "Secret", "s")))
    h.start()
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "TargetChainInvalid")
    assert "Secret" in cond["message"]
    assert "secrets" not in watched_resources(h)


def test_changing_a_state_source_to_a_refused_kind_drops_the_source_watch(h: Harness) -> None:
    labels = {"elasticscaler.io/name": "es", "elasticscaler.io/namespace": NS}
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create({
        "apiVersion": "tidal.io/v1alpha1", "kind": "Tidal",
        "metadata": {"name": "night", "namespace": NS, "labels": labels},
        "spec": {"rules": [], "targetRef": target("apps/v1", "Deployment", "web")},
        "status": {"desiredReplicas": 3}})
    h.api("elasticscalers").create(scaler("es", {"type": "StateTrigger"},
                                          target=target("tidal.io/v1alpha1", "Tidal", "night")))
    h.start()
    h.reconcile("es")
    assert h.replicas() == 3
    assert "tidals" in held(h)
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    obj["spec"]["targetRef"] = target("v1", "Node", "node-1")
    h.api("elasticscalers").update(obj)
    h.reconcile("es")
    assert held(h) == set(), "a scaler whose source kind is refused holds no watch at all"
    assert "nodes" not in watched_resources(h)


# -- delete + recreate under the same name --------------------------------------------------------


def _recreate(h: Harness, obj: dict[str, Any]) -> None:
    """Delete the scaler and create it again at once, with a new uid: the reconciler sees only the new
    object (the delete and the create collapse into one queued key)."""
    h.api("elasticscalers").delete(f"{NS}/es")
    h.api("elasticscalers").create(obj)
    h.wait_synced()


def test_a_recreated_scaler_does_not_inherit_the_old_ones_windows(h: Harness) -> None:
    no_window = {"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "0"}
    es = metrics_trigger(external_metric())
    h.api("deployments").create(deployment("web", 4))
    h.api("elasticscalers").create(scaler("es", es, uid="uid-old", annotations=no_window))
    h.collector.values["queue"] = 40.0  # 4 replicas' worth: no change, and the sample window holds 40
    h.start()
    h.reconcile("es")
    assert h.replicas() == 4
    _recreate(h, scaler("es", es, uid="uid-new", annotations=no_window))
    h.collector.values["queue"] = 10.0  # 1 replica's worth
    h.clock.step(1)
    h.reconcile("es")
    # the old object's samples (40) would average the new one's 10 up to 25: 3 replicas, not 2
    assert h.replicas() == 2, "apa's one-step limit halves 4 to 2; nothing of the old object counts"


@pytest.fixture
def hs() -> Iterator[tuple[Harness, FakeServer]]:
    """A harness whose signal push API is reachable (``push``)."""
    server = FakeServer()
    with harness(cluster=Cluster((*MAPPINGS, *EXTRA)), api_server=server) as hh:
        yield hh, server


def test_a_recreated_scaler_does_not_inherit_the_old_ones_signal(hs: tuple[Harness, FakeServer]) -> None:
    h, server = hs
    h.api("deployments").create(deployment("web", 1))
    trig = {"type": "SignalTrigger"}
    h.api("elasticscalers").create(scaler("es", trig, min_replicas=0, uid="uid-old"))
    h.start()
    h.reconcile("es")
    assert push(server, NS, "es", {"replicas": 6})[0] == 202
    h.reconcile("es")
    assert h.replicas() == 6
    h.settle()
    _recreate(h, scaler("es", trig, min_replicas=0, uid="uid-new"))
    h.reconcile("es")
    entry = h.reconciler.signals.get(Request(NS, "es"))
    assert entry is None or (entry.replicas is None and entry.count == 0), \
        "the old object's standing request for 6 replicas does not apply to the new one"


def test_a_signal_pushed_to_the_new_object_before_its_first_sync_is_kept(
        hs: tuple[Harness, FakeServer]) -> None:
    h, server = hs
    h.api("deployments").create(deployment("web", 1))
    trig = {"type": "SignalTrigger"}
    h.api("elasticscalers").create(scaler("es", trig, min_replicas=0, uid="uid-old"))
    h.start()
    h.reconcile("es")
    _recreate(h, scaler("es", trig, min_replicas=0, uid="uid-new"))
    assert push(server, NS, "es", {"replicas": 4})[0] == 202
    h.reconcile("es")
    assert h.replicas() == 4


def test_a_recreated_scaler_releases_the_old_objects_remembered_status(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric()), uid="uid-old"))
    h.collector.values["queue"] = 20.0
    h.start()
    h.reconcile("es")
    writer = h.reconciler.reporter.writer
    assert len(writer._last) == 1
    for i in range(5):
        _recreate(h, scaler("es", metrics_trigger(external_metric()), uid=f"uid-{i}"))
        h.reconcile("es")
    assert len(writer._last) == 1, "one entry per live scaler, not one per object ever seen"


# -- bounded "already reported" -------------------------------------------------------------------


def test_reported_annotation_problems_stay_bounded(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("elasticscalers").create(scaler("es", metrics_trigger(external_metric())))
    h.collector.values["queue"] = 20.0
    h.start()
    for i in range(20):
        obj = h.api("elasticscalers").get(f"{NS}/es")
        assert obj is not None
        obj["metadata"]["annotations"] = {"elasticscaler.io/metrics.windowSeconds": f"soon-{i}"}
        h.api("elasticscalers").update(obj)
        h.reconcile("es")
    mem = h.reconciler._memory[Request(NS, "es")]
    assert len(mem.reported) == 1, "only the problems the object has now are remembered"
    assert h.reasons().count("InvalidAnnotation") == 20, "each new problem is still reported once"


class _NullStatusClient:
    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]:
        return {}


def test_the_status_writers_memory_is_a_bounded_lru() -> None:
    from escaler.reconcilers.kit.status import StatusWriter

    writer = StatusWriter(_NullStatusClient(), max_remembered=3)
    for i in range(50):  # scalers created and deleted faster than their deletion was seen
        obj = {"metadata": {"name": f"s{i}", "namespace": NS, "uid": f"u{i}", "resourceVersion": "1"}}
        writer.write(None, obj, {"desiredReplicas": i})
    assert writer.remembered() == 3
    with pytest.raises(ValueError, match="max_remembered"):
        StatusWriter(_NullStatusClient(), max_remembered=0)


def test_signal_store_keeps_entries_per_object() -> None:
    from datetime import UTC, datetime

    from escaler.reconcilers.elasticscaler.signal import Signal, SignalStore

    store, req, wall = SignalStore(), Request(NS, "es"), datetime(2026, 1, 1, tzinfo=UTC)
    store.record(req, Signal(True, 5), 1.0, wall, uid="old")
    store.record(req, Signal(None, 2), 2.0, wall, uid="new")  # a push to the recreated object
    entry = store.get(req)
    assert entry is not None
    assert (entry.count, entry.replicas, entry.uid, entry.first_seen) == (1, 2, "new", 2.0)
    store.forget_stale(req, "new", previous_uid="old")
    assert store.get(req) == entry, "an entry of the current object is kept"
    store.forget_stale(req, "newer", previous_uid="new")
    assert store.get(req) is None
    store.seen(req, 3.0)  # an entry of this process's own reconcile (uid unknown)
    store.forget_stale(req, "newer", previous_uid="newer")
    assert store.get(req) is not None, "first sight: an entry without uid is the current object's"
    store.forget_stale(req, "newest", previous_uid="newer")
    assert store.get(req) is None, "recreated: an entry without uid was the previous object's"
