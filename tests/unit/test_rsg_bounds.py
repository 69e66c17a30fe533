"""GroupReplication's bounds (issue 27, item 3) on fakes (FakeClock, fake API, real caches).

Per sync: at most ``writes_per_sync`` clone creates plus deletes per reconcile, a new group never
split, the rest in the next passes with ``Ready=False/Progressing``. Per namespace: every RSG's
clones together stay within ``clones_per_namespace`` (``Ready=False/CloneLimitReached`` naming
``spec.replicas`` and the limit). Per clone: a template above ``template_bytes`` is refused
(``TemplateTooLarge``), nothing created. Cached clones carry no template. ``CloneLedger`` and
``slim_clone`` on their own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS
from rsg_fakes import RSGHarness, deployment, rsg

from escaler.clock import FakeClock
from escaler.informers.frozen import freeze
from escaler.reconcilers.rsg.clonecache import STRIPPED_ANNOTATION, slim_clone
from escaler.reconcilers.rsg.ledger import DEFAULT_EXPIRY_SECONDS, CloneLedger
from escaler.reconcilers.rsg.limits import ReplicationLimits
from escaler.reconcilers.rsg.replication import PROGRESS_REQUEUE_SECONDS

ONE = [("llm", "llama", 1)]
PD = [("prefill", "llama-prefill", 2), ("decode", "llama-decode", 1)]
RSG_API = "autoscaling.openfuyao.com/v1alpha1"


def harness(**limits: int) -> RSGHarness:
    return RSGHarness(limits=ReplicationLimits(**limits))


@pytest.fixture
def stop() -> Iterator[list[RSGHarness]]:
    made: list[RSGHarness] = []
    yield made
    for h in made:
        h.stop()


def start(made: list[RSGHarness], h: RSGHarness, *objs: dict[str, Any]) -> RSGHarness:
    made.append(h)
    for o in objs:
        h.api("resourcescalinggroups" if o["kind"] == "ResourceScalingGroup" else "deployments").create(o)
    h.start()
    return h


def creates(h: RSGHarness) -> int:
    return sum(1 for w in h.client.writes if w[0] == "create")


def deletes(h: RSGHarness) -> int:
    return sum(1 for w in h.client.writes if w[0] == "delete")


def ready(h: RSGHarness, name: str) -> tuple[str, str, str]:
    c = h.condition(name, "Ready")
    return c["status"], c["reason"], c["message"]


# ---------------------------------------------------------------------------------- per sync


def test_creates_and_deletes_go_in_passes_of_at_most_the_bound(stop: list[RSGHarness]) -> None:
    h = start(stop, harness(writes_per_sync=4), deployment("llama", 0),
              rsg("g", ONE, replicas=10, strategy="GroupReplication"))
    per_pass = []
    h.reconcile("g")
    per_pass.append(creates(h))
    assert ready(h, "g") == ("False", "Progressing", "created 4 of 10 groups; continuing (at most 4 clone "
                                                     "creates and deletes per sync)")
    for _ in range(10):
        before = creates(h)
        res = h.reconcile("g")
        per_pass.append(creates(h) - before)
        if ready(h, "g")[1] != "Progressing":
            break
        assert res.requeue_after == PROGRESS_REQUEUE_SECONDS, "a pass stopped by the bound continues soon"
    assert per_pass == [4, 4, 2]
    assert len(h.clones()) == 10
    h.set_replicas("g", 1)
    h.reconcile("g")
    assert deletes(h) == 4
    status, reason, message = ready(h, "g")
    assert (status, reason) == ("False", "Progressing")
    assert "deleted 4 clones, 6 groups left for 1; continuing (at most 4 clone creates and deletes" in message
    for _ in range(4):
        h.reconcile("g")
    assert deletes(h) == 9 and h.clones() == ["llm-g0"]


@pytest.mark.parametrize(("bound", "first_pass"), [(3, 2), (1, 2), (4, 4)],
                         ids=["bound-3-one-group-of-2", "bound-below-a-group-one-whole-group", "two-groups"])
def test_a_new_group_is_never_split(stop: list[RSGHarness], bound: int, first_pass: int) -> None:
    h = start(stop, harness(writes_per_sync=bound), deployment("llama-prefill", 0),
              deployment("llama-decode", 0), rsg("pd", PD, replicas=3, strategy="GroupReplication"))
    h.reconcile("pd")
    assert creates(h) == first_pass
    names = h.clones()
    groups = {n.rsplit("-g", 1)[1] for n in names}
    assert all(f"prefill-g{g}" in names and f"decode-g{g}" in names for g in groups), names
    status, reason, message = ready(h, "pd")
    assert (status, reason) == ("False", "Progressing")
    assert message.startswith(f"created {first_pass // 2} of 3 groups; continuing"), message


# ---------------------------------------------------------------------------------- per namespace


def test_the_namespace_bound_counts_every_rsg_and_refuses_the_excess(stop: list[RSGHarness]) -> None:
    h = start(stop, harness(clones_per_namespace=5), deployment("llama", 0), deployment("llama-prefill", 0),
              deployment("llama-decode", 0), rsg("a", ONE, replicas=3, strategy="GroupReplication"),
              rsg("pd", PD, replicas=3, strategy="GroupReplication", created="2026-01-02T00:00:00Z"))
    h.reconcile("a")
    res = h.reconcile("pd")
    assert len(h.clones()) == 5, h.clones()
    assert h.clones() == ["decode-g0", "llm-g0", "llm-g1", "llm-g2", "prefill-g0"]
    status, reason, message = ready(h, "pd")
    assert (status, reason) == ("False", "CloneLimitReached")
    assert message.startswith("spec.replicas: 3 groups of 2 members need 6 clones")
    assert "at most 5 clones" in message and "--max-clones-per-namespace" in message
    assert "1 groups exist, the other 2 are refused" in message
    assert res.requeue_after > 0, "a refused RSG looks again later"
    h.reconcile("pd")
    assert len(h.clones()) == 5, "never created past the bound"
    # room is made in the namespace: the refused groups follow, still within the bound
    h.set_replicas("a", 1)
    h.reconcile("a")
    h.reconcile("pd")
    assert sorted(h.clones()) == ["decode-g0", "decode-g1", "llm-g0", "prefill-g0", "prefill-g1"]
    assert ready(h, "pd")[1] == "CloneLimitReached"


# ---------------------------------------------------------------------------------- per clone


def test_an_oversized_template_is_refused_and_nothing_is_created(stop: list[RSGHarness]) -> None:
    big = deployment("llama-decode", 0)
    big["metadata"]["annotations"]["notes"] = "x" * 5000
    h = start(stop, harness(template_bytes=4096), deployment("llama-prefill", 0), big,
              rsg("pd", PD, replicas=2, strategy="GroupReplication"))
    h.reconcile("pd")
    assert creates(h) == 0, "no clone of any member when one is too large"
    status, reason, message = ready(h, "pd")
    assert (status, reason) == ("False", "TemplateTooLarge")
    assert message.startswith("spec.members[1] (decode): Deployment team/llama-decode makes clones of ")
    assert "above the 4096 bytes" in message and "--max-clone-template-bytes" in message


def test_a_member_that_is_a_clone_is_refused(stop: list[RSGHarness]) -> None:
    h = start(stop, harness(), deployment("llama", 0), rsg("a", ONE, replicas=1, strategy="GroupReplication"),
              rsg("b", [("again", "llm-g0", 1)], replicas=1, strategy="GroupReplication",
                  created="2026-01-02T00:00:00Z"))
    h.reconcile("a")
    h.reconcile("b")
    status, reason, message = ready(h, "b")
    assert (status, reason) == ("False", "InvalidSpec")
    assert "spec.members[0] (again): Deployment team/llm-g0 is itself a clone" in message
    assert h.clones() == ["llm-g0"]


# ---------------------------------------------------------------------------------- cached without templates


def test_clones_are_cached_without_their_templates(stop: list[RSGHarness]) -> None:
    h = start(stop, harness(), deployment("llama-prefill", 0), deployment("llama-decode", 0),
              rsg("pd", PD, replicas=1, strategy="GroupReplication"))
    h.reconcile("pd")
    h.sync_caches()
    dyn = h.mgr.dynamic_informers
    keys = [k for k in dyn.active_keys() if k.resource == "deployments"]
    assert {k.label_selector for k in keys} == {"", "autoscaling.openfuyao.com/rsg"}, keys
    for key in keys:
        inf = dyn.informer(key)
        assert inf is not None
        clone = inf.store.get_by_key(f"{NS}/prefill-g0")
        assert clone is not None and "template" not in clone["spec"], key
        assert clone["spec"]["replicas"] == 2 and clone["spec"]["selector"]["matchLabels"]
        assert STRIPPED_ANNOTATION in clone["metadata"]["annotations"]
    plain = dyn.informer(next(k for k in keys if not k.label_selector))
    assert plain is not None
    template = plain.store.get_by_key(f"{NS}/llama-prefill")
    assert template is not None and "template" in template["spec"], "a member keeps its template"
    assert h.api("deployments").get(f"{NS}/prefill-g0")["spec"]["template"], "the clone itself is whole"


# ---------------------------------------------------------------------------------- the pieces


def _clone(**extra: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "m-g0", "namespace": NS, "resourceVersion": "7", "uid": "u",
                         "labels": {"autoscaling.openfuyao.com/rsg": "r",
                                    "autoscaling.openfuyao.com/group": "0"},
                         "annotations": {"small": "1", "big": "x" * 1000},
                         "ownerReferences": [{"apiVersion": RSG_API, "kind": "ResourceScalingGroup",
                                              "name": "r", "uid": "ru", "controller": True}]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {}},
                     "volumeClaimTemplates": [{}], **extra},
            "status": {"readyReplicas": 2}}


def _unowned() -> dict[str, Any]:
    obj = _clone()
    obj["metadata"]["ownerReferences"] = []
    return obj


def _lws() -> dict[str, Any]:
    obj = _clone()
    del obj["spec"]["template"]
    obj["spec"]["leaderWorkerTemplate"] = {"size": 4, "workerTemplate": {"spec": {}}, "leaderTemplate": {}}
    return obj


@pytest.mark.parametrize(("obj", "slim"), [
    (_clone(), True), (_unowned(), False), (_lws(), True),
], ids=["deployment-clone", "labels-without-an-rsg-owner", "lws-clone"])
def test_slim_clone(obj: dict[str, Any], slim: bool) -> None:
    before = json.dumps(obj, sort_keys=True)
    out = slim_clone(freeze(obj))
    assert json.dumps(obj, sort_keys=True) == before, "never mutates its argument"
    if not slim:
        assert out == obj
        return
    spec = out["spec"]
    assert "template" not in spec and "volumeClaimTemplates" not in spec
    assert spec["replicas"] == 2 and spec["selector"] == {"matchLabels": {"a": "b"}}
    assert out["status"] == {"readyReplicas": 2} and out["metadata"]["resourceVersion"] == "7"
    assert spec.get("leaderWorkerTemplate", {"size": 4}) == {"size": 4}
    annotations = out["metadata"]["annotations"]
    assert "big" not in annotations and annotations["small"] == "1" and STRIPPED_ANNOTATION in annotations
    assert slim_clone(out) == out, "idempotent"


def test_ledger_grants_within_the_limit_across_owners_and_releases_what_is_unused() -> None:
    clock = FakeClock()
    ledger = CloneLedger(5, clock)
    seen = {("apps/deployments", "x-g0")}
    with ledger.reserve(NS, "a", seen, 3) as ra:
        assert ra.granted == 3
        with ledger.reserve(NS, "b", seen, 3) as rb:
            assert rb.granted == 1, "1 seen + 3 reserved by a: one left"
        ra.created(("apps/deployments", "a-g0"))
    # a's two unused creates went back; its one create counts until a cache shows it
    with ledger.reserve(NS, "b", seen, 10) as rb:
        assert (rb.granted, rb.used) == (3, 2)
    assert ledger.reserve("other", "c", set(), 10).granted == 5, "namespaces are independent"
    assert ledger.awaiting(NS, "a", seen) == 1
    ledger.observe(NS, ("apps/deployments", "a-g0"))
    assert ledger.awaiting(NS, "a", seen) == 0


def test_ledger_forgets_a_create_never_seen_after_the_expiry() -> None:
    clock = FakeClock()
    ledger = CloneLedger(2, clock)
    with ledger.reserve(NS, "a", set(), 1) as r:
        r.created(("apps/deployments", "a-g0"))
    assert ledger.awaiting(NS, "a", set()) == 1
    assert ledger.reserve(NS, "a", set(), 5).granted == 1
    clock.step(DEFAULT_EXPIRY_SECONDS + 1)
    assert ledger.awaiting(NS, "a", set()) == 0


def test_ledger_never_overgrants_under_concurrency() -> None:
    ledger = CloneLedger(50, FakeClock())
    granted: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        for i in range(20):
            r = ledger.reserve(NS, "x", set(), 3)
            for j in range(r.granted):
                r.created(("apps/deployments", f"{threading.get_ident()}-{i}-{j}"))
            r.close()
            with lock:
                granted.append(r.granted)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 50


def test_limits_refuse_a_bound_below_one() -> None:
    with pytest.raises(ValueError, match="writes_per_sync"):
        ReplicationLimits(writes_per_sync=0)

