"""``SLOIndex``: one informer per kind, missing CRDs, readiness, relists (seed 002 cases).

* a missing JobSLO CRD still syncs (ready)  → test_missing_job_crd_still_ready
* a relist of one kind keeps the other      → test_relist_of_one_kind_keeps_the_other
"""

from __future__ import annotations

import pytest

from escaler.errors import ConnectionFailure, StatusError
from escaler.sloapi.index import (
    CRD_RECHECK_SECONDS,
    PROBE_RETRY_SECONDS,
    WRITE_OVERLAY_SECONDS,
    KindState,
    SLOIndex,
)
from escaler.sloapi.kinds import JOB, LLM
from tests.unit.fakeapi import wait_until
from tests.unit.sloapi_fakes import FakeSLOCluster, job_slo, llm_slo, start_service

# the routes of the tests' clusters, by namespace (a route is a serviceId in a namespace)
CHAT = "/config/namespaces/team-a/chat"
BATCH = "/config/namespaces/team-b/batch"


def _routes(client: object) -> list[tuple[str, str]]:
    resp = client.get("/config")  # type: ignore[attr-defined]
    assert resp.status_code == 200, resp.text
    return [(r["route"], r["kind"]) for r in resp.json()["routes"]]


def test_missing_job_crd_still_ready() -> None:
    cluster = FakeSLOCluster([llm_slo("a", "chat")], present={"job": False})
    with start_service(cluster) as r:
        assert r.index.state(JOB) is KindState.ABSENT
        assert r.client.get("/readyz").json() == {"status": "ok"}
        assert _routes(r.client) == [("chat", "llm")]
        assert r.client.get(BATCH).status_code == 404
        # the CRD is installed with an object; seen at the next check, 60 s later
        cluster.apis["job"].create(job_slo("b", "batch"))
        cluster.present["job"] = True
        probes = cluster.probes
        r.clock.block_until_deadline(r.clock.monotonic() + CRD_RECHECK_SECONDS)
        r.clock.step(CRD_RECHECK_SECONDS - 1)
        assert cluster.probes == probes and r.index.state(JOB) is KindState.ABSENT
        r.clock.step(1)
        wait_until(lambda: r.index.state(JOB) is KindState.PRESENT and r.index.ready(),
                   what="job kind watched")
        wait_until(lambda: len(r.index.entries()) == 2, what="job route indexed")
        assert _routes(r.client) == [("batch", "job"), ("chat", "llm")]


def test_crd_removed_is_indexed_as_empty() -> None:
    cluster = FakeSLOCluster([llm_slo("a", "chat"), job_slo("b", "batch")])
    with start_service(cluster) as r:
        assert _routes(r.client) == [("batch", "job"), ("chat", "llm")]
        cluster.present["job"] = False
        r.clock.block_until_deadline(r.clock.monotonic() + CRD_RECHECK_SECONDS)
        r.clock.step(CRD_RECHECK_SECONDS)
        wait_until(lambda: r.index.state(JOB) is KindState.ABSENT, what="job kind dropped")
        assert _routes(r.client) == [("chat", "llm")]
        assert r.client.get("/readyz").status_code == 200


def test_relist_of_one_kind_keeps_the_other() -> None:
    cluster = FakeSLOCluster([llm_slo("a", "chat"), llm_slo("c", "gone"), job_slo("b", "batch")])
    with start_service(cluster) as r:
        llm_api, job_api = cluster.apis["llm"], cluster.apis["job"]
        job_watches = job_api.watch_calls
        job_lists = job_api.list_calls
        llm_lists = llm_api.list_calls
        # changes the LLM watch never delivers (paused), then history compacted: a 410 and a relist
        llm_api.pause_watches()
        llm_api.delete("team-a/c")
        llm_api.create(llm_slo("d", "new-chat"))
        llm_api.compact()
        llm_api.resume_watches()
        wait_until(lambda: llm_api.list_calls > llm_lists, what="LLM relist")
        wait_until(lambda: {e.route for e in r.index.entries()} == {"chat", "new-chat", "batch"},
                   what="LLM cache replaced by the relist")
        assert _routes(r.client) == [("batch", "job"), ("chat", "llm"), ("new-chat", "llm")]
        # the job kind was neither relisted nor re-watched
        assert (job_api.list_calls, job_api.watch_calls) == (job_lists, job_watches)
        assert r.client.get(BATCH).status_code == 200


