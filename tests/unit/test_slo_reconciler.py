"""The SLO decision engine's reconcilers on a manager on fakes (``es_fakes.Harness`` + ``setup_slo``),
on a FakeClock: a decision written once and requeued at the poll, no read and no write between polls,
drift not written, a significant change written, a missing signal holding the last decision, an
invalid spec naming the field, a serviceId shared across kinds raised and cleared, a target not
found, the job rule with and without a target, reads off the workers (pending → woken → consumed),
no Prometheus configured, and zero GETs per reconcile (the target comes from the caches)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import NS, Harness, deployment
from executor_fakes import ManualExecutor
from fakeapi import wait_until

from escaler.reconcilers.kit.setup import cache_reader
from escaler.reconcilers.kit.watchkey import NOT_SYNCED_RETRY_SECONDS
from escaler.reconcilers.slo import SLOEngine, setup_slo
from escaler.reconcilers.slo.setup import NO_PROMETHEUS, _ServiceIdChanged, _sharers
from escaler.runtime import Request, Result
from escaler.runtime.executor import InlineExecutor
from escaler.signals.promqlscope import PromQLScope
from escaler.signals.sample import Sample
from escaler.targets.registry import default_registry

LLM, JOB = "LLMSLORequirement", "JobSLORequirement"
TTFT_Q, OTPS_Q, DEPTH_Q = "ttft_p90_ms", "otps_avg", "queue_depth"
POLL = 30.0


def llm_req(name: str = "chat", *, service_id: str = "chat-llama", target: str = "web",
            bounds: dict[str, Any] | None = None, generation: int = 1, otps: bool = True,
            **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceId": service_id,
                            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                            "ttft": {"targetMs": 800, "percentile": 90, "promql": TTFT_Q}, **extra}
    if otps:
        spec["otps"] = {"target": 20, "promql": OTPS_Q}
    if bounds is not None:
        spec["bounds"] = bounds
    return {"apiVersion": "llm.escaler.io/v1alpha1", "kind": LLM,
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": generation},
            "spec": spec}


def job_req(name: str = "batch", *, service_id: str = "batch-embed", target: str | None = None,
            bounds: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceId": service_id, "queue": {"maxDepth": 200, "promql": DEPTH_Q},
                            "concurrencyPerReplica": 16}
    if target is not None:
        spec["targetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}
    if bounds is not None:
        spec["bounds"] = bounds
    return {"apiVersion": "llm.escaler.io/v1alpha1", "kind": JOB,
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1}, "spec": spec}


class Rig:
    """A Harness with the SLO engine on the same manager and clock; signals from ``answers``."""

    def __init__(self, *, outbound: Any = None, query: Any = "scripted", endpoint: str = "",
                 api_server: Any = None, promql_scope: PromQLScope | None = None) -> None:
        """``promql_scope`` None: queries unconfined (confinement: test_promql_scope.py)."""
        self.h = Harness()
        # promql → value, or an error message
        self.answers: dict[str, float | str] = {}
        self.queries: list[str] = []
        mapper = self.h.mgr.mapper
        self.engine: SLOEngine = setup_slo(
            self.h.mgr, client=self.h.client, clock=self.h.clock, poll_interval=POLL,
            prometheus_endpoint=endpoint,
            handlers=lambda w: default_registry(self.h.client,  # type: ignore[arg-type]
                                                cache_get=cache_reader(mapper, w)),
            outbound=outbound if outbound is not None else (lambda _name: InlineExecutor(self.h.clock)),
            query=self._query if query == "scripted" else query, api_server=api_server,
            promql_scope=promql_scope)

    def _query(self, promql: str) -> Sample:
        self.queries.append(promql)
        v = self.answers.get(promql, "query returned no series")
        return Sample.fail(v) if isinstance(v, str) else Sample(value=float(v))

    def start(self) -> None:
        self.h.start()
        for c in self.engine.controllers.values():
            c.watches.start(c.controller.queue)
            c.outbound.start(c.controller.queue)

    def reconcile(self, kind: str = LLM, name: str = "chat") -> Result:
        for r in ("llmslorequirements", "jobslorequirements", "deployments"):
            self.h.wait_synced(r)
        rec = self.engine.controllers[kind].reconciler
        result = rec.reconcile(Request(NS, name))
        if result == Result(requeue_after=NOT_SYNCED_RETRY_SECONDS):
            self.h.wait_listed()
            result = rec.reconcile(Request(NS, name))
        return result

    def api(self, kind: str = LLM) -> Any:
        return self.h.api("llmslorequirements" if kind == LLM else "jobslorequirements")

    def status(self, kind: str = LLM, name: str = "chat") -> dict[str, Any]:
        obj = self.api(kind).get(f"{NS}/{name}")
        assert obj is not None
        return dict(obj.get("status") or {})

    def ready(self, kind: str = LLM, name: str = "chat") -> tuple[str, str, str]:
        c = next(c for c in self.status(kind, name)["conditions"] if c["type"] == "Ready")
        return c["status"], c["reason"], c["message"]

    def decision(self, kind: str = LLM, name: str = "chat") -> dict[str, Any]:
        return dict(self.status(kind, name)["decision"])

    def writes(self, kind: str = LLM) -> int:
        return self.h.client.count("patch", ("llmslorequirements" if kind == LLM else "jobslorequirements")
                                   + "/status")

    def served(self, kind: str = LLM, name: str = "chat") -> Any:
        from escaler.reconcilers.slo.decisions import Owner
        return self.engine.book.served(Owner(kind, NS, name, f"uid-{name}"))

    def update_spec(self, obj: dict[str, Any], kind: str = LLM) -> None:
        current = self.api(kind).get(f"{NS}/{obj['metadata']['name']}")
        assert current is not None
        new = copy.deepcopy(obj)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        new["status"] = current.get("status")
        self.api(kind).update(new)

    def queued(self, kind: str = LLM) -> set[Request]:
        q = self.engine.controllers[kind].controller.queue
        out: set[Request] = set()
        while len(q):
            item = q.get()
            out.add(item)
            q.done(item)
        return out

    def wait_queued(self, req: Request, kind: str = LLM) -> None:
        """Wait (real time) until ``req`` is enqueued: a watch event reaches the queue on the
        informer's handler thread, after the cache shows it (what ``wait_synced`` waits for)."""
        seen: set[Request] = set()

        def arrived() -> bool:
            seen.update(self.queued(kind))
            return req in seen

        wait_until(arrived, what=f"{req} enqueued")


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    r.h.api("deployments").create(deployment("web", 4))
    r.start()
    try:
        yield r
    finally:
        r.h.stop()


