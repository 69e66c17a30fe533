"""``spec.scaleDown.podDeletionCost``: before a Deployment scale-down, mark the idle pods to go first.

The ``costs`` step of the ElasticScaler reconciler, between ``decide`` and ``write``
(``DeletionCoster.before_write``). It acts only when all of these hold:

* the scaler sets ``scaleDown.podDeletionCost`` and its target is a Deployment (``apps``) — the
  ReplicaSet controller is what reads ``controller.kubernetes.io/pod-deletion-cost``;
* the pipeline's decision is a write that lowers the count *now* (``escaler.scaling.deletioncost.
  removals``): a scale-down held by a guard or kept by the stabilization window is not a write, so
  nothing is queried or patched; Advisory mode never writes, so it never patches either;
* this manager may write (the fence), and the write would go out (not the cached target version
  the last write already went out from).

Then, in order:

1. **Read** the per-pod values (``MetricsCollector.pod_values``: the Prometheus query through the
   same outbound client as ExternalServer metrics) on the outbound executor, never on the reconcile
   worker: the sync that starts the read returns a quiet hold (nothing written, not even the
   replicas) and the read's completion wakes the scaler, whose next sync decides again and finds
   the result — consumed only by the same scaler object and spec (uid, generation) and only while
   it is at most ``MAX_READ_AGE_SECONDS`` old. One read per scaler at a time. The scale-down is
   delayed by one query (bounded by its ``timeoutSeconds``), and a scaler that never scales down
   never queries.
2. **Rank** (``escaler.scaling.deletioncost.plan``, pure) the target's pods — read from the
   namespace's pod cache the reconciler already holds (``ROLE_PODS``; the scaler asks for it while it
   has this policy), selected by the target's selector: no list or watch per scaler.
3. **Patch** only the pods whose annotation changes (merge patches with the pod's uid as
   precondition, through the manager's fenced client), at most
   ``escaler.scaling.deletioncost.MAX_PATCHES_PER_WRITE``; then the reconciler writes the replicas.

**Never blocks the scale-down.** A failed or refused query, a pod cache that cannot be read, a
patch that fails, more patches than the bound: the scale-down goes ahead in the ReplicaSet
controller's own order, and a Warning event ``DeletionCostSkipped`` says why. A successful
marking is a Normal event ``DeletionCostSet`` naming the pods, their values and costs (what
``escaler explain`` shows under its write step). Events are deduplicated by the recorder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from escaler.api.elasticscaler import ElasticScaler, PodDeletionCost, PodDeletionCostPrometheus
from escaler.clock import Clock
from escaler.errors import ConnectionFailure, StatusError
from escaler.reconcilers.kit.ports import Mapper, ObjectRef
from escaler.reconcilers.kit.sync import Hold, Sync
from escaler.reconcilers.kit.targetread import Target
from escaler.reconcilers.kit.watchindex import WatchIndex
from escaler.reconcilers.kit.watchkey import NOT_SYNCED_RETRY_SECONDS, watch_key
from escaler.runtime.executor import Executor, Finished, Submitted
from escaler.runtime.types import Request
from escaler.scaling.conditions import EventValue
from escaler.scaling.deletioncost import (
    ANNOTATION,
    EVENT_DELETION_COST_SET,
    EVENT_DELETION_COST_SKIPPED,
    Plan,
    plan,
    pod_view,
    removals,
)
from escaler.scaling.pipeline import Decision
from escaler.scaling.text import cap_text
from escaler.signals.podvalues import PodValues
from escaler.targets.pods import select_pods

__all__ = ["EVENT_DELETION_COST_SET", "EVENT_DELETION_COST_SKIPPED", "MAX_READ_AGE_SECONDS", "DeletionCoster",
           "PodPatcher", "PodValueReader", "deletion_cost_of", "read_key"]

_log = logging.getLogger(__name__)

# a finished per-pod read older than this (monotonic seconds since it was asked for) is read again
MAX_READ_AGE_SECONDS = 30.0
_PODS = ObjectRef("v1", "Pod", "")
_SCALE_DOWN_IN_CONTROLLER_ORDER = "the scale-down goes ahead in the ReplicaSet controller's own order"


class PodValueReader(Protocol):
    """Reads the per-pod values (``MetricsCollector`` satisfies it)."""

    def pod_values(self, namespace: str, source: PodDeletionCostPrometheus) -> PodValues: ...


class PodPatcher(Protocol):
    """Patches a pod (``escaler.kube.DynamicClient`` satisfies it; the manager's is fenced)."""

    def patch(self, m: Any, name: str, patch: Any, namespace: str | None = None,
              patch_type: Any = "merge") -> Mapping[str, Any]: ...


def read_key(namespace: str, name: str) -> tuple[str, str, str]:
    """The outbound executor's key of a scaler's per-pod read (one in flight per scaler)."""
    return ("deletioncost", namespace, name)


def deletion_cost_of(scaler: ElasticScaler) -> PodDeletionCost | None:
    """The scaler's ``scaleDown.podDeletionCost``, or None."""
    sd = scaler.spec.scale_down
    return None if sd is None else sd.pod_deletion_cost


class DeletionCoster:
    """See the module docstring. Stateless apart from the executor's per-scaler read."""

    def __init__(self, reader: PodValueReader | None, patcher: PodPatcher | None, mapper: Mapper,
                 watches: WatchIndex, executor: Executor, clock: Clock,
                 emit: Callable[[Sync, list[EventValue]], None]) -> None:
        # reads the values; None = none configured (every scale-down: DeletionCostSkipped)
        self._reader = reader
        # pod patches (the manager's fenced client); None = none configured (likewise)
        self._patcher = patcher
        # the pod cache's key
        self._mapper = mapper
        # the namespace pod caches the reconciler holds
        self._watches = watches
        # runs the reads off the reconcile worker (the reconciler's outbound executor)
        self._executor = executor
        # monotonic age of a finished read
        self._clock = clock
        # records the events (the reconciler's reporter)
        self._emit = emit

    def before_write(self, sync: Sync, scaler: ElasticScaler, target: Target, decision: Decision,
                     *, may_write: Callable[[], bool], wrote_from: str = "") -> Hold | None:
        """None: go on and write (costs set, or not needed, or skipped); a quiet hold: the read is in
        flight and its completion wakes the scaler."""
        policy = deletion_cost_of(scaler)
        remove = removals(decision.write, decision.current, decision.desired)
        version = target.snapshot.resource_version
        if (policy is None or remove <= 0 or not _is_deployment(target.ref) or not may_write()
                or (version and version == wrote_from)):
            return None
        ns, key = scaler.namespace, read_key(scaler.namespace, scaler.name)
        pods = self._watches.listed(watch_key(self._mapper, ns, _PODS))
        if pods is None:
            return Hold(quiet=True, requeue=NOT_SYNCED_RETRY_SECONDS)  # the pod cache lists soon
        owner = (scaler.metadata.uid or "", scaler.metadata.generation or 0)
        fin = self._fresh(key, owner)
        if fin is None:
            if self._executor.pending(key):
                return Hold(quiet=True)
            if self._reader is None or self._patcher is None:
                self._skipped(sync, decision, "this manager has no per-pod value reader or pod patcher")
                return None
            reader, source = self._reader, policy.prometheus

            def read() -> PodValues:
                return reader.pod_values(ns, source)

            tag = (*owner, self._clock.monotonic())  # who asked, and when (the result's age)
            if self._executor.submit(key, ns, tag, read, Request(ns, scaler.name)) == Submitted.FULL:
                self._skipped(sync, decision, f"too many outbound reads are queued in namespace {ns}")
                return None
            fin = self._fresh(key, owner)  # an inline executor has finished already
            if fin is None:
                return Hold(quiet=True)
        values = fin.value if isinstance(fin.value, PodValues) else \
            PodValues.fail(f"the per-pod query failed: {fin.error or 'no result'}")
        if values.error is not None:
            self._skipped(sync, decision, f"no per-pod values: {values.error}")
            return None
        mine = select_pods(pods, target.snapshot.selector)
        views = [v for v in (pod_view(p) for p in mine) if v is not None]
        self._apply(sync, decision, ns, mine, plan(views, values.values, remove), values)
        return None

    def forget(self, namespace: str, name: str) -> None:
        """The scaler is gone: drop its queued read and any result."""
        self._executor.discard(read_key(namespace, name))

    def _fresh(self, key: tuple[str, str, str], owner: tuple[str, int]) -> Finished | None:
        """The finished read of this scaler object and spec, asked for at most MAX_READ_AGE_SECONDS
        ago; anything else is dropped."""
        fin = self._executor.take(key)
        tag = fin.tag if fin is not None else None
        if not isinstance(tag, tuple) or len(tag) != 3 or tag[:2] != owner:
            return None
        return fin if self._clock.monotonic() - float(tag[2]) <= MAX_READ_AGE_SECONDS else None

    def _apply(self, sync: Sync, decision: Decision, ns: str, pods: Sequence[Mapping[str, Any]], p: Plan,
               values: PodValues) -> None:
        head = f"before scaling {decision.current} -> {decision.desired}"
        if p.skipped is not None:
            self._skipped(sync, decision, p.skipped)
            return
        assert self._patcher is not None  # before_write checked
        uids = {str(m.get("name")): m.get("uid") for m in (o.get("metadata") or {} for o in pods)}
        failed: list[str] = []
        for patch in p.patches:
            value = None if patch.cost is None else str(patch.cost)
            meta: dict[str, Any] = {"annotations": {ANNOTATION: value}}
            if uids.get(patch.pod):
                meta["uid"] = uids[patch.pod]  # a precondition: never a pod recreated under that name
            try:
                self._patcher.patch(("v1", "Pod"), patch.pod, {"metadata": meta}, namespace=ns,
                                    patch_type="merge")
            except (StatusError, ConnectionFailure, OSError, ValueError) as err:
                _log.warning("patching pod %s/%s with %s failed: %s", ns, patch.pod, ANNOTATION, err)
                failed.append(f"{patch.pod}: {err}")
        note = p.describe()
        if values.unlabelled:
            note += f"; {values.unlabelled} samples without the pod label were skipped"
        if failed:
            self._skipped(sync, decision, f"{len(failed)} of {len(p.patches)} pod patches failed "
                                          f"({'; '.join(failed)}); set: {note}")
            return
        self._emit(sync, [EventValue("Normal", EVENT_DELETION_COST_SET, cap_text(f"{head}: {note}"))])

    def _skipped(self, sync: Sync, decision: Decision, why: str) -> None:
        note = (f"before scaling {decision.current} -> {decision.desired}: pod deletion cost not set "
                f"({why}); {_SCALE_DOWN_IN_CONTROLLER_ORDER}")
        self._emit(sync, [EventValue("Warning", EVENT_DELETION_COST_SKIPPED, cap_text(note))])


def _is_deployment(ref: ObjectRef) -> bool:
    return ref.kind == "Deployment" and ref.group == "apps"
