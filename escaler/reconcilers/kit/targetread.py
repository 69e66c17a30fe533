"""Reading and writing a scaler's target, shared by every scaler kind that writes a workload
(ElasticScaler, LLMScaler): the ``read`` and ``write`` steps of their reconcilers.

``TargetReader.read(sync, namespace, ref, reads_pods=...)`` returns a ``Target`` or a ``Hold``:

* first the target's *kind*, from discovery alone (``kind``): it must be namespaced and have a
  handler or a ``scale`` subresource (``HandlerRegistry.target_problem``), else
  AbleToScale=False/InvalidSpec (an unparsable apiVersion too) and no watch at all — nor the one an
  earlier spec held; a kind the API server does not serve is TargetNotFound, looked at again after
  ``CHAIN_RETRY_SECONDS``;
* then the target from its watch cache (``WatchIndex``, role ``ROLE_TARGET``): a cache not listed
  yet is a quiet hold (its initial list wakes the scaler); a target missing from a listed cache is
  TargetNotFound (its creation event wakes the scaler); a read the handler refuses is
  TargetUnreadable (retried after ``TARGET_RETRY_SECONDS`` when transient);
* the target's pods (``escaler.targets.pods``) give the InsufficientCapacity guard input: the
  namespace's pod cache is watched (``ROLE_PODS``) only once a scaler needs it — its target has
  replicas that are not Ready, or ``reads_pods`` (it reads Resource metrics over the pods) — a
  cache that has not listed yet is a quiet hold.

``write_replicas(sync, target, desired, metrics, reason, wrote_from=...)`` writes the count through
the target's ResourceHandler with optimistic concurrency: ``Written(retry=True)`` on a 409 (decide
again at once), ``Written(error=TargetWriteFailed)`` on any other failure, counted in
``escaler_scale_writes_total``. The caller checks the write fence first. **One write per cached
version**: a write that went out (written, or refused with 409) records the target version it was
made from (``Written.from_version``; the caller keeps it per scaler and passes it back as
``wrote_from``); while the cache still shows that version, no write goes out from it again
(``Written()``: nothing written, no error, so the caller writes nothing, not even status) — it is
bound to 409, and the cache's next version (its watch event) wakes the scaler. Without this, a
target cache that lags (its watch re-opening after an API server outage, up to the reflector's
30 s backoff) turned every poll and every rate-limited retry into a refused write (issue 15,
tests/e2e/test_chaos_apiserver.py).

``guard_input(snapshot, capacity)`` is the guards' view of the target.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escaler.errors import ConnectionFailure, StatusError, is_conflict, is_not_found
from escaler.informers.factory import ResourceKey
from escaler.reconcilers.kit.ports import HandlerLookup, Mapper, ObjectRef
from escaler.reconcilers.kit.scalermetrics import ScalerMetrics
from escaler.reconcilers.kit.sync import Hold, Sync
from escaler.reconcilers.kit.watchindex import ROLE_PODS, ROLE_TARGET, WatchIndex
from escaler.reconcilers.kit.watchkey import (
    CHAIN_RETRY_SECONDS,
    NOT_SYNCED_RETRY_SECONDS,
    watch_key,
)
from escaler.scaling.conditions import (
    INVALID_SPEC,
    TARGET_NOT_FOUND,
    TARGET_UNREADABLE,
    TARGET_WRITE_FAILED,
    TargetError,
)
from escaler.scaling.guards import TargetSnapshot as GuardTarget
from escaler.targets.handler import ResourceHandler
from escaler.targets.pods import Capacity, capacity, select_pods
from escaler.targets.snapshot import TargetSnapshot, TargetUnreadable

__all__ = ["TARGET_RETRY_SECONDS", "Target", "TargetReader", "Written", "guard_input", "write_replicas"]

_log = logging.getLogger(__name__)

# a target read that failed for a transient reason (429, 5xx, connection) is retried this soon
TARGET_RETRY_SECONDS = CHAIN_RETRY_SECONDS / 2
# pods are watched per namespace for the InsufficientCapacity guard
_PODS = ObjectRef("v1", "Pod", "")


@dataclass(frozen=True)
class Target:
    """The write target after ``read``: its snapshot, its handler, and what its pods say."""

    ref: ObjectRef
    snapshot: TargetSnapshot
    handler: ResourceHandler
    pods: Capacity


@dataclass(frozen=True)
class Written:
    """What ``write_replicas`` did: written, or the error; ``retry`` = a 409, decide again at once."""

    written: bool = False
    error: TargetError | None = None
    retry: bool = False
    # the target resourceVersion a write that reached the API server (written, or 409) went out
    # from; "" when none did
    from_version: str = ""


class TargetReader:
    """See the module docstring; stateless apart from its collaborators."""

    def __init__(self, mapper: Mapper, handlers: HandlerLookup, watches: WatchIndex) -> None:
        # discovery (REST mapping) of the target's kind; fixed
        self._mapper = mapper
        # ResourceHandler per kind; fixed
        self._handlers = handlers
        # the target and pod watches, per scaler; fixed
        self._watches = watches

    def read(self, sync: Sync, ns: str, ref: ObjectRef, *, reads_pods: bool = False,
             reuse: TargetSnapshot | None = None) -> Target | Hold:
        """``reuse``: a snapshot this scaler's poll read moments ago; taken instead of a second read
        when it was made from the very object the cache holds now (see ``_unchanged``)."""
        kind = self.kind(ns, ref)
        if isinstance(kind, Hold):
            # nothing of this kind will be read: the watches an earlier spec asked for go too
            self._watches.drop(sync.req, ROLE_TARGET)
            self._watches.drop(sync.req, ROLE_PODS)
            return kind
        key, handler = kind
        self._watches.want(sync.req, ROLE_TARGET, key, ns, ref.name)
        if not self._watches.synced(key):
            return Hold(quiet=True, requeue=NOT_SYNCED_RETRY_SECONDS)
        cached = self._watches.cached(key, ns, ref.name)
        if cached is None:
            # the cache has listed and the target is not there: its creation event wakes us
            return Hold(target_error=TargetError(TARGET_NOT_FOUND, f"{ref.kind} {ns}/{ref.name} not found"),
                        resolved=ref)
        try:
            if reuse is not None and _unchanged(reuse, ns, ref, cached):
                snap = reuse  # the poll's read of this very object: reading it again gives the same
            else:
                snap = handler.read(ns, ref)
        except TargetUnreadable as err:
            return Hold(target_error=TargetError(TARGET_UNREADABLE, str(err)), resolved=ref,
                        requeue=TARGET_RETRY_SECONDS if err.retryable else None)
        except StatusError as err:
            if not is_not_found(err):
                raise
            return Hold(target_error=TargetError(TARGET_NOT_FOUND, f"{ref.kind} {ns}/{ref.name} not found"),
                        resolved=ref)
        pods = self._capacity(sync, ns, snap, reads_pods)
        if pods is None:
            # the pod cache this scaler now needs has not listed: its initial list wakes the scaler
            return Hold(quiet=True, requeue=NOT_SYNCED_RETRY_SECONDS)
        return Target(ref, snap, handler, pods)

    def kind(self, ns: str, ref: ObjectRef) -> tuple[ResourceKey, ResourceHandler] | Hold:
        """The target's watch key and handler, or a hold when its kind cannot be a target: decided
        from discovery alone (``HandlerRegistry.target_problem``: namespaced, and a handler or a
        ``scale`` subresource), before anything is watched — a namespace user must not be able to
        make the manager list/watch Nodes cluster-wide, or the Secrets of their namespace."""
        try:
            m = self._mapper.mapping_for(ref.api_version, ref.kind)
            handler = self._handlers.handler_for(ref.api_version, ref.kind)
        except ValueError as err:
            return Hold(target_error=TargetError(INVALID_SPEC, f"spec.targetRef: {err}"), resolved=ref)
        except StatusError as err:
            if not is_not_found(err):
                raise
            return Hold(target_error=TargetError(
                TARGET_NOT_FOUND, f"{ref.kind} {ns}/{ref.name}: the API server does not serve kind "
                                  f"{ref.kind} in {ref.api_version}"),
                        requeue=CHAIN_RETRY_SECONDS, resolved=ref)
        problem = self._handlers.target_problem(m)
        if problem is not None:
            # a CRD may gain a scale subresource: look again now and then (discovery is cached)
            return Hold(target_error=TargetError(INVALID_SPEC, f"spec.targetRef: {problem}"),
                        requeue=CHAIN_RETRY_SECONDS, resolved=ref)
        return ResourceKey(m.group, m.version, m.resource, namespace=ns), handler

    def _capacity(self, sync: Sync, ns: str, snap: TargetSnapshot, reads_pods: bool) -> Capacity | None:
        """What the target's pods say about room to scale up.

        The namespace's pod cache is watched only once a scaler needs it — its target has replicas
        that are not Ready, or it reads Resource metrics (the collector lists pods from it) — and
        kept while the scaler lives: a fleet whose targets are all Ready pays no pod watch, and a
        scan (O(pods in the namespace)) happens only when some replica is not Ready (an all-Ready
        target has no Pending pod). None while that cache has not listed: a scale-up must not go
        out before the Unschedulable pods could be seen."""
        all_ready = snap.ready_replicas is not None and snap.ready_replicas >= snap.spec_replicas
        pods_key = watch_key(self._mapper, ns, _PODS)
        if not all_ready or reads_pods:
            self._watches.want(sync.req, ROLE_PODS, pods_key)
        if all_ready:
            return Capacity()
        listed = self._watches.listed(pods_key)
        return None if listed is None else capacity(select_pods(listed, snap.selector), sync.now)


def write_replicas(sync: Sync, target: Target, desired: int, metrics: ScalerMetrics,
                   reason: str = "", *, wrote_from: str = "") -> Written:
    """Write ``desired`` to the target (see the module docstring); the caller checked the fence.
    ``wrote_from``: the version this scaler's last write went out from (``Written.from_version``)."""
    snap, req = target.snapshot, sync.req
    version = snap.resource_version
    if version and version == wrote_from:
        # the cache has not seen the outcome of our last write from this version yet
        _log.debug("not writing %s again from resourceVersion %s", snap.describe(), version)
        return Written()
    counter = metrics.scale_writes
    try:
        target.handler.write_replicas(snap, desired)
    except StatusError as err:
        if is_conflict(err):
            counter.labels(req.namespace, req.name, "conflict").inc()
            # the target changed since it was read: decide again
            return Written(retry=True, from_version=version)
        counter.labels(req.namespace, req.name, "error").inc()
        return Written(error=TargetError(TARGET_WRITE_FAILED, f"writing {snap.describe()}: {err}"))
    except (ConnectionFailure, OSError, ValueError) as err:
        counter.labels(req.namespace, req.name, "error").inc()
        return Written(error=TargetError(TARGET_WRITE_FAILED, f"writing {snap.describe()}: {err}"))
    counter.labels(req.namespace, req.name, "success").inc()
    _log.info("scaled %s from %d to %d (%s)", snap.describe(), snap.spec_replicas, desired, reason)
    return Written(written=True, from_version=version)


def _unchanged(snap: TargetSnapshot, ns: str, ref: ObjectRef, cached: Mapping[str, Any]) -> bool:
    """``snap`` is what reading ``ref`` again would give: it was read from the very object the cache
    holds now (identity: no watch event has replaced it since) at that object's resourceVersion
    (a ``/scale`` read by GET came back at the version the cache shows)."""
    md = cached.get("metadata")
    rv = str(md.get("resourceVersion") or "") if isinstance(md, Mapping) else ""
    return (snap.raw is cached and snap.resource_version == rv and snap.namespace == ns
            and snap.name == ref.name and snap.api_version == ref.api_version and snap.kind == ref.kind)


def guard_input(snap: TargetSnapshot, pods: Capacity) -> GuardTarget:
    """The guards' view of the target: the handler's template-rollout verdict (one source of truth,
    with each kind's exceptions), the settling scale-down, and the unschedulable pods."""
    return GuardTarget(
        spec_replicas=snap.spec_replicas, status_replicas=snap.status_replicas,
        rollout_in_progress=snap.rollout_in_progress, rollout_message=snap.rollout_message,
        settling_scale_down=snap.settling_scale_down,
        unschedulable_pods=pods.unschedulable, unschedulable_message=pods.message)
