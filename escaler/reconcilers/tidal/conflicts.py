"""Who writes a Tidal's target: the Tidal's ``TargetConflict`` rule, and the watch that keeps it fresh.

A Tidal writes nothing (docs/guide/tidal.md): the StateTrigger ElasticScaler that follows it writes its
target, and that scaler claims the target in the shared binding index (``escaler.reconcilers.kit.bindings``)
like any other scaler. The Tidal therefore does **not** claim its target — a claim by the Tidal
would compete with its own follower — it only reads the index:

* the *follower* of a Tidal is an ElasticScaler in the Tidal's namespace whose trigger is
  ``StateTrigger`` and whose ``spec.targetRef`` names this Tidal (group ``tidal.io``, kind
  ``Tidal``, the Tidal's name);
* the claimants of the Tidal's ``spec.targetRef`` (``TargetBindings.claimants``, every scaler kind,
  the winner first) decide:

  - none: no conflict (no scaler writes the target yet, e.g. the follower has not resolved its
    chain; the Tidal still reports its schedule);
  - the winner — the one scaler allowed to write the target — is a follower: no conflict (a losing
    claimant reports its own ``Validated=False/TargetConflict``);
  - the winner names this Tidal in ``spec.floorFrom`` (docs/design.md#beyond-the-seeds, a *floor* Tidal: the
    scaler reads its rules as a lower bound, ``escaler.scaling.floor``): no conflict — the schedule
    does take part in the replicas, through that scaler — and the binding labels are not needed
    (the floor scaler watches its Tidal by name; ``floor_user``);
  - the winner is anything else (a MetricsTrigger scaler, an RSG holding the workload as a member,
    the follower of another Tidal): ``Ready=False/TargetConflict`` naming it, because that
    scaler's writes, not this schedule, decide the replicas;
* an HPA escaler does not own on the target (``TargetBindings.foreign_hpas``) is a conflict too
  (the follower holds rather than fight it).

``ClaimWatch`` is the controller ``Source`` that keeps this level-based answer fresh without polling:
when started (after every kind's setup ran) it adds one handler per claim source informer of the
binding index; a change of what an object claims (or of its generation: a scaler can stop being a
follower without changing its target) enqueues the Tidals whose target it claimed before or after,
found through an index on the Tidal informer (``TIDAL_TARGET_INDEX``) — one handler per kind,
never one per Tidal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from escaler.api.elasticscaler import ElasticScaler, TriggerType
from escaler.api.tidal import Tidal
from escaler.kube.discovery import parse_api_version
from escaler.reconcilers.kit.bindings import TargetBindings, TargetKey
from escaler.runtime.handlers import EnqueueRequestsFromMapFunc
from escaler.runtime.source import Kind
from escaler.runtime.types import Request

__all__ = ["TIDAL_TARGET_INDEX", "ClaimWatch", "conflict_of", "floor_user", "is_floor_user", "is_follower",
           "tidal_target", "tidals_on"]

MapFunc = Callable[[Mapping[str, Any]], list[Request]]
# indexer on the Tidal informer: TargetKey string of spec.targetRef → the Tidals naming it
TIDAL_TARGET_INDEX = "escaler.io/tidal-target"
_TIDAL_GROUP = parse_api_version(Tidal.API_VERSION)[0]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def tidal_target(obj: Mapping[str, Any]) -> TargetKey | None:
    """The workload a Tidal object names in ``spec.targetRef``, or None when malformed."""
    spec = obj.get("spec")
    ref = spec.get("targetRef") if isinstance(spec, Mapping) else None
    if not isinstance(ref, Mapping) or not ref.get("kind") or not ref.get("name"):
        return None
    try:
        return TargetKey.from_ref(str(_meta(obj).get("namespace") or ""), str(ref.get("apiVersion") or ""),
                                  str(ref["kind"]), str(ref["name"]))
    except ValueError:
        return None


def tidal_index(obj: Mapping[str, Any]) -> list[str]:
    key = tidal_target(obj)
    return [str(key)] if key is not None else []


def is_follower(scaler: Mapping[str, Any], namespace: str, tidal_name: str) -> bool:
    """True when ``scaler`` (an ElasticScaler object) is a StateTrigger following Tidal
    ``namespace/tidal_name`` (see the module docstring)."""
    spec = scaler.get("spec")
    if not isinstance(spec, Mapping) or str(_meta(scaler).get("namespace") or "") != namespace:
        return False
    trigger, ref = spec.get("trigger"), spec.get("targetRef")
    if not isinstance(trigger, Mapping) or trigger.get("type") != TriggerType.STATE:
        return False
    if not isinstance(ref, Mapping) or ref.get("kind") != Tidal.KIND or ref.get("name") != tidal_name:
        return False
    try:
        return parse_api_version(str(ref.get("apiVersion") or ""))[0] == _TIDAL_GROUP
    except ValueError:
        return False


def is_floor_user(scaler: Mapping[str, Any], namespace: str, tidal_name: str) -> bool:
    """True when ``scaler`` (an ElasticScaler or LLMScaler object) in ``namespace`` names Tidal
    ``tidal_name`` in ``spec.floorFrom``."""
    spec = scaler.get("spec")
    floor = spec.get("floorFrom") if isinstance(spec, Mapping) else None
    return (isinstance(floor, Mapping) and floor.get("name") == tidal_name
            and floor.get("kind", Tidal.KIND) == Tidal.KIND
            and str(_meta(scaler).get("namespace") or "") == namespace)


def floor_user(bindings: TargetBindings, namespace: str, tidal_name: str, target: TargetKey) -> bool:
    """True when the scaler that writes ``target`` (the winning claimant) uses this Tidal as its floor."""
    claimants = bindings.claimants(target)
    if not claimants:
        return False
    winner = claimants[0]
    obj = _claimant_object(bindings, winner.kind, winner.namespace, winner.name)
    return obj is not None and is_floor_user(obj, namespace, tidal_name)


def _claimant_object(bindings: TargetBindings, kind: str, namespace: str,
                     name: str) -> Mapping[str, Any] | None:
    for src_kind, informer, _ in bindings.claim_sources():
        if src_kind == kind:
            obj = informer.indexer.get_by_key(f"{namespace}/{name}" if namespace else name)
            return obj if isinstance(obj, Mapping) else None
    return None


def conflict_of(bindings: TargetBindings, namespace: str, tidal_name: str, target: TargetKey) -> str | None:
    """Why another scaler, not this Tidal's follower, decides ``target``'s replicas; None when none."""
    hpas = bindings.foreign_hpas(target)
    if hpas:
        return (f"spec.targetRef {target.describe()} is also scaled by HorizontalPodAutoscaler "
                f"{namespace}/{hpas[0]}, which escaler does not own: the follower holds rather than fight it")
    claimants = bindings.claimants(target)
    if not claimants:
        return None
    winner = claimants[0]
    obj = _claimant_object(bindings, winner.kind, winner.namespace, winner.name)
    if obj is not None and is_floor_user(obj, namespace, tidal_name):
        return None
    if winner.kind == ElasticScaler.KIND and obj is not None and is_follower(obj, namespace, tidal_name):
        return None
    return (f"spec.targetRef {target.describe()} is written by {winner.describe()}, which does not follow "
            f"this Tidal (one writer per workload): its decisions, not this schedule, set the replicas")


def _keys(targets: Any) -> tuple[TargetKey, ...]:
    """What a claim source's ``target_of`` returned, as a tuple (one key, several, or none)."""
    if targets is None:
        return ()
    if isinstance(targets, TargetKey):
        return (targets,)
    return tuple(t for t in targets if isinstance(t, TargetKey))


