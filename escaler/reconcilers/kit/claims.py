"""Which target an ElasticScaler object claims in the binding index (``escaler.reconcilers.kit.bindings``).

``target_of(obj)`` is the index function: it reads only the cached object (level-based, the same
answer in every replica) and returns the ``TargetKey`` the scaler holds, or None. "The older scaler
wins" (docs/concepts.md#conflicts-one-writer-per-workload) is only fair when the winner can act, so a scaler
claims **nothing** when:

* it is Advisory (it never writes);
* its spec cannot produce a decision: the object does not parse, a cross-field rule fails, its
  algorithm is not registered in this process, or it asks the companion HPA for a metric an HPA
  cannot read (``ExternalServer``) — an invalid older scaler must not block a valid younger one;
* it is a StateTrigger whose chain is not resolved: a StateTrigger claims the end of its chain as
  its status records it (``status.resolvedTargetRef``), which the reconciler writes *before* its
  first write to that target and clears when the chain breaks, so there is never a window in which
  two scalers write one target.

Validity depends only on the spec (``metadata.generation``), so ``Claims`` computes it once per
(uid, generation) and remembers it per uid (one ``Claims`` per informer that feeds an index, made
by the kind's setup): the index function runs on every update of every scaler, status writes
included. The memory follows the fleet, not its history: given ``live`` (the informer cache's
``list``), once the memo holds more than twice the uids it kept at its last pruning (and at least
``PRUNE_FLOOR``), the uids no longer in the cache are dropped — so entries stay within about twice
the live scalers however many are created and deleted, at an amortised O(1) per new uid. Without
``live`` (tests, embedders) it keeps the newest ``VALIDITY_CACHE_SIZE`` uids. ``scaler_target`` is
the plain reading, for the reconciler's own claim check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from escaler.api.common import Mode
from escaler.api.elasticscaler import HPA_ALGORITHM, ElasticScaler, TriggerType
from escaler.api.rules import validate
from escaler.reconcilers.kit.bindings import TargetKey
from escaler.scaling.registry import is_known_algorithm

__all__ = ["PRUNE_FLOOR", "VALIDITY_CACHE_SIZE", "Claims", "scaler_target", "spec_can_act"]

# uids remembered by a Claims without ``live`` (the newest kept)
VALIDITY_CACHE_SIZE = 65536
# a Claims with ``live`` never prunes below this many remembered uids
PRUNE_FLOOR = 1024


def spec_can_act(obj: Mapping[str, Any]) -> bool:
    """True when the spec of ``obj`` can produce a decision (uncached; see the module docstring)."""
    try:
        scaler = ElasticScaler.parse(obj)
    except (ValidationError, ValueError, TypeError):
        return False
    if list(validate(scaler)):
        return False
    mt = scaler.spec.trigger.metrics_trigger
    if mt is None:
        return True
    if mt.scaling_algorithm == HPA_ALGORITHM:
        return not any(m.external_server is not None for m in mt.metrics)
    return is_known_algorithm(mt.scaling_algorithm)


def scaler_target(obj: Mapping[str, Any]) -> TargetKey | None:
    """The target the object names or records, ignoring whether it may hold it."""
    spec, meta = obj.get("spec"), obj.get("metadata")
    if not isinstance(spec, Mapping) or not isinstance(meta, Mapping):
        return None
    trigger = spec.get("trigger")
    if isinstance(trigger, Mapping) and trigger.get("type") == TriggerType.STATE:
        status = obj.get("status")
        ref = status.get("resolvedTargetRef") if isinstance(status, Mapping) else None
    else:
        ref = spec.get("targetRef")
    if not isinstance(ref, Mapping) or not ref.get("kind") or not ref.get("name"):
        return None
    try:
        return TargetKey.from_ref(str(meta.get("namespace") or ""), str(ref.get("apiVersion") or ""),
                                  str(ref["kind"]), str(ref["name"]))
    except ValueError:
        return None


class Claims:
    """The binding index function of a scaler kind (ElasticScalers unless ``can_act`` says otherwise:
    ``scaler_target`` reads ``spec.targetRef`` of any kind without a StateTrigger), with its validity
    cache."""

    def __init__(self, cache_size: int = VALIDITY_CACHE_SIZE,
                 can_act: Callable[[Mapping[str, Any]], bool] | None = None,
                 live: Callable[[], Iterable[Mapping[str, Any]]] | None = None) -> None:
        # whether a spec can produce a decision (``spec_can_act``; LLMScaler passes its own); fixed
        self._spec_can_act = can_act if can_act is not None else spec_can_act
        # the objects the informer caches now (its store's ``list``), or None; fixed
        self._live = live
        # the bound without ``live``; fixed
        self._cache_size = cache_size
        # guards _validity and _prune_at (index functions run on informer and handler threads)
        self._mu = threading.Lock()
        # uid → (generation, spec_can_act of that generation); insertion-ordered, oldest first
        self._validity: dict[str, tuple[int, bool]] = {}
        # with ``live``: prune when the memo grows past this many uids
        self._prune_at = PRUNE_FLOOR

    def can_act(self, obj: Mapping[str, Any]) -> bool:
        uid, generation = _identity(obj)
        with self._mu:
            hit = self._validity.get(uid)
        if hit is not None and hit[0] == generation:
            return hit[1]
        found = self._spec_can_act(obj)
        with self._mu:
            self._validity.pop(uid, None)  # re-inserted last: the oldest-first order holds
            self._validity[uid] = (generation, found)
            due = len(self._validity) > (self._prune_at if self._live is not None else self._cache_size)
        if due:
            self._prune()
        return found

    def remembered(self) -> int:
        """How many uids the validity memo holds (for tests and debugging)."""
        with self._mu:
            return len(self._validity)

    def _prune(self) -> None:
        """Drop what no longer matters: uids the cache no longer holds (with ``live``; listed outside
        the lock — an index function may run under the store's lock and then take ours), else the
        oldest uids beyond ``cache_size``. A uid dropped too eagerly (an object being added right
        now) only costs one recomputation."""
        keep = {_identity(o)[0] for o in self._live()} if self._live is not None else None
        with self._mu:
            if keep is not None:
                self._validity = {u: v for u, v in self._validity.items() if u in keep}
                self._prune_at = max(PRUNE_FLOOR, 2 * len(self._validity))
                return
            for uid in list(self._validity)[:len(self._validity) - self._cache_size]:
                del self._validity[uid]

    def target_of(self, obj: Mapping[str, Any]) -> TargetKey | None:
        """The target ``obj`` holds in the binding index, or None (see the module docstring)."""
        spec = obj.get("spec")
        if not isinstance(spec, Mapping) or spec.get("mode") == Mode.ADVISORY:
            return None
        key = scaler_target(obj)
        if key is None or not self.can_act(obj):
            return None
        return key


def _identity(obj: Mapping[str, Any]) -> tuple[str, int]:
    """(uid — the name when there is none, as in tests —, generation) of ``obj``."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return str(meta.get("uid") or meta.get("name") or ""), int(meta.get("generation") or 0)
