"""StateTrigger: the targetRef chain (hops, cycle, dangling, too long), the source's
status.desiredReplicas, the label-selected dynamic informers (registration, release, events), and
following a schedule: at once on the way down (no default scale-down window; the shipped sample pair)
and down to 0 with ``minReplicas: 0``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from api_cases import load_samples
from es_fakes import NS, Harness, deployment, harness, scaler
from fakeapi import wait_until

from escaler.informers.factory import ResourceKey
from escaler.reconcilers.elasticscaler.state import (
    ChainError,
    ObjectRef,
    desired_replicas_of,
    label_problem,
    request_for_source,
    resolve_chain,
)
from escaler.runtime import Request

STATE = {"type": "StateTrigger"}
# a source is watched in the scaler's own namespace (docs/security.md, "Watches a CR can cause";
# issue 27 item 12: it was every namespace's objects of that kind)
TIDAL_KEY = ResourceKey("tidal.io", "v1alpha1", "tidals", namespace=NS,
                        label_selector="elasticscaler.io/name")
WIDGET_SOURCE_KEY = ResourceKey("example.com", "v1", "widgets", namespace=NS,
                                label_selector="elasticscaler.io/name")
LABELS = {"elasticscaler.io/name": "es", "elasticscaler.io/namespace": NS}


def ref(kind: str, name: str) -> dict[str, str]:
    api = {"Deployment": "apps/v1", "Tidal": "tidal.io/v1alpha1", "Widget": "example.com/v1"}[kind]
    return {"apiVersion": api, "kind": kind, "name": name}


def tidal(
    name: str, target: dict[str, str] | None, desired: int | None = 5, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "tidal.io/v1alpha1",
        "kind": "Tidal",
        "metadata": {"name": name, "namespace": NS, "labels": dict(LABELS if labels is None else labels)},
        "spec": {"rules": []},
    }
    if target is not None:
        obj["spec"]["targetRef"] = target
    if desired is not None:
        obj["status"] = {"desiredReplicas": desired}
    return obj


def widget(
    name: str, target: dict[str, str] | None, labels: dict[str, str] | None = None, desired: int | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": NS, "labels": dict(labels or {})},
        "spec": {},
    }
    if target is not None:
        obj["spec"]["targetRef"] = target
    if desired is not None:
        obj["status"] = {"desiredReplicas": desired}
    return obj


def state_scaler(name: str = "es", source: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return scaler(name, STATE, target=source or ref("Tidal", "night"), **kw)


@pytest.fixture
def h() -> Iterator[Harness]:
    with harness() as hh:
        yield hh


# -- resolve_chain (pure) -------------------------------------------------------------------------


def _reader(objs: dict[str, dict[str, Any]]) -> Any:
    return lambda r: objs.get(r.name)


ES = ObjectRef("elasticscaler.io/v1alpha1", "ElasticScaler", "es")
SRC = ObjectRef("tidal.io/v1alpha1", "Tidal", "night")


def _chain(n_widgets: int) -> dict[str, dict[str, Any]]:
    objs: dict[str, dict[str, Any]] = {"web": deployment("web")}
    names = [f"w{i}" for i in range(1, n_widgets + 1)]
    objs["night"] = tidal("night", ref("Widget", names[0]) if names else ref("Deployment", "web"))
    for i, n in enumerate(names):
        nxt = ref("Widget", names[i + 1]) if i + 1 < len(names) else ref("Deployment", "web")
        objs[n] = widget(n, nxt)
    return objs


@pytest.mark.parametrize(("widgets", "hops"), [(0, 1), (1, 2), (4, 5)], ids=["1-hop", "2-hops", "5-hops"])
def test_chain_resolves(widgets: int, hops: int) -> None:
    chain = resolve_chain(ES, SRC, _reader(_chain(widgets)))
    assert chain.target == ObjectRef("apps/v1", "Deployment", "web")
    assert len(chain.path) == hops + 1


@pytest.mark.parametrize(
    ("objs", "needle"),
    [
        (_chain(5), "longer than 5 hops"),
        (
            {
                "night": tidal("night", ref("Widget", "a")),
                "a": widget("a", ref("Widget", "b")),
                "b": widget("b", ref("Widget", "a")),
            },
            "cycle",
        ),
        ({"night": tidal("night", ref("Widget", "gone"))}, "dangling"),
        ({}, r"state source Tidal night not found \(dangling\)"),
        ({"night": tidal("night", None)}, "no spec.targetRef"),
        ({"night": tidal("night", {"kind": "Deployment", "name": "web"})}, "needs apiVersion"),
    ],
    ids=["six-hops", "cycle", "dangling-link", "dangling-source", "source-without-target", "malformed-link"],
)
def test_chain_refused(objs: dict[str, dict[str, Any]], needle: str) -> None:
    with pytest.raises(ChainError, match=needle):
        resolve_chain(ES, SRC, _reader(objs))


def test_chain_back_to_the_scaler_is_a_cycle() -> None:
    objs = {
        "night": tidal(
            "night", {"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler", "name": "es"}
        )
    }
    with pytest.raises(ChainError, match="cycle"):
        resolve_chain(ES, SRC, _reader(objs))


@pytest.mark.parametrize(
    ("status", "want"),
    [
        ({"desiredReplicas": 3}, 3),
        ({"desiredReplicas": 3.0}, 3),
        ({}, None),
        ({"desiredReplicas": -1}, None),
        ({"desiredReplicas": "3"}, None),
        ({"desiredReplicas": True}, None),
    ],
    ids=["int", "integral-float", "absent", "negative", "string", "bool"],
)
def test_desired_replicas_of(status: dict[str, Any], want: int | None) -> None:
    assert desired_replicas_of({"status": status}) == want


def test_labels() -> None:
    assert request_for_source(tidal("t", None)) == (NS, "es")
    assert request_for_source(tidal("t", None, labels={"elasticscaler.io/name": "x"})) == (NS, "x")
    assert request_for_source(tidal("t", None, labels={})) is None
    assert label_problem(tidal("t", None), NS, "es") is None
    assert "elasticscaler.io/namespace=team" in (
        label_problem(tidal("t", None, labels={"elasticscaler.io/name": "es"}), NS, "es") or ""
    )


# -- reconciles -----------------------------------------------------------------------------------


def test_follows_the_source_through_two_hops(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create(tidal("night", ref("Widget", "w1"), desired=5))
    h.api("widgets").create(widget("w1", ref("Deployment", "web")))
    h.api("elasticscalers").create(state_scaler())
    h.start()
    h.reconcile("es")
    assert h.replicas() == 5
    st = h.status("es")
    assert st["resolvedTargetRef"] == ref("Deployment", "web")
    assert h.condition("es", "ScalingActive")["reason"] == "DecisionReceived"  # type: ignore[index]
    assert h.condition("es", "MetricsPipeline") is None
    assert h.mgr.dynamic_informers.refcount(TIDAL_KEY) == 1


@pytest.mark.parametrize(
    ("objs", "needle"),
    [
        (
            [
                tidal("night", ref("Widget", "a")),
                widget("a", ref("Widget", "b")),
                widget("b", ref("Widget", "a")),
            ],
            "cycle",
        ),
        ([tidal("night", ref("Widget", "gone"))], "dangling"),
        (
            [tidal("night", ref("Widget", "w1"))]
            + [widget(f"w{i}", ref("Widget", f"w{i + 1}")) for i in range(1, 7)],
            "longer than 5 hops",
        ),
    ],
    ids=["cycle", "dangling", "more-than-5-hops"],
)
def test_invalid_chain_holds(h: Harness, objs: list[dict[str, Any]], needle: str) -> None:
    h.api("deployments").create(deployment("web", 2))
    for o in objs:
        h.api("tidals" if o["kind"] == "Tidal" else "widgets").create(o)
    h.api("elasticscalers").create(state_scaler())
    h.start()
    h.reconcile("es")
    cond = h.condition("es", "Validated")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "TargetChainInvalid")
    assert needle in cond["message"]
    assert h.condition("es", "ScalingActive")["reason"] == "InvalidSpec"  # type: ignore[index]
    assert h.replicas() == 2


def test_dangling_link_heals_when_the_object_appears(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create(tidal("night", ref("Widget", "w1"), desired=3))
    h.api("elasticscalers").create(state_scaler())
    h.start()
    h.reconcile("es")
    assert h.condition("es", "Validated")["reason"] == "TargetChainInvalid"  # type: ignore[index]
    queue = h.es.controller.queue
    h.api("widgets").create(widget("w1", ref("Deployment", "web")))
    wait_until(lambda: len(queue) > 0, what="the missing link's creation enqueues the scaler")
    h.reconcile("es")
    assert h.condition("es", "Validated")["reason"] == "Valid"  # type: ignore[index]
    assert h.replicas() == 3


def test_source_without_desired_replicas_holds(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create(tidal("night", ref("Deployment", "web"), desired=None))
    h.api("elasticscalers").create(state_scaler())
    h.start()
    h.reconcile("es")
    cond = h.condition("es", "ScalingActive")
    assert cond is not None and (cond["status"], cond["reason"]) == ("False", "DecisionUnavailable")
    assert "Tidal team/night" in cond["message"] and "desiredReplicas" in cond["message"]
    assert h.replicas() == 2


def test_source_without_labels_is_reported(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create(tidal("night", ref("Deployment", "web"), desired=4, labels={}))
    h.api("elasticscalers").create(state_scaler())
    h.start()
    result = h.reconcile("es")
    cond = h.condition("es", "ScalingActive")
    assert cond is not None and cond["reason"] == "DecisionUnavailable"
    assert "elasticscaler.io/name=es" in cond["message"]
    assert h.replicas() == 2
    assert result.requeue_after == 60.0  # no event can reach us from an unlabelled source: look again


def test_source_change_enqueues_at_once(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("tidals").create(tidal("night", ref("Deployment", "web"), desired=2))
    h.api("elasticscalers").create(state_scaler())
    h.start()
    h.reconcile("es")
    queue = h.es.controller.queue
    while len(queue):
        queue.done(queue.get())
    src = h.api("tidals").get(f"{NS}/night")
    assert src is not None
    src["status"]["desiredReplicas"] = 6
    h.api("tidals").update(src)
    wait_until(lambda: len(queue) > 0, what="a source change enqueues its scaler")
    assert queue.get() == Request(NS, "es")
    h.settle("web")
    h.reconcile("es")
    assert h.replicas() == 6


def test_informers_released_when_scalers_go_or_change_source(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 2))
    h.api("deployments").create(deployment("api", 2))
    h.api("tidals").create(tidal("night", ref("Deployment", "web"), desired=3))
    h.api("tidals").create(
        tidal(
            "day",
            ref("Deployment", "api"),
            desired=3,
            labels={"elasticscaler.io/name": "es2", "elasticscaler.io/namespace": NS},
        )
    )
    h.api("widgets").create(widget("w", ref("Deployment", "web"), labels=LABELS, desired=4))
    h.api("elasticscalers").create(state_scaler("es"))
    h.api("elasticscalers").create(state_scaler("es2", source=ref("Tidal", "day")))
    h.start()
    h.reconcile("es")
    h.reconcile("es2")
    h.settle("web")
    informers = h.mgr.dynamic_informers
    # one registration (one handler) per watched resource, whatever the number of scalers; the
    # index says which scaler reads which source
    assert informers.refcount(TIDAL_KEY) == 1
    held = h.es.watches.held()
    assert held[(Request(NS, "es"), "source")] == held[(Request(NS, "es2"), "source")] == TIDAL_KEY
    # es switches its source from a Tidal to a Widget: es2 still reads Tidals
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    obj["spec"]["targetRef"] = ref("Widget", "w")
    obj["metadata"]["generation"] = 2
    h.api("elasticscalers").update(obj)
    h.reconcile("es")
    assert informers.refcount(TIDAL_KEY) == 1
    assert informers.refcount(WIDGET_SOURCE_KEY) == 1
    assert h.replicas() == 4
    # es2 is deleted: nobody reads Tidals any more, and that informer stops (off the reconcile thread)
    h.api("elasticscalers").delete(f"{NS}/es2")
    h.reconcile("es2")
    wait_until(lambda: TIDAL_KEY not in informers.active_keys(), what="the Tidal informer stopped")
    # es leaves StateTrigger: its source informer is released too
    obj = h.api("elasticscalers").get(f"{NS}/es")
    assert obj is not None
    obj["spec"]["targetRef"] = ref("Deployment", "web")
    obj["spec"]["trigger"] = {"type": "SignalTrigger"}
    obj["metadata"]["generation"] = 3
    h.api("elasticscalers").update(obj)
    h.reconcile("es")
    wait_until(lambda: WIDGET_SOURCE_KEY not in informers.active_keys(), what="the Widget informer stopped")


# -- a schedule is a decision: no scale-down window by default; a source at 0 (issue 28 items 3, 4) --


def _sample_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """The shipped pair (manifests/samples): the Tidal llama-office-hours and its StateTrigger follower
    llama-es, as they are apart from the namespace (the Tidal's labels name the follower's)."""
    samples = load_samples()
    es, src = samples["ElasticScaler/llama-es"], samples["Tidal/llama-office-hours"]
    es["metadata"].update(namespace=NS, uid="uid-llama-es", creationTimestamp="2026-01-01T00:00:00Z",
                          generation=1)
    src["metadata"]["namespace"] = NS
    src["metadata"]["labels"]["elasticscaler.io/namespace"] = NS
    return es, src


def _set_desired(h: Harness, name: str, desired: int) -> None:
    src = h.api("tidals").get(f"{NS}/{name}")
    assert src is not None
    src["status"] = {"desiredReplicas": desired}
    h.api("tidals").update(src)


def test_the_shipped_sample_pair_follows_a_scale_down_at_once(h: Harness) -> None:
    es, src = _sample_pair()
    assert "annotations" not in es["metadata"]  # the default window is what is under test
    target = src["spec"]["targetRef"]["name"]
    h.api("deployments").create(deployment(target, 12))
    h.api("tidals").create({**src, "status": {"desiredReplicas": 8}})  # weekday-peak
    h.api("elasticscalers").create(es)
    h.start()
    h.reconcile("llama-es")
    # 12 -> 8 at once: the window that would have kept 12 for 300 s does not apply to a schedule
    assert h.replicas(target) == 8
    assert h.condition("llama-es", "AbleToScale")["reason"] == "Synced"  # type: ignore[index]
    h.settle(target)
    h.clock.step(30)
    _set_desired(h, "llama-office-hours", 2)  # the peak ends: defaultReplicas
    h.reconcile("llama-es")
    assert h.replicas(target) == 2


def test_a_scale_down_window_set_explicitly_still_applies_to_a_state_trigger(h: Harness) -> None:
    window = {"elasticscaler.io/behavior.scaleDown.stabilizationWindowSeconds": "300"}
    h.api("deployments").create(deployment("web", 6))
    h.api("tidals").create(tidal("night", ref("Deployment", "web"), desired=2))
    h.api("elasticscalers").create(state_scaler(annotations=window))
    h.start()
    h.reconcile("es")
    assert h.replicas() == 6
    assert h.condition("es", "AbleToScale")["reason"] == "ScaleDownStabilized"  # type: ignore[index]


def test_a_tidal_at_zero_takes_its_follower_to_zero_and_back(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 3))
    h.api("tidals").create(tidal("night", ref("Deployment", "web"), desired=0))
    h.api("elasticscalers").create(state_scaler(min_replicas=0))
    h.start()
    h.reconcile("es")
    assert h.replicas() == 0
    assert h.condition("es", "Validated")["reason"] == "Valid"  # type: ignore[index]
    limited = h.condition("es", "ScalingLimited")
    assert limited is not None and (limited["status"], limited["reason"]) == ("False", "DesiredWithinRange")
    h.settle("web")
    h.clock.step(30)
    _set_desired(h, "night", 4)  # a rule starts: from zero
    h.reconcile("es")
    assert h.replicas() == 4
    assert h.condition("es", "ScalingActive")["reason"] == "DecisionReceived"  # type: ignore[index]


def test_a_follower_with_min_one_stops_at_one_and_says_so(h: Harness) -> None:
    h.api("deployments").create(deployment("web", 3))
    h.api("tidals").create(tidal("night", ref("Deployment", "web"), desired=0))
    h.api("elasticscalers").create(state_scaler())
    h.start()
    h.reconcile("es")
    assert h.replicas() == 1
    assert h.condition("es", "ScalingLimited")["reason"] == "TooFewReplicas"  # type: ignore[index]