def tidals_on(tidals: Any, targets: Sequence[TargetKey]) -> list[Request]:
    """The Tidals (from the indexed Tidal informer's ``indexer``) whose target is one of ``targets``."""
    out: list[Request] = []
    for key in targets:
        for obj in tidals.by_index(TIDAL_TARGET_INDEX, str(key)):
            meta = _meta(obj)
            out.append(Request(str(meta.get("namespace") or ""), str(meta.get("name") or "")))
    return out


class _ClaimChanged:
    """Pass creates and deletes, and updates that change what an object claims or its generation."""

    def __init__(self, target_of: Callable[[Mapping[str, Any]], Any]) -> None:
        # the claim source's index function; fixed
        self._target_of = target_of

    def _claim(self, obj: Mapping[str, Any]) -> tuple[tuple[TargetKey, ...], Any]:
        try:
            keys = _keys(self._target_of(obj))
        except Exception:  # a malformed object claims nothing
            keys = ()
        return keys, _meta(obj).get("generation")

    def create(self, obj: Mapping[str, Any]) -> bool:
        return True

    def update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        return self._claim(old) != self._claim(new)

    def delete(self, obj: Mapping[str, Any]) -> bool:
        return True

    def generic(self, obj: Mapping[str, Any]) -> bool:
        return True


class ClaimWatch:
    """A controller ``Source``: claim changes on any scaler kind enqueue the Tidals on that target."""

    def __init__(self, bindings: TargetBindings, tidals: Any) -> None:
        # the shared binding index; its claim sources are read at start()
        self._bindings = bindings
        # the Tidal informer's indexer (TIDAL_TARGET_INDEX added by setup_tidal)
        self._tidals = tidals
        # one Kind source per claim source informer while started; empty before start and after stop
        self._kinds: list[Kind] = []

    def _mapper(self, target_of: Callable[[Mapping[str, Any]], Any]) -> MapFunc:
        def tidals(obj: Mapping[str, Any]) -> list[Request]:
            return tidals_on(self._tidals, _keys(target_of(obj)))

        return tidals

    def start(self, queue: Any) -> None:
        for kind, informer, target_of in self._bindings.claim_sources():
            source = Kind(informer, EnqueueRequestsFromMapFunc(self._mapper(target_of)),
                          [_ClaimChanged(target_of)], description=f"claims of {kind} (Tidal conflicts)")
            source.start(queue)
            self._kinds.append(source)

    def wait_for_sync(self, timeout: float) -> bool:
        return all(k.wait_for_sync(timeout) for k in self._kinds)

    def stop(self) -> None:
        kinds, self._kinds = self._kinds, []
        for k in kinds:
            k.stop()
