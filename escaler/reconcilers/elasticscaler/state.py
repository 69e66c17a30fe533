"""StateTrigger: the state source, its ``status.desiredReplicas``, and the targetRef chain
(docs/guide/elasticscaler.md#the-triggers).

``spec.targetRef`` of a StateTrigger scaler names a *state source* (a Tidal, or any object with
``status.desiredReplicas``). The workload to write is found by following ``spec.targetRef`` links
from the source: source → A → B ... until an object without ``spec.targetRef``, which is the
target. At most ``MAX_CHAIN_HOPS`` links are followed. Every failure is a ``ChainError`` whose
message names the hop (``Validated=False/TargetChainInvalid``):

* the source, or a link, names an object that does not exist (dangling);
* a link comes back to an object already visited (cycle; the scaler itself counts);
* the source has no ``spec.targetRef`` (nothing to scale), or a link is malformed;
* more than ``MAX_CHAIN_HOPS`` links;
* a kind the API server does not serve.

``resolve_chain`` is pure apart from the ``read`` callable it is given (the reconciler reads the
source from its label-selected informer and the other hops from caches or with a GET).

Labels: a source must carry ``elasticscaler.io/name`` and ``elasticscaler.io/namespace`` naming the
scaler (that is how its changes reach the scaler without polling); ``label_problem`` says what is
missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from escaler.reconcilers.kit.names import LABEL_NAME, LABEL_NAMESPACE
from escaler.reconcilers.kit.ports import ObjectRef

__all__ = [
    "MAX_CHAIN_HOPS",
    "ChainError",
    "ObjectRef",
    "ResolvedChain",
    "desired_replicas_of",
    "label_problem",
    "request_for_source",
    "resolve_chain",
]

MAX_CHAIN_HOPS = 5


class ChainError(Exception):
    """The targetRef chain cannot be resolved; the message names the hop and the rule."""

    def __init__(self, message: str, missing: ObjectRef | None = None) -> None:
        super().__init__(message)
        # the object a dangling link names (watch it: its creation heals the chain)
        self.missing = missing


@dataclass(frozen=True)
class ResolvedChain:
    # the state source (spec.targetRef of the scaler), as read
    source: Mapping[str, Any]
    # the workload to write: the end of the chain
    target: ObjectRef
    # every object visited, source first, target last
    path: tuple[ObjectRef, ...]

    def describe(self) -> str:
        return " -> ".join(r.describe() for r in self.path)


# read(ref) → the object, or None when it does not exist; raises for any other failure
Reader = Callable[[ObjectRef], Mapping[str, Any] | None]


def _target_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    spec = obj.get("spec")
    ref = spec.get("targetRef") if isinstance(spec, Mapping) else None
    return ref if isinstance(ref, Mapping) else None


def resolve_chain(scaler: ObjectRef, source: ObjectRef, read: Reader,
                  max_hops: int = MAX_CHAIN_HOPS) -> ResolvedChain:
    """Follow ``spec.targetRef`` from ``source`` to the workload; ``ChainError`` naming the hop."""
    visited = {scaler.identity}
    if source.identity in visited:
        raise ChainError("spec.targetRef names this ElasticScaler itself (cycle)")
    source_obj = read(source)
    if source_obj is None:
        raise ChainError(f"spec.targetRef: state source {source.describe()} not found (dangling)", source)
    visited.add(source.identity)
    path = [source]
    current, current_obj = source, source_obj
    hops = 0
    while True:
        raw = _target_ref(current_obj)
        if raw is None:
            if current is source:
                raise ChainError(f"state source {source.describe()} has no spec.targetRef: nothing to scale")
            return ResolvedChain(source_obj, current, tuple(path))
        try:
            nxt = ObjectRef.from_mapping(raw)
        except ValueError as exc:
            raise ChainError(f"{current.describe()}: spec.targetRef {exc}") from None
        hops += 1
        if hops > max_hops:
            raise ChainError(f"targetRef chain longer than {max_hops} hops: "
                             + " -> ".join(r.describe() for r in [*path, nxt]) + " -> ...")
        if nxt.identity in visited:
            raise ChainError("targetRef chain has a cycle: "
                             + " -> ".join(r.describe() for r in [*path, nxt]))
        nxt_obj = read(nxt)
        if nxt_obj is None:
            raise ChainError(f"{current.describe()}: spec.targetRef {nxt.describe()} not found "
                             "(dangling link)", nxt)
        visited.add(nxt.identity)
        path.append(nxt)
        current, current_obj = nxt, nxt_obj


def desired_replicas_of(source: Mapping[str, Any]) -> int | None:
    """``status.desiredReplicas`` as a non-negative integer, or None when absent or unusable."""
    status = source.get("status")
    value = status.get("desiredReplicas") if isinstance(status, Mapping) else None
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def request_for_source(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the scaler a source's labels name; None without the name label."""
    labels = _labels(obj)
    name = labels.get(LABEL_NAME)
    if not isinstance(name, str) or not name:
        return None
    meta = obj.get("metadata")
    own_ns = str(meta.get("namespace") or "") if isinstance(meta, Mapping) else ""
    ns = labels.get(LABEL_NAMESPACE)
    return (ns if isinstance(ns, str) and ns else own_ns), name


def label_problem(source: Mapping[str, Any], namespace: str, name: str) -> str | None:
    """What is wrong with a source's binding labels for scaler namespace/name, or None."""
    labels = _labels(source)
    want = {LABEL_NAME: name, LABEL_NAMESPACE: namespace}
    wrong = [f"{k}={v}" for k, v in want.items() if labels.get(k) != v]
    if not wrong:
        return None
    return "needs labels " + ", ".join(wrong) + " so that its changes reach this scaler"
