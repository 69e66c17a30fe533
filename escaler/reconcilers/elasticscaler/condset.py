"""``ConditionSet``: a status's conditions, updated HPA-style (lastTransitionTime kept unless the
status flips), for the paths the decision pipeline's ``conditions_for`` does not cover (the
companion-HPA mirror, holds before any decision: invalid spec, conflicts, a broken chain).

* ``set(type, status, reason, message)`` replaces one condition; its ``lastTransitionTime`` is the
  previous one's when the previous condition of that type had the same status, else ``now``.
  Every condition carries ``observedGeneration``.
* ``transitions()`` lists the types whose (status, reason) changed against the previous
  conditions — what an event should be emitted for, so a steady state emits nothing.
* Conditions keep a stable order (``ORDER``, the one ``escaler.scaling.conditions`` uses, then any
  other type alphabetically); stale types
  escaler no longer writes (``ScalingDeferred``) are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from escaler.api.conditions import Condition, ConditionStatus

__all__ = ["DROPPED_TYPES", "ORDER", "ConditionSet", "cap_message"]

ORDER = ("ScalingActive", "AbleToScale", "ScalingLimited", "Validated", "MetricsPipeline")
# condition types removed on the first status write (SPEC §3: a stale ScalingDeferred)
DROPPED_TYPES = frozenset({"ScalingDeferred"})
# metav1.Condition's message limit
MAX_MESSAGE = 32768


def cap_message(message: str, limit: int = MAX_MESSAGE) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _parse(items: Iterable[Any]) -> list[Condition]:
    out = []
    for c in items:
        try:
            out.append(c if isinstance(c, Condition) else Condition.model_validate(c))
        except ValueError:
            continue
    return out


class ConditionSet:
    """Mutable conditions for one status write; see the module docstring."""

    def __init__(self, previous: Iterable[Condition | Mapping[str, Any]], generation: int | None,
                 now: datetime) -> None:
        # the conditions as they were before this sync, by type
        self._previous = {c.type: c for c in _parse(previous)}
        # the conditions being built, by type (starts as the previous ones, minus dropped types)
        self._current = {t: c for t, c in self._previous.items() if t not in DROPPED_TYPES}
        self._generation = generation
        self._now = now

    def set(self, type_: str, status: bool | str, reason: str, message: str) -> None:
        st = ConditionStatus(("True" if status else "False") if isinstance(status, bool) else status)
        prev = self._previous.get(type_)
        when = prev.last_transition_time if prev is not None and prev.status == st else self._now
        self._current[type_] = Condition(type=type_, status=st, observed_generation=self._generation,
                                         last_transition_time=when, reason=reason,
                                         message=cap_message(message))

    def replace_all(self, conditions: Iterable[Condition]) -> None:
        """Take ``conditions`` (e.g. from ``conditions_for``) as the set's content for their types."""
        for c in conditions:
            self._current[c.type] = c

    def remove(self, type_: str) -> None:
        self._current.pop(type_, None)

    def get(self, type_: str) -> Condition | None:
        return self._current.get(type_)

    def previous(self, type_: str) -> Condition | None:
        return self._previous.get(type_)

    def transitions(self) -> list[str]:
        out = []
        for t, c in self._current.items():
            prev = self._previous.get(t)
            if prev is None or (prev.status, prev.reason) != (c.status, c.reason):
                out.append(t)
        return out

    def conditions(self) -> list[Condition]:
        rank = {t: i for i, t in enumerate(ORDER)}
        return sorted(self._current.values(), key=lambda c: (rank.get(c.type, len(ORDER)), c.type))