def test_decision_written_once_requeued_at_the_poll_and_read_from_caches(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    gets = rig.h.client.count("get", "deployments")
    assert rig.reconcile() == Result(requeue_after=POLL)
    d = rig.decision()
    assert d["replicas"] == 6 and "scale up 4 -> 6" in d["reason"]
    assert d["signals"] == {"currentReplicas": 4, "ttftMs": 1200.0, "ttftTargetMs": 800.0, "otps": 25.0,
                            "otpsTarget": 20.0}
    assert rig.ready()[:2] == ("True", "Sized")
    assert rig.status()["observedGeneration"] == 1
    assert rig.writes() == 1 and len(rig.queries) == 2
    assert rig.h.client.count("get", "deployments") == gets  # the target came from the cache
    assert rig.served().body["replicas"] == 6
    # between polls: no read, no write, requeued for what is left of the interval
    rig.h.clock.step(10)
    assert rig.reconcile() == Result(requeue_after=20.0)
    assert rig.writes() == 1 and len(rig.queries) == 2


def test_replicas_still_starting_are_not_multiplied_again() -> None:
    """Regression: with a slow cold start (LLM servers load weights for minutes) every poll saw the
    TTFT still high and multiplied the *ordered* count again, up to bounds.max (found by the policy
    simulator, docs/simulator.md). The ready replicas are what the signal measures."""
    r = Rig()
    r.h.api("deployments").create(deployment("web", 6, ready=2))
    r.start()
    try:
        r.answers.update({TTFT_Q: 2400.0, OTPS_Q: 25.0})
        r.api().create(llm_req())
        r.reconcile()
        d = r.decision()
        assert d["replicas"] == 6, d
        assert "with 2 of 6 replicas ready: holding 6 while 4 start" in d["reason"]
    finally:
        r.h.stop()


def test_drift_is_not_written_a_significant_change_is(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    written_at = rig.decision()["time"]
    # next poll: TTFT wobbles by 1 % (same decision): read, served live, not written
    rig.h.clock.step(POLL)
    rig.answers[TTFT_Q] = 1190.0
    assert rig.reconcile() == Result(requeue_after=POLL)
    assert len(rig.queries) == 4 and rig.writes() == 1
    assert rig.decision()["time"] == written_at
    assert rig.served().body["signals"]["ttftMs"] == 1190.0
    # a worse TTFT: more replicas, written at once
    rig.h.clock.step(POLL)
    rig.answers[TTFT_Q] = 2000.0
    rig.reconcile()
    assert rig.decision()["replicas"] == 10 and rig.writes() == 2


def test_missing_signal_holds_the_last_decision_and_says_so(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    rig.h.clock.step(POLL)
    rig.answers[TTFT_Q] = "Prometheus query failed: http://prom:9090: HTTP 503, 22 bytes"
    rig.reconcile()
    assert rig.decision()["replicas"] == 6
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "SignalsMissing")
    assert "ttftMs: Prometheus query failed" in message
    assert "holding the last decision (6 replicas)" in message
    assert rig.served().body["replicas"] == 6
    # recovered: sized again
    rig.h.clock.step(POLL)
    rig.answers[TTFT_Q] = 790.0
    rig.reconcile()
    assert rig.ready()[:2] == ("True", "Sized")


@pytest.mark.parametrize(("spec", "words"), [
    ({"deployType": "aggregated", "bounds": {"min": {"type": "pdengine", "value": 2},
                                             "max": {"type": "pdengine", "value": 4}}},
     "spec.bounds: bounds of type pdengine require deployType pd"),
    ({"deployType": "pd", "bounds": {"min": {"type": "pdengine", "value": 0},
                                     "max": {"type": "pdengine", "value": 1}}},
     "spec.bounds.max.value: bounds.max.value of type pdengine must not be 1"),
    ({"bounds": {"min": {"type": "replica", "value": 5}, "max": {"type": "replica", "value": 2}}},
     "spec.bounds.min.value: bounds.min.value must be less than or equal to bounds.max.value"),
    ({"bounds": {"min": {"type": "replica", "value": 1}, "max": {"type": "concurrency", "value": 64}}},
     "spec.bounds.max.type: bounds.min.type and bounds.max.type must be the same"),
    ({"bounds": {"min": {"type": "replica", "value": -1}, "max": {"type": "replica", "value": 2}}},
     "spec.bounds.min.value: Input should be greater than or equal to 0"),
], ids=["pdengine-without-pd", "pdengine-max-1", "min-above-max", "mixed-types", "negative"])
def test_invalid_spec_names_the_field_and_the_route_says_why(rig: Rig, spec: dict[str, Any],
                                                             words: str) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    obj = llm_req()
    obj["spec"].update(spec)
    rig.api().create(obj)  # the fake API has no CEL: as an object stored before a rule existed
    assert rig.reconcile() == Result()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSpec") and words in message
    assert rig.queries == []
    assert rig.served().body is None and words in rig.served().problem


def test_service_id_shared_across_kinds_is_raised_and_cleared(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0, DEPTH_Q: 100.0})
    rig.api().create(llm_req(service_id="shared"))
    rig.reconcile()
    assert rig.ready()[:2] == ("True", "Sized")
    job = job_req(service_id="shared")
    rig.api(JOB).create(job)
    rig.h.wait_synced("jobslorequirements")
    # the job's creation wakes the LLM requirement with the same serviceId (an index, no scan)
    llm_sharers = _sharers(rig.engine.controllers[LLM].informer.indexer)
    assert llm_sharers(job) == [Request(NS, "chat")]
    assert _ServiceIdChanged().update(job, job_req(service_id="other"))
    assert not _ServiceIdChanged().update(job, job_req(service_id="shared", target="web"))
    rig.reconcile()
    rig.reconcile(JOB, "batch")
    for kind, name in ((LLM, "chat"), (JOB, "batch")):
        status, reason, message = rig.ready(kind, name)
        assert (status, reason) == ("False", "ServiceIdConflict")
        assert "serviceId shared is defined by more than one SLO requirement CRs" in message
        assert "JobSLORequirement team/batch" in message and "LLMSLORequirement team/chat" in message
    # the decision is still computed
    assert rig.decision()["replicas"] == 6
    rig.api(JOB).delete(f"{NS}/batch")
    rig.h.wait_synced("jobslorequirements")
    rig.reconcile()
    assert rig.ready()[:2] == ("True", "Sized")


def test_target_not_found_then_created_wakes_the_requirement(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req(target="later"))
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "TargetNotFound") and "Deployment team/later not found" in message
    assert "decision" not in rig.status()
    assert "no decision yet" in rig.served().problem
    rig.queued()
    rig.h.api("deployments").create(deployment("later", 2))
    rig.h.wait_synced("deployments")
    rig.wait_queued(Request(NS, "chat"))
    rig.reconcile()
    assert rig.decision()["replicas"] == 3 and rig.ready()[:2] == ("True", "Sized")


