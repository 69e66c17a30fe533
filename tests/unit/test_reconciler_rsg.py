"""The ResourceScalingGroup reconciler on fakes (FakeClock, fake API, real handlers and caches).

InplaceScaling: ratio, write order (up: list order, down: reverse), a refused member write
recorded per member and retried with backoff, status written only when changed, 0 GETs.
GroupReplication: whole groups created as clones, scale-down by load / by index (query failing or
absent) with the ScaleDownRanking condition, clone repair. Conflicts through the binding index,
invalid specs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, external_metric, metrics_trigger
from es_fakes import scaler as es_scaler
from rsg_fakes import RSGHarness, deployment, rsg

from escaler.errors import StatusError
from escaler.reconcilers.rsg.backoff import DEFAULT_RETRY_BASE_SECONDS
from escaler.runtime import Request

PD = [("prefill", "llama-prefill", 2), ("decode", "llama-decode", 1)]
PROM = {"endpoint": "http://prometheus:9090", "query": 'sum by (group) (load{rsg="pd"})'}


@pytest.fixture
def h() -> Iterator[RSGHarness]:
    harness = RSGHarness()
    try:
        yield harness
    finally:
        harness.stop()


def started(h: RSGHarness, *objs: dict[str, Any]) -> RSGHarness:
    for o in objs:
        api = "resourcescalinggroups" if o["kind"] == "ResourceScalingGroup" else (
            "elasticscalers" if o["kind"] == "ElasticScaler" else "deployments")
        h.api(api).create(o)
    h.start()
    return h


def members_of(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in status.get("members") or []}


def refused(code: int = 403) -> StatusError:
    return StatusError(code, "Forbidden", 'admission webhook "deny.rsg.test" denied the request: frozen')


# ---------------------------------------------------------------------------------- InplaceScaling


def test_inplace_scale_up_writes_members_in_list_order_at_the_ratio(h: RSGHarness) -> None:
    started(h, deployment("llama-prefill", 2), deployment("llama-decode", 1), rsg("pd", PD, replicas=3))
    h.reconcile("pd")
    assert (h.replicas("llama-prefill"), h.replicas("llama-decode")) == (6, 3)
    assert h.client.writes == [("patch", "deployments", "llama-prefill"),
                               ("patch", "deployments", "llama-decode")]
    st = h.status("pd")
    assert st["replicas"] == 3
    assert members_of(st)["prefill"]["desiredReplicas"] == 6
    assert "message" not in members_of(st)["prefill"]


def test_inplace_scale_down_writes_members_in_reverse_order(h: RSGHarness) -> None:
    started(h, deployment("llama-prefill", 6), deployment("llama-decode", 3), rsg("pd", PD, replicas=1))
    h.reconcile("pd")
    assert (h.replicas("llama-prefill"), h.replicas("llama-decode")) == (2, 1)
    assert h.client.writes == [("patch", "deployments", "llama-decode"),
                               ("patch", "deployments", "llama-prefill")]


def test_inplace_ready_counts_whole_groups_and_status_is_written_only_when_changed(h: RSGHarness) -> None:
    started(h, deployment("llama-prefill", 4), deployment("llama-decode", 2), rsg("pd", PD, replicas=2))
    h.reconcile("pd")
    st = h.status("pd")
    assert (st["replicas"], st["readyReplicas"], st["selector"]) == (2, 2, "app=llama-prefill")
    assert h.condition("pd", "Ready")["status"] == "True"
    assert h.client.writes == []
    writes = h.reconciler.reporter.writer.writes
    h.reconcile("pd")
    h.reconcile("pd")
    assert h.reconciler.reporter.writer.writes == writes, "an unchanged status was written again"
    assert h.client.count("get", "deployments") == 0, "members must be read from the caches"


def test_inplace_failed_member_write_is_recorded_then_retried_with_backoff(h: RSGHarness) -> None:
    started(h, deployment("llama-prefill", 2), deployment("llama-decode", 1), rsg("pd", PD, replicas=2))
    h.client.faults[("patch", "deployments")] = [refused(), refused()]
    first = h.reconcile("pd")
    st = h.status("pd")
    msg = members_of(st)["prefill"]["message"]
    assert "member prefill" in msg and "Deployment team/llama-prefill" in msg and "denied the request" in msg
    assert "waits for member prefill" in members_of(st)["decode"]["message"]
    ready = h.condition("pd", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "MemberWriteFailed")
    assert "denied the request" in ready["message"]
    assert (h.replicas("llama-prefill"), h.replicas("llama-decode")) == (2, 1), "decode ran ahead of prefill"
    assert first.requeue_after == DEFAULT_RETRY_BASE_SECONDS
    second = h.reconcile("pd")
    assert second.requeue_after == 2 * DEFAULT_RETRY_BASE_SECONDS, "the retry must back off"
    # the refusal is lifted: the next retry converges to the ratio and clears the messages
    h.reconcile("pd")
    assert (h.replicas("llama-prefill"), h.replicas("llama-decode")) == (4, 2)
    st = h.status("pd")
    assert all("message" not in m for m in st["members"])
    assert h.condition("pd", "Ready")["reason"] != "MemberWriteFailed"


def test_inplace_missing_member_is_reported_by_name(h: RSGHarness) -> None:
    started(h, deployment("llama-prefill", 2), rsg("pd", PD, replicas=1))
    h.reconcile("pd")
    ready = h.condition("pd", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "MemberNotFound")
    assert "spec.members[1] (decode)" in ready["message"] and "llama-decode not found" in ready["message"]
    assert h.client.writes == []


def test_invalid_member_kind_names_the_field(h: RSGHarness) -> None:
    bad = rsg("pd", PD, replicas=1)
    bad["spec"]["members"][1]["targetRef"] = {"apiVersion": "example.com/v9", "kind": "Nope", "name": "x"}
    started(h, deployment("llama-prefill", 2), bad)
    h.reconcile("pd")
    ready = h.condition("pd", "Ready")
    assert ready["reason"] == "MemberNotFound"
    assert "spec.members[1].targetRef" in ready["message"] and "does not serve kind Nope" in ready["message"]


def test_member_claimed_by_an_older_elasticscaler_is_a_target_conflict(h: RSGHarness) -> None:
    es = es_scaler("web-es", metrics_trigger(external_metric()), created="2025-01-01T00:00:00Z",
                   target={"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-decode"})
    started(h, es, deployment("llama-prefill", 2), deployment("llama-decode", 1), rsg("pd", PD, replicas=3))
    h.reconcile("pd")
    ready = h.condition("pd", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "TargetConflict")
    assert "member decode" in ready["message"] and "ElasticScaler team/web-es" in ready["message"]
    assert h.client.writes == [], "a conflicting RSG writes nothing"


def test_a_younger_elasticscaler_on_a_member_loses_to_the_rsg(h: RSGHarness) -> None:
    es = es_scaler("late-es", metrics_trigger(external_metric()), created="2027-01-01T00:00:00Z",
                   target={"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama-prefill"})
    started(h, es, deployment("llama-prefill", 2), deployment("llama-decode", 1), rsg("pd", PD, replicas=1))
    h.sync_caches()
    h.es.reconciler.reconcile(Request(NS, "late-es"))
    st = h.api("elasticscalers").get(f"{NS}/late-es")["status"]
    validated = next(c for c in st["conditions"] if c["type"] == "Validated")
    assert (validated["status"], validated["reason"]) == ("False", "TargetConflict")
    assert "ResourceScalingGroup team/pd" in validated["message"]
    h.reconcile("pd")
    assert h.condition("pd", "Ready")["status"] == "True", "the older RSG keeps writing"


def test_a_spec_breaking_a_rule_is_invalid_spec_naming_it(h: RSGHarness) -> None:
    dup = rsg("pd", [("prefill", "llama-prefill", 2), ("prefill", "llama-decode", 1)], replicas=1)
    started(h, deployment("llama-prefill", 2), deployment("llama-decode", 1), dup)
    h.reconcile("pd")
    ready = h.condition("pd", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "members[].name must be unique" in ready["message"]
    assert h.client.writes == []


# ---------------------------------------------------------------------------------- GroupReplication


def replicated(h: RSGHarness, replicas: int, prometheus: dict[str, Any] | None = None) -> RSGHarness:
    return started(h, deployment("llama-prefill", 0), deployment("llama-decode", 0),
                   rsg("pd", PD, replicas=replicas, strategy="GroupReplication", prometheus=prometheus))


def settle_clones(h: RSGHarness) -> None:
    for name in h.clones():
        h.settle(name)


def test_group_replication_creates_whole_groups_of_clones(h: RSGHarness) -> None:
    replicated(h, 2)
    h.reconcile("pd")
    assert h.clones() == ["decode-g0", "decode-g1", "prefill-g0", "prefill-g1"]
    assert [w[2] for w in h.client.writes] == ["prefill-g0", "decode-g0", "prefill-g1", "decode-g1"]
    assert h.replicas("prefill-g1") == 2 and h.replicas("decode-g1") == 1
    assert h.replicas("llama-prefill") == 0, "the template is never written"
    st = h.status("pd")
    assert (st["replicas"], st["selector"]) == (2, "autoscaling.openfuyao.com/rsg=pd")
    assert [g["index"] for g in st["groups"]] == [0, 1]
    settle_clones(h)
    h.reconcile("pd")
    st = h.status("pd")
    assert st["readyReplicas"] == 2 and all(g["ready"] for g in st["groups"])
    assert h.condition("pd", "Ready")["status"] == "True"
    writes = h.reconciler.reporter.writer.writes
    h.reconcile("pd")
    assert h.reconciler.reporter.writer.writes == writes, "an unchanged status was written again"
    assert h.client.count("get", "deployments") == 0, "templates and clones must be read from the caches"


@pytest.mark.parametrize(("prometheus", "loads", "error", "gone", "reason"), [
    (PROM, {0: 9.0, 1: 0.5, 2: 4.0}, None, 1, ("True", "LeastLoaded")),
    (PROM, {}, "Prometheus query failed: HTTP 503", 2, ("False", "QueryFailed")),
    (None, {}, None, 2, ("True", "HighestIndexFirst")),
], ids=["least-loaded-by-prometheus", "query-fails-highest-index", "no-query-highest-index"])
def test_group_replication_scale_down_ranking(h: RSGHarness, prometheus: dict[str, Any] | None,
                                              loads: dict[int, float], error: str | None, gone: int,
                                              reason: tuple[str, str]) -> None:
    replicated(h, 3, prometheus)
    h.reconcile("pd")
    assert len(h.clones()) == 6
    h.loads, h.query_error = loads, error
    h.set_replicas("pd", 2)
    h.client.writes.clear()
    h.reconcile("pd")
    assert h.clones() == sorted(f"{m}-g{i}" for m in ("prefill", "decode") for i in range(3) if i != gone)
    assert h.client.writes == [("delete", "deployments", f"decode-g{gone}"),
                               ("delete", "deployments", f"prefill-g{gone}")]
    cond = h.condition("pd", "ScaleDownRanking")
    assert (cond["status"], cond["reason"]) == reason
    assert f"group {gone}" in cond["message"]
    if error:
        assert "HTTP 503" in cond["message"]
    assert h.status("pd")["replicas"] == 2
    assert h.queries == ([PROM["query"]] if prometheus else [])


def test_group_replication_scales_up_into_the_freed_index(h: RSGHarness) -> None:
    replicated(h, 3, PROM)
    h.reconcile("pd")
    h.loads = {0: 5.0, 1: 0.0, 2: 5.0}
    h.set_replicas("pd", 2)
    h.reconcile("pd")
    h.set_replicas("pd", 3)
    h.reconcile("pd")
    assert h.clones() == sorted(f"{m}-g{i}" for m in ("prefill", "decode") for i in range(3))


def test_group_replication_repairs_a_drifted_or_missing_clone(h: RSGHarness) -> None:
    replicated(h, 1)
    h.reconcile("pd")
    h.api("deployments").delete(f"{NS}/decode-g0")
    obj = h.api("deployments").get(f"{NS}/prefill-g0")
    obj["spec"]["replicas"] = 7
    h.api("deployments").update(obj)
    h.reconcile("pd")
    assert h.replicas("prefill-g0") == 2 and h.replicas("decode-g0") == 1
    assert h.client.count("get", "deployments") == 0, "the drifted clone is read from its cache"


def test_group_replication_failed_create_is_recorded_and_retried(h: RSGHarness) -> None:
    replicated(h, 1)
    h.client.faults[("create", "deployments")] = [refused()]
    res = h.reconcile("pd")
    ready = h.condition("pd", "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "CloneWriteFailed")
    assert "spec.members[0] (prefill)" in ready["message"] and "prefill-g0" in ready["message"]
    assert res.requeue_after == DEFAULT_RETRY_BASE_SECONDS
    h.reconcile("pd")
    assert h.clones() == ["decode-g0", "prefill-g0"]