def test_not_ready_until_present_kinds_sync() -> None:
    cluster = FakeSLOCluster([llm_slo("a", "chat")])
    # the first LLM list fails: the reflector backs off on the fake clock, the cache is not synced
    cluster.apis["llm"].fail_next_list(StatusError(500, "InternalError", "etcd"))
    with start_service(cluster, wait_ready=False) as r:
        # both kinds probed: check_once probes LLM, then the job kind; until the second probe
        # answers, the reason is "waiting to learn whether JobSLORequirement is served"
        wait_until(lambda: (r.index.state(LLM), r.index.state(JOB)) == (KindState.PRESENT, KindState.PRESENT),
                   what="both kinds probed")
        resp = r.client.get("/readyz")
        assert resp.status_code == 503
        assert resp.json()["error"]["code"] == "unavailable"
        assert "LLMSLORequirement" in resp.json()["error"]["message"]
        # the routes answer 503 too (a route not seen yet is not a 404)
        assert r.client.get(CHAT).status_code == 503
        assert r.client.get("/healthz").status_code == 200
        r.clock.block_until_waiters(2)
        r.clock.step(2)
        wait_until(r.index.ready, what="ready after the retried list")
        assert r.client.get("/readyz").status_code == 200
        assert r.client.get(CHAT).status_code == 200


@pytest.mark.parametrize("error", [StatusError(403, "Forbidden", "no RBAC"), ConnectionFailure("refused")],
                         ids=["403", "unreachable"])
def test_probe_failure_keeps_kind_unknown_and_retries(error: Exception) -> None:
    cluster = FakeSLOCluster([llm_slo("a", "chat"), job_slo("b", "batch")], present={"job": error})
    with start_service(cluster, wait_ready=False) as r:
        wait_until(lambda: r.index.state(LLM) is KindState.PRESENT, what="LLM probed")
        assert r.index.state(JOB) is KindState.UNKNOWN
        assert not r.index.ready()
        assert "JobSLORequirement" in (r.index.not_ready_reason() or "")
        # the failed probe parks the loop for the retry; only then does the CRD appear (flipping it
        # earlier races the first probe, which then succeeds and parks for the 60 s recheck)
        r.clock.block_until_deadline(r.clock.monotonic() + PROBE_RETRY_SECONDS)
        cluster.present["job"] = True
        r.clock.step(PROBE_RETRY_SECONDS)
        wait_until(r.index.ready, what="ready after the retried probe")
        assert _routes(r.client) == [("batch", "job"), ("chat", "llm")]


@pytest.mark.parametrize("kwargs, message", [
    ({"recheck_seconds": 0}, "SLOIndex.recheck_seconds: must be > 0"),
    ({"retry_seconds": -1}, "SLOIndex.retry_seconds: must be > 0"),
    ({"kinds": ()}, "SLOIndex.kinds: must name at least one kind"),
], ids=["recheck", "retry", "kinds"])
def test_constructor_validation(kwargs: dict[str, object], message: str) -> None:
    cluster = FakeSLOCluster()
    with pytest.raises(ValueError, match=message):
        SLOIndex(lambda k: cluster.informer_for(k, None), cluster.probe, **kwargs)  # type: ignore[arg-type]


# ---- read your writes -------------------------------------------------------------------------

def _max_bound(client: object, route: str) -> object:
    routes = client.get("/config").json()["routes"]  # type: ignore[attr-defined]
    return next(r["bounds"]["max"] for r in routes if r["route"] == route)


def test_a_listing_right_after_a_write_shows_it_before_the_watch_does() -> None:
    cluster = FakeSLOCluster([llm_slo("a", "chat", bounds={"min": {"type": "replica", "value": 1},
                                                           "max": {"type": "replica", "value": 8}})])
    with start_service(cluster) as r:
        api = cluster.apis["llm"]
        api.pause_watches()  # the watch has not delivered the write yet
        resp = r.client.put(CHAT, json={"bounds": {"max": {"type": "replica", "value": 12}}})
        assert resp.status_code == 200, resp.text
        assert _max_bound(r.client, "chat") == {"type": "replica", "value": 12}
        assert r.client.get(CHAT).json()["bounds"]["max"]["value"] == 12
        # someone else writes after us, and the watch delivers both: the newer copy wins
        current = api.get("team-a/a")
        assert current is not None
        newer = {**current, "spec": {**current["spec"], "bounds": {
            "min": {"type": "replica", "value": 1}, "max": {"type": "replica", "value": 20}}}}
        api.update(newer)
        api.resume_watches()
        wait_until(lambda: _max_bound(r.client, "chat") == {"type": "replica", "value": 20},
                   what="the informer's newer copy")
        assert r.index._written == {}  # caught up: the written copy was dropped


def test_a_written_copy_expires_when_the_watch_never_delivers_it() -> None:
    cluster = FakeSLOCluster([llm_slo("a", "chat", bounds={"min": {"type": "replica", "value": 1},
                                                           "max": {"type": "replica", "value": 8}})])
    with start_service(cluster) as r:
        cluster.apis["llm"].pause_watches()
        assert r.client.put(CHAT, json={"bounds": {"max": {"type": "replica", "value": 12}}}
                            ).status_code == 200
        r.clock.step(WRITE_OVERLAY_SECONDS - 1)
        assert _max_bound(r.client, "chat") == {"type": "replica", "value": 12}
        r.clock.step(1)
        assert _max_bound(r.client, "chat") == {"type": "replica", "value": 8}  # the cache, as it is
