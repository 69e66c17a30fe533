"""Target bindings: which scaler owns each workload, shared by every escaler scaler kind
(docs/concepts.md#conflicts-one-writer-per-workload).

A workload (namespace + API group + kind + name: a ``TargetKey``) is managed by at most one
scaler of any escaler kind (ElasticScaler, LLMScaler, ResourceScalingGroup — which claims
every member it writes). When several bind the same target, the
*oldest* wins — by ``metadata.creationTimestamp``, then kind, then name — deterministically and
from any replica's point of view; every other one reports ``Validated=False/TargetConflict`` and
never writes. A HorizontalPodAutoscaler that escaler does not own and that targets the same
workload is a conflict too: the scaler holds rather than fight it.

Contract:

* **Level-based.** Claims are read from the informer caches of the scaler kinds, never from
  in-memory registrations that depend on reconcile order: after a restart, the very first
  reconcile of the younger scaler already sees the older one (the caches synced before any
  reconcile started). Each claim source adds an indexer (``TARGET_INDEX``) to its informer that
  maps a scaler object to the ``TargetKey`` it claims (``target_of``), so a lookup is one index
  read per kind.
* **Shared.** One ``TargetBindings`` per manager, made by whoever owns the manager (the CLI) and
  passed to each scaler kind's setup, which calls ``add_source(kind, informer, target_of)`` once;
  every reconciler asks the same object, so an ElasticScaler and an LLMScaler on one Deployment
  resolve identically. ``target_of`` decides what a claim is (a scaler that cannot act claims
  nothing: see ``escaler.reconcilers.kit.claims``).
* ``winner(target, me)`` includes ``me`` even when the cache does not show its claim yet (a
  StateTrigger scaler claims the end of its chain only once its status says so).
* ``refusal(target, me)`` is the TargetConflict message every scaler kind reports (or None).
* **Waking across kinds.** Each kind's setup registers how to enqueue one of its scalers
  (``set_waker(kind, wake)``); a kind whose object changes its claim (created, deleted, retargeted,
  no longer able to act) calls ``wake_claimants(target, but=kind)``, so a conflict loser of *another*
  kind takes over at once rather than at its next poll (each kind wakes its own losers itself).
* ``foreign_hpas(target)`` lists HPAs from an HPA informer (``set_hpa_informer``) whose
  ``scaleTargetRef`` is the target and that carry no controller ownerReference to an escaler
  kind. The companion HPA of a ``scalingAlgorithm: HPA`` ElasticScaler is therefore not foreign.
* Thread-safe: sources are added at setup; lookups only read the informers' indexers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from escaler.informers.frozen import FrozenDict
from escaler.kube.discovery import parse_api_version
from escaler.runtime.types import Request

__all__ = [
    "ESCALER_GROUPS",
    "HPA_TARGET_INDEX",
    "TARGET_INDEX",
    "Claim",
    "TargetBindings",
    "TargetKey",
    "claim_of",
]

# name of the indexer added to each claim source's informer, and to the HPA informer
TARGET_INDEX = "escaler.io/target"
HPA_TARGET_INDEX = "escaler.io/hpa-target"
# API groups of the escaler scaler kinds: an HPA controlled by one of these is escaler's own
ESCALER_GROUPS = frozenset({"elasticscaler.io", "llm.escaler.io"})
# creationTimestamp of a claim whose object has none yet (sorts last: the youngest)
_NO_TIMESTAMP = "9999-12-31T23:59:59Z"


@dataclass(frozen=True, order=True)
class TargetKey:
    """A workload: namespace, API group ("" = core), kind and name. Versions do not matter."""

    namespace: str
    group: str
    kind: str
    name: str

    @classmethod
    def from_ref(cls, namespace: str, api_version: str, kind: str, name: str) -> TargetKey:
        group, _ = parse_api_version(api_version)
        return cls(namespace, group, kind, name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.group or 'core'}/{self.kind}/{self.name}"

    def describe(self) -> str:
        """For messages: ``Deployment.apps llama``."""
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.name}"


@dataclass(frozen=True)
class Claim:
    """One scaler binding a target; ordered so that the winner sorts first."""

    # RFC 3339 creationTimestamp as the API server wrote it (lexical order = time order)
    created: str
    kind: str
    namespace: str
    name: str

    @property
    def sort_key(self) -> tuple[str, str, str]:
        return (self.created or _NO_TIMESTAMP, self.kind, self.name)

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def claim_of(kind: str, obj: Mapping[str, Any]) -> Claim:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return Claim(str(meta.get("creationTimestamp") or ""), kind, str(meta.get("namespace") or ""),
                 str(meta.get("name") or ""))


# what a claim source's target_of returns: one target, several (an RSG's members), or none
Targets = TargetKey | Sequence[TargetKey] | None


class Indexed(Protocol):
    """What a claim source needs from a ``SharedInformer``."""

    def add_indexers(self, indexers: Mapping[str, Callable[[FrozenDict], list[str]]]) -> None: ...

    @property
    def indexer(self) -> Any: ...


@dataclass(frozen=True)
class _Source:
    kind: str
    informer: Indexed
    target_of: Callable[[Mapping[str, Any]], Targets]


def _keys(targets: Targets) -> tuple[TargetKey, ...]:
    """What a ``target_of`` returned, as a tuple (a kind may claim several workloads: an RSG's members)."""
    if targets is None:
        return ()
    return (targets,) if isinstance(targets, TargetKey) else tuple(targets)


def _controller_owner_group(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return parse_api_version(str(ref.get("apiVersion") or ""))[0]
    return None


def hpa_target(obj: Mapping[str, Any]) -> TargetKey | None:
    """The workload an autoscaling HPA scales (its ``spec.scaleTargetRef``)."""
    spec = obj.get("spec")
    ref = spec.get("scaleTargetRef") if isinstance(spec, Mapping) else None
    meta = obj.get("metadata")
    if not isinstance(ref, Mapping) or not isinstance(meta, Mapping):
        return None
    kind, name = ref.get("kind"), ref.get("name")
    if not kind or not name:
        return None
    try:
        return TargetKey.from_ref(str(meta.get("namespace") or ""), str(ref.get("apiVersion") or "v1"),
                                  str(kind), str(name))
    except ValueError:
        return None


class TargetBindings:
    """Resolves target conflicts across scaler kinds from informer caches; see the module docstring."""

    def __init__(self) -> None:
        # guards _sources and _hpa
        self._mu = threading.Lock()
        # one per scaler kind; a kind is added once
        self._sources: dict[str, _Source] = {}
        # the HPA informer (indexed by HPA_TARGET_INDEX), once set
        self._hpa: Indexed | None = None
        # kind → enqueues one of its scalers (namespace, name); set by each kind's setup
        self._wakers: dict[str, Callable[[str, str], None]] = {}

    def add_source(self, kind: str, informer: Indexed,
                   target_of: Callable[[Mapping[str, Any]], Targets]) -> None:
        """Register the informer of scaler ``kind``; ``target_of`` gives the target an object claims
        (or the targets: a ResourceScalingGroup claims each member it writes)."""

        def index(obj: FrozenDict) -> list[str]:
            try:
                keys = _keys(target_of(obj))
            except Exception:  # a malformed object claims nothing
                return []
            return [str(k) for k in keys]

        with self._mu:
            if kind in self._sources:
                raise ValueError(f"TargetBindings.add_source: kind {kind!r} already added")
            informer.add_indexers({TARGET_INDEX: index})
            self._sources[kind] = _Source(kind, informer, target_of)

    def set_waker(self, kind: str, wake: Callable[[str, str], None]) -> None:
        """How to enqueue a scaler of ``kind`` (``wake(namespace, name)``); see the module docstring."""
        with self._mu:
            self._wakers[kind] = wake

    def wake_claimants(self, target: TargetKey, but: str) -> None:
        """Enqueue every claimant of ``target`` whose kind is not ``but`` and has a waker."""
        with self._mu:
            wakers = dict(self._wakers)
        for c in self.claimants(target):
            wake = wakers.get(c.kind)
            if c.kind != but and wake is not None:
                wake(c.namespace, c.name)

    def set_hpa_informer(self, informer: Indexed) -> None:
        """Use ``informer`` (autoscaling/v2 HPAs) to find HPAs escaler does not own; idempotent."""
        with self._mu:
            if self._hpa is not None:
                return
            informer.add_indexers({HPA_TARGET_INDEX: lambda obj: [str(k)] if (k := hpa_target(obj)) else []})
            self._hpa = informer

    def claimants(self, target: TargetKey) -> list[Claim]:
        """Every scaler whose cached object claims ``target``, winner first."""
        with self._mu:
            sources = list(self._sources.values())
        claims = [claim_of(src.kind, obj) for src in sources
                  for obj in src.informer.indexer.by_index(TARGET_INDEX, str(target))]
        return sorted(set(claims), key=lambda c: c.sort_key)

    def requests_of(self, target: TargetKey, kind: str) -> list[Request]:
        """The claimants of ``target`` of one ``kind``, as requests for that kind's controller."""
        return [Request(c.namespace, c.name) for c in self.claimants(target) if c.kind == kind]

    def winner(self, target: TargetKey, me: Claim) -> Claim:
        """The claim that owns ``target``, counting ``me`` whether or not its claim is cached yet."""
        # on every poll of every scaler: one pass over the index, no sort, no set (ties keep ``me``)
        mine = (me.kind, me.namespace, me.name)
        best, best_key = me, me.sort_key
        key = str(target)
        with self._mu:
            sources = list(self._sources.values())
        for src in sources:
            for obj in src.informer.indexer.by_index(TARGET_INDEX, key):
                c = claim_of(src.kind, obj)
                if (c.kind, c.namespace, c.name) != mine and c.sort_key < best_key:
                    best, best_key = c, c.sort_key
        return best

    def refusal(self, target: TargetKey, me: Claim, ignore_hpa: str | None = None) -> str | None:
        """Why ``me`` may not write ``target`` (an older claimant, or an HPA escaler does not own,
        other than ``ignore_hpa``), in words for ``Validated=False/TargetConflict``; None when it may."""
        winner = self.winner(target, me)
        if winner != me:
            return (f"{target.describe()} is already managed by {winner.describe()} (created "
                    f"{winner.created or 'earlier'}); the older scaler wins, this one never writes")
        foreign = [h for h in self.foreign_hpas(target) if h != ignore_hpa]
        if foreign:
            return (f"{target.describe()} is also scaled by HorizontalPodAutoscaler "
                    f"{', '.join(foreign)}, which escaler does not own; holding rather than fighting it")
        return None

    def same_target(self, kind: str, obj: Mapping[str, Any]) -> list[Claim]:
        """The other claims on the target ``obj`` (of ``kind``) claims (for waking conflict losers)."""
        with self._mu:
            src = self._sources.get(kind)
        if src is None:
            return []
        try:
            targets = _keys(src.target_of(obj))
        except Exception:
            return []
        me = claim_of(kind, obj)
        others = {c for t in targets for c in self.claimants(t) if (c.kind, c.name) != (me.kind, me.name)}
        return sorted(others, key=lambda c: c.sort_key)

    def claim_sources(self) -> list[tuple[str, Any, Callable[[Mapping[str, Any]], Any]]]:
        """``(kind, informer, target_of)`` of every claim source added so far, for a consumer that
        must hear when claims change (a Tidal reports a foreign claim on its target) or read a
        claimant's object (``informer.indexer.get_by_key``)."""
        with self._mu:
            return [(s.kind, s.informer, s.target_of) for s in self._sources.values()]

    def foreign_hpas(self, target: TargetKey) -> list[str]:
        """Names of HPAs on ``target`` that escaler does not control (sorted)."""
        with self._mu:
            hpa = self._hpa
        if hpa is None:
            return []
        out = []
        for obj in hpa.indexer.by_index(HPA_TARGET_INDEX, str(target)):
            if _controller_owner_group(obj) in ESCALER_GROUPS:
                continue
            out.append(str(obj["metadata"]["name"]))
        return sorted(out)