def test_a_replica_write_on_the_target_wakes_the_requirement(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 800.0, OTPS_Q: 20.0})
    rig.api().create(llm_req())
    rig.reconcile()
    rig.queued()
    rig.h.api("deployments").update({**deployment("web", 6), "metadata": {
        **deployment("web", 6)["metadata"],
        "resourceVersion": rig.h.api("deployments").get(f"{NS}/web")["metadata"]["resourceVersion"]}})
    rig.h.wait_synced("deployments")
    rig.wait_queued(Request(NS, "chat"))
    rig.h.clock.step(5)
    rig.reconcile()  # no new read (not due): the cached readings with the new count
    assert len(rig.queries) == 2
    assert rig.served().body["signals"]["currentReplicas"] == 6


def test_a_spec_change_reads_again_at_once(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0, "other_ttft": 400.0})
    rig.api().create(llm_req())
    rig.reconcile()
    obj = llm_req(generation=2, otps=False)
    obj["spec"]["ttft"]["promql"] = "other_ttft"
    rig.update_spec(obj)
    rig.h.clock.step(1)
    rig.reconcile()
    assert rig.queries[-1] == "other_ttft"
    assert rig.status()["observedGeneration"] == 2
    assert rig.decision()["replicas"] == 3  # ceil(4 x 0.5 / 0.9)


