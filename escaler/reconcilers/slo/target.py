"""The current replicas of an SLO requirement's ``targetRef``, from the informer caches (0 GETs).

``TargetCounts.current(req, namespace, ref)`` answers:

* ``Replicas``: the target's desired replicas (``spec.replicas``; for a ResourceScalingGroup or a
  LeaderWorkerSet, groups) and how many of them are ready (None when the kind does not say), read
  by the kind's ``ResourceHandler`` (``escaler.targets``) from the
  dynamic informer the ``WatchIndex`` holds for it (``ROLE_TARGET``): a target event (a replica
  write by the LLMScaler) wakes the requirement, and a reconcile never GETs;
* ``NOT_SYNCED``: that informer has not listed yet (its initial list wakes the requirement);
* a ``TargetProblem`` (``TargetNotFound`` / ``TargetUnreadable`` / ``InvalidSpec``) with a message
  naming the target, and when to look again.

What may be watched is decided from discovery first, as for every scaler kind: a namespaced kind
with a handler or a ``scale`` subresource (``HandlerRegistry.target_problem``), never core Secrets,
in the requirement's namespace (``kit.watchkey.watch_key``).
"""

from __future__ import annotations

from dataclasses import dataclass

from escaler.errors import StatusError, is_not_found
from escaler.reconcilers.kit.ports import HandlerLookup, Mapper, ObjectRef
from escaler.reconcilers.kit.watchindex import ROLE_TARGET, WatchIndex
from escaler.reconcilers.kit.watchkey import CHAIN_RETRY_SECONDS, watch_key
from escaler.reconcilers.slo.report import INVALID_SPEC, TARGET_NOT_FOUND, TARGET_UNREADABLE
from escaler.runtime.types import Request
from escaler.targets.snapshot import TargetUnreadable

__all__ = ["NOT_SYNCED", "Replicas", "TargetCounts", "TargetProblem"]

# the target's informer has not listed yet
NOT_SYNCED = object()


@dataclass(frozen=True)
class Replicas:
    """The target's replicas as its handler reads them."""

    desired: int
    # ready replicas; None when unknown (the sizing then treats every replica as serving)
    ready: int | None = None


@dataclass(frozen=True)
class TargetProblem:
    """Why the current replicas are unknown."""

    # Ready reason: TargetNotFound | TargetUnreadable | InvalidSpec
    reason: str
    message: str
    # look again after this long (seconds); None = an event wakes the requirement
    retry: float | None = None


class TargetCounts:
    """See the module docstring. Thread-safe (its collaborators are)."""

    def __init__(self, mapper: Mapper, handlers: HandlerLookup, watches: WatchIndex) -> None:
        # kind → resource (discovery, cached)
        self._mapper = mapper
        # the ResourceHandlers, reading through the WatchIndex caches
        self._handlers = handlers
        # the target informers and the index from target to requirements
        self._watches = watches

    def current(self, req: Request, namespace: str, ref: ObjectRef) -> Replicas | TargetProblem | object:
        try:
            key = watch_key(self._mapper, namespace, ref)
            handler = self._handlers.handler_for(ref.api_version, ref.kind)
            problem = self._handlers.target_problem(self._mapper.mapping_for(ref.api_version, ref.kind))
        except ValueError as err:
            self._watches.drop(req, ROLE_TARGET)
            return TargetProblem(INVALID_SPEC, f"spec.targetRef: {err}")
        except StatusError as err:
            if not is_not_found(err):
                raise
            self._watches.drop(req, ROLE_TARGET)
            return TargetProblem(TARGET_NOT_FOUND, f"spec.targetRef: the API server does not serve kind "
                                                   f"{ref.kind} in {ref.api_version}", CHAIN_RETRY_SECONDS)
        if problem is not None:
            self._watches.drop(req, ROLE_TARGET)
            return TargetProblem(INVALID_SPEC, f"spec.targetRef: {problem}", CHAIN_RETRY_SECONDS)
        self._watches.want(req, ROLE_TARGET, key, namespace, ref.name)
        if not self._watches.synced(key):
            return NOT_SYNCED
        if self._watches.cached(key, namespace, ref.name) is None:
            return TargetProblem(TARGET_NOT_FOUND, f"{ref.kind} {namespace}/{ref.name} not found")
        try:
            snap = handler.read(namespace, ref)
            return Replicas(snap.spec_replicas, snap.ready_replicas)
        except TargetUnreadable as err:
            retry = CHAIN_RETRY_SECONDS / 2 if err.retryable else None
            return TargetProblem(TARGET_UNREADABLE, str(err), retry)
        except StatusError as err:
            if not is_not_found(err):
                raise
            return TargetProblem(TARGET_NOT_FOUND, f"{ref.kind} {namespace}/{ref.name} not found")

    def release(self, req: Request) -> None:
        self._watches.release(req)
