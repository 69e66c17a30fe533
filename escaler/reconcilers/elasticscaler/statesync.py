"""StateTrigger in a sync (SPEC §5.3): the source, its targetRef chain, and its decision.

``StateResolver.resolve(sync, scaler)`` returns one of:

* ``Resolved`` — the source (read from the label-selected dynamic informer registered for this
  scaler, so that any change of it enqueues the scaler at once) and the end of its chain (other
  hops are read from a synced watch cache when this reconciler holds one for their kind, else
  with a GET); ``label_issue`` says when the source lacks the binding labels (readable with a GET,
  but invisible to the informer, so no event would reach the scaler: it is reported and polled);
* ``ChainHold`` — the chain cannot be resolved (``Validated=False/TargetChainInvalid``); when a
  link dangles, the missing object's kind is watched so that its creation heals the chain;
* ``NotSynced`` — the source informer has only just started: look again shortly.

``recommend_state(resolved, namespace)`` is the recommendation: the source's
``status.desiredReplicas`` (``DecisionReceived``), or ``DecisionUnavailable`` naming the source
when it has none (or when its labels are missing). A StateTrigger may scale from zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from escaler.api.elasticscaler import ElasticScaler
from escaler.errors import StatusError, is_not_found
from escaler.informers.factory import ResourceKey
from escaler.kube.discovery import ResourceMapping
from escaler.reconcilers.elasticscaler.context import Resolved, Sync
from escaler.reconcilers.elasticscaler.state import (
    LABEL_NAME,
    ChainError,
    ObjectRef,
    desired_replicas_of,
    label_problem,
    request_for_source,
    resolve_chain,
)
from escaler.reconcilers.elasticscaler.watches import ROLE_SOURCE, ROLE_TARGET, ScalerWatches
from escaler.scaling.conditions import TARGET_CHAIN_INVALID, Validation
from escaler.scaling.pipeline import FROM_DECISION, RecommendResult

__all__ = [
    "CHAIN_RETRY_SECONDS",
    "NOT_SYNCED_RETRY_SECONDS",
    "SOURCE_SYNC_WAIT_SECONDS",
    "ChainHold",
    "NotSynced",
    "StateResolver",
    "recommend_state",
]

# how long a sync waits for a freshly started source informer to list
SOURCE_SYNC_WAIT_SECONDS = 5.0
# retry interval when nothing can wake the scaler (an unserved kind, a source without labels)
CHAIN_RETRY_SECONDS = 60.0
# requeue while the source informer has not synced yet
NOT_SYNCED_RETRY_SECONDS = 1.0


class Getter(Protocol):
    def get(self, m: Any, name: str, namespace: str | None = None) -> dict[str, Any]: ...


class Mapper(Protocol):
    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping: ...


@dataclass(frozen=True)
class ChainHold:
    """The chain cannot be resolved: hold with this validation, and look again after ``requeue``."""

    validation: Validation
    requeue: float | None = None


@dataclass(frozen=True)
class NotSynced:
    """The source informer has not listed yet."""

    requeue: float = NOT_SYNCED_RETRY_SECONDS


class StateResolver:
    """See the module docstring."""

    def __init__(self, mapper: Mapper, watches: ScalerWatches, client: Getter, source_namespace: str) -> None:
        self._mapper = mapper
        self._watches = watches
        self._client = client
        # namespace scope of the source informers ("" = all namespaces: the manager's scope)
        self._source_ns = source_namespace

    def resolve(self, sync: Sync, scaler: ElasticScaler) -> Resolved | ChainHold | NotSynced:
        req, ns = sync.req, scaler.namespace
        ref = scaler.spec.target_ref
        source = ObjectRef(ref.api_version, ref.kind, ref.name)
        try:
            m = self._mapper.mapping_for(ref.api_version, ref.kind)
        except ValueError as err:
            return ChainHold(Validation(TARGET_CHAIN_INVALID, f"spec.targetRef: {err}"))
        except StatusError as err:
            if not is_not_found(err):
                raise
            why = f"spec.targetRef: the API server does not serve kind {ref.kind} in {ref.api_version}"
            return ChainHold(Validation(TARGET_CHAIN_INVALID, why), CHAIN_RETRY_SECONDS)
        key = ResourceKey(m.group, m.version, m.resource,
                          namespace=self._source_ns if m.namespaced else "", label_selector=LABEL_NAME)
        me = (req.namespace, req.name)
        self._watches.ensure(req, ROLE_SOURCE, key, lambda obj: request_for_source(obj) == me)
        if not self._watches.synced(req, ROLE_SOURCE, SOURCE_SYNC_WAIT_SECONDS):
            return NotSynced()
        scaler_ref = ObjectRef(ElasticScaler.API_VERSION, ElasticScaler.KIND, scaler.name)
        label_issue: list[str] = []

        def read(r: ObjectRef) -> Mapping[str, Any] | None:
            if r == source:
                cached = self._watches.cached(req, ROLE_SOURCE, ns, r.name)
                if cached is not None:
                    return cached
                # not in the label-selected cache: absent, or present without our labels
                obj = self._get(r, ns)
                if obj is not None:
                    label_issue.append(f"state source {r.describe()} {label_problem(obj, ns, scaler.name)}")
                return obj
            return self._get(r, ns)

        try:
            chain = resolve_chain(scaler_ref, source, read)
        except ChainError as err:
            requeue: float | None = None
            if err.missing is not None and err.missing != source:
                # watch the missing object's kind: its creation heals the chain and wakes us
                try:
                    self._watches.watch_object(req, ROLE_TARGET, ns, err.missing, self._mapper)
                except (ValueError, StatusError):
                    requeue = CHAIN_RETRY_SECONDS
            return ChainHold(Validation(TARGET_CHAIN_INVALID, str(err)), requeue)
        except StatusError as err:
            if not is_not_found(err):
                raise
            return ChainHold(Validation(TARGET_CHAIN_INVALID, f"targetRef chain: {err}"), CHAIN_RETRY_SECONDS)
        if label_issue:
            # no event from this source can reach us: look again now and then
            sync.wait(CHAIN_RETRY_SECONDS)
        return Resolved(source, chain.source, chain.target, label_issue[0] if label_issue else None)

    def _get(self, ref: ObjectRef, namespace: str) -> Mapping[str, Any] | None:
        """One chain hop: from a synced watch cache this reconciler holds, else a GET."""
        cached = self._watches.lookup(ref.api_version, ref.kind, namespace, ref.name, self._mapper)
        if cached is not None:
            return cached
        try:
            return self._client.get((ref.api_version, ref.kind), ref.name, namespace)
        except StatusError as err:
            if is_not_found(err):
                return None
            raise


def recommend_state(resolved: Resolved, ns: str) -> RecommendResult:
    """The source's decision (see the module docstring)."""
    source, obj = resolved.source_ref, resolved.source
    who = f"{source.kind} {ns}/{source.name}"
    if resolved.label_issue is not None:
        return RecommendResult.no_decision(f"state source {who}", resolved.label_issue, kind=FROM_DECISION)
    desired = desired_replicas_of(obj)
    if desired is None:
        status = obj.get("status")
        raw = status.get("desiredReplicas") if isinstance(status, Mapping) else None
        why = "has no status.desiredReplicas" if raw is None else \
            f"status.desiredReplicas is {raw!r}, not an integer >= 0"
        return RecommendResult.no_decision(f"state source {who}", why, kind=FROM_DECISION)
    return RecommendResult.from_decision(desired, source=f"state source {who}",
                                         detail=f"{who} status.desiredReplicas {desired}")