@pytest.mark.parametrize(("target", "bounds", "depths", "want"), [
    (None, None, [340.0, 100.0, 0.0], [2, 1, 0]),
    ("web", None, [340.0], [7]),
    (None, {"min": {"type": "concurrency", "value": 20}, "max": {"type": "replica", "value": 4}},
     [0.0, 5000.0], [2, 4]),
], ids=["no-target-own-count", "target-count", "concurrency-min-replica-max"])
def test_job_rule(rig: Rig, target: str | None, bounds: dict[str, Any] | None, depths: list[float],
                  want: list[int]) -> None:
    rig.api(JOB).create(job_req(target=target, bounds=bounds))
    got = []
    for depth in depths:
        rig.answers[DEPTH_Q] = depth
        rig.reconcile(JOB, "batch")
        got.append(rig.decision(JOB, "batch")["replicas"])
        rig.h.clock.step(POLL)
    assert got == want
    assert rig.ready(JOB, "batch")[:2] == ("True", "Sized")


def test_reads_run_off_the_workers_and_their_completion_wakes_the_requirement() -> None:
    manual: dict[str, ManualExecutor] = {}

    def outbound(name: str) -> ManualExecutor:
        manual[name] = ManualExecutor()
        return manual[name]

    r = Rig(outbound=outbound)
    r.h.api("deployments").create(deployment("web", 4))
    r.start()
    try:
        r.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
        r.api().create(llm_req())
        assert r.reconcile() == Result()  # submitted; nothing decided, nothing written
        assert r.writes() == 0 and r.queries == []
        ex = manual["llmslorequirement"]
        key = next(iter(ex.jobs))
        assert ex.jobs[key].group == NS
        r.queued()
        ex.complete(key)
        assert Request(NS, "chat") in r.queued()
        assert r.reconcile() == Result(requeue_after=POLL)
        assert r.decision()["replicas"] == 6
        # at the next poll a read is submitted and the held readings serve meanwhile (no timed requeue)
        r.h.clock.step(POLL)
        assert r.reconcile() == Result()
        assert ex.pending(key)
        # a full namespace queue before any reading: retried later, nothing decided
        ex.full = True
        r.api().create(llm_req("other", service_id="other"))
        assert r.reconcile(LLM, "other").requeue_after == 5.0
    finally:
        r.h.stop()


