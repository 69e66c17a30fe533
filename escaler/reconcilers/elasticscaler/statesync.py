"""StateTrigger in a sync (docs/guide/elasticscaler.md#the-triggers): the source, its targetRef chain, and its
decision.

``StateResolver.resolve(sync, scaler)`` returns one of:

* ``Resolved`` — the source (read from the label-selected dynamic informer of its kind, so that
  any change of it enqueues the scaler at once) and the end of its chain (other hops are read from
  a watch cache when one is held for their kind, else with a GET); ``label_issue`` says when the
  source lacks the binding labels (readable with a GET, but invisible to the informer, so no event
  would reach the scaler: it is reported and looked at again every ``CHAIN_RETRY_SECONDS``);
* ``Hold`` — the chain cannot be resolved (``Validated=False/TargetChainInvalid``; when a link
  dangles, the missing object is watched so that its creation heals the chain), or — a quiet hold —
  the source informer has not listed yet: its initial list wakes the scaler, with a short requeue
  as a backstop. Nothing here waits.

``recommend_state(resolved, namespace)`` is the recommendation: the source's
``status.desiredReplicas`` (``DecisionReceived``), or ``DecisionUnavailable`` naming the source
when it has none (or when its labels are missing). A StateTrigger may scale from zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from escaler.api.elasticscaler import ElasticScaler
from escaler.errors import StatusError, is_not_found
from escaler.informers.factory import ResourceKey
from escaler.reconcilers.elasticscaler.context import Resolved
from escaler.reconcilers.elasticscaler.state import (
    ChainError,
    desired_replicas_of,
    label_problem,
    resolve_chain,
)
from escaler.reconcilers.kit.names import LABEL_NAME
from escaler.reconcilers.kit.ports import KubeClient, Mapper, ObjectRef
from escaler.reconcilers.kit.sync import Hold, Sync
from escaler.reconcilers.kit.watchindex import ROLE_HOP, ROLE_SOURCE, WatchIndex
from escaler.reconcilers.kit.watchkey import CHAIN_RETRY_SECONDS, NOT_SYNCED_RETRY_SECONDS, watch_key
from escaler.scaling.conditions import TARGET_CHAIN_INVALID, Validation
from escaler.scaling.pipeline import FROM_DECISION, RecommendResult

__all__ = ["StateResolver", "recommend_state"]

class StateResolver:
    """See the module docstring."""

    def __init__(self, mapper: Mapper, watches: WatchIndex, client: KubeClient) -> None:
        # kind → resource; fixed
        self._mapper = mapper
        # the reconciler's watch index (sources and missing hops are watched there)
        self._watches = watches
        # GETs of chain hops no cache holds
        self._client = client

    def resolve(self, sync: Sync, scaler: ElasticScaler) -> Resolved | Hold:
        source = ObjectRef.of(scaler.spec.target_ref)
        try:
            # the scaler's own namespace: a tenant's scaler never makes the manager watch (and cache)
            # another namespace's objects of its source's kind
            key = watch_key(self._mapper, scaler.namespace, source, label_selector=LABEL_NAME)
        except ValueError as err:
            self._drop_chain(sync)
            return Hold(validation=Validation(TARGET_CHAIN_INVALID, f"spec.targetRef: {err}"))
        except StatusError as err:
            if not is_not_found(err):
                raise
            self._drop_chain(sync)
            why = f"spec.targetRef: the API server does not serve kind {source.kind} in {source.api_version}"
            return Hold(validation=Validation(TARGET_CHAIN_INVALID, why), requeue=CHAIN_RETRY_SECONDS)
        self._watches.want(sync.req, ROLE_SOURCE, key, scaler.namespace, source.name)
        if not self._watches.synced(key):
            return Hold(quiet=True, requeue=NOT_SYNCED_RETRY_SECONDS)
        return self._chain(sync, scaler, source, key)

    def _drop_chain(self, sync: Sync) -> None:
        """The source's kind is refused or not served: no watch an earlier spec asked for is kept."""
        self._watches.drop(sync.req, ROLE_SOURCE)
        self._watches.drop(sync.req, ROLE_HOP)

    def _chain(self, sync: Sync, scaler: ElasticScaler, source: ObjectRef,
               key: ResourceKey) -> Resolved | Hold:
        ns = scaler.namespace
        label_issue: list[str] = []

        def read(r: ObjectRef) -> Mapping[str, Any] | None:
            if r != source:
                return self._get(r, ns)
            cached = self._watches.cached(key, ns, r.name)
            if cached is not None:
                return cached
            # not in the label-selected cache: absent, or present without our labels
            obj = self._get(r, ns)
            if obj is not None:
                label_issue.append(f"state source {r.describe()} {label_problem(obj, ns, scaler.name)}")
            return obj

        me = ObjectRef(ElasticScaler.API_VERSION, ElasticScaler.KIND, scaler.name)
        try:
            chain = resolve_chain(me, source, read)
        except ChainError as err:
            return self._broken(sync, ns, source, err)
        except StatusError as err:
            if not is_not_found(err):
                raise
            return Hold(validation=Validation(TARGET_CHAIN_INVALID, f"targetRef chain: {err}"),
                        requeue=CHAIN_RETRY_SECONDS)
        self._watches.drop(sync.req, ROLE_HOP)
        if label_issue:
            sync.wait(CHAIN_RETRY_SECONDS)  # no event from this source can reach us
        return Resolved(source, chain.source, chain.target, label_issue[0] if label_issue else None)

    def _broken(self, sync: Sync, ns: str, source: ObjectRef, err: ChainError) -> Hold:
        requeue: float | None = None
        if err.missing is not None and err.missing != source:
            # watch the missing object: its creation heals the chain and wakes us
            try:
                self._watches.want(sync.req, ROLE_HOP, watch_key(self._mapper, ns, err.missing), ns,
                                   err.missing.name)
            except (ValueError, StatusError):
                requeue = CHAIN_RETRY_SECONDS
        return Hold(validation=Validation(TARGET_CHAIN_INVALID, str(err)), requeue=requeue)

    def _get(self, ref: ObjectRef, namespace: str) -> Mapping[str, Any] | None:
        """One chain hop: from a watch cache this reconciler holds for its kind, else a GET."""
        try:
            key = watch_key(self._mapper, namespace, ref)
        except ValueError as err:  # a refused kind is not even read with a GET
            raise ChainError(f"spec.targetRef {ref.describe()}: {err}") from None
        if self._watches.synced(key):
            return self._watches.cached(key, namespace, ref.name)
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