def test_without_prometheus_every_requirement_says_which_flag_is_missing() -> None:
    r = Rig(query=None)
    r.h.api("deployments").create(deployment("web", 4))
    r.start()
    try:
        r.api().create(llm_req())
        r.reconcile()
        status, reason, message = r.ready()
        assert (status, reason) == ("False", "SignalsMissing")
        assert NO_PROMETHEUS in message and "--slo-prometheus-endpoint" in message
        assert r.decision()["replicas"] == 4  # no decision yet: the current count
    finally:
        r.h.stop()


def test_a_bad_prometheus_endpoint_is_refused_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--slo-prometheus-endpoint 'ftp://x': "):
        Rig(query=None, endpoint="ftp://x")


def test_deleted_requirement_is_forgotten(rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rig.reconcile()
    assert len(rig.engine.book) == 1
    rig.api().delete(f"{NS}/chat")
    assert rig.reconcile() == Result()
    assert len(rig.engine.book) == 0
    assert rig.engine.controllers[LLM].watches.held() == {}


def test_a_query_that_raises_is_a_missing_signal_not_a_failed_sync() -> None:
    def boom(promql: str) -> Sample:
        raise RuntimeError(f"no route to {promql}")

    r = Rig(query=boom)
    r.h.api("deployments").create(deployment("web", 4))
    r.start()
    try:
        r.api().create(llm_req())
        assert r.reconcile() == Result(requeue_after=POLL)
        status, reason, message = r.ready()
        assert (status, reason) == ("False", "SignalsMissing")
        assert f"ttftMs: query failed: RuntimeError: no route to {TTFT_Q}" in message
    finally:
        r.h.stop()


def test_the_route_is_never_behind_the_status_it_wrote(rig: Rig) -> None:
    """Whoever sees a status has the same decision from ``GET /decisions``: the book is updated before
    the status is written (the other order let a reader of the status get the previous answer)."""
    rig.answers.update({TTFT_Q: 1200.0, OTPS_Q: 25.0})
    rig.api().create(llm_req())
    rec = rig.engine.controllers[LLM].reconciler
    seen: list[Any] = []
    write = rec.writer.write

    def spying(mapping: Any, obj: Any, status: dict[str, Any]) -> None:
        served = rig.served()
        seen.append((status["decision"]["reason"], served.body.get("reason") if served else None))
        write(mapping, obj, status)

    rec.writer.write = spying  # type: ignore[method-assign]
    rig.reconcile()
    rig.h.clock.step(POLL)
    rig.answers[TTFT_Q] = "Prometheus query failed: http://prom:9090: HTTP 503, 22 bytes"
    rig.reconcile()
    assert len(seen) == 2
    assert all(wrote == served for wrote, served in seen), seen


def test_the_inflight_signal_is_read_and_keeps_a_loaded_service_from_a_latency_only_scale_down(
        rig: Rig) -> None:
    rig.answers.update({TTFT_Q: 200.0, OTPS_Q: 40.0, "inflight_total": 100.0})
    rig.api().create(llm_req(concurrencyPerReplica=32, inflight={"promql": "inflight_total"}))
    rig.reconcile()
    assert "inflight_total" in rig.queries
    d = rig.decision()
    # TTFT and OTPS alone: ceil(4 x 0.5 / 0.9) = 3; 100 in flight on 4 x 32 (0.78) keeps 4
    assert d["replicas"] == 4, d
    assert d["signals"]["inflightPerReplica"] == 25.0 and d["signals"]["concurrencyPerReplica"] == 32
    assert "in-flight requests per serving replica 25 vs target 32" in d["reason"]
    # the load leaves: sized down to where it fits
    rig.h.clock.step(POLL)
    rig.answers["inflight_total"] = 20.0
    rig.reconcile()
    assert rig.decision()["replicas"] == 3  # TTFT/OTPS ratio 0.5 is now the worst: ceil(4 x 0.5 / 0.9)


def test_a_bad_inflight_spec_names_the_field(rig: Rig) -> None:
    rig.api().create(llm_req(inflight={"promql": ""}))
    rig.reconcile()
    status, reason, message = rig.ready()
    assert (status, reason) == ("False", "InvalidSpec")
    assert "spec.inflight.promql: String should have at least 1 character" in message
