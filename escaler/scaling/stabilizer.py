"""Stabilization (docs/concepts.md#the-decision-pipeline step 2): damp flapping by remembering recent
recommendations.

Contract (the HPA v2 behavior algorithm, with the scaler's own windows):

* ``stabilize(history, recommendation, now, up_window, down_window, current=...)`` returns
  ``(count, new_history, stabilized)``:

  - *scale-down* stabilization keeps the **highest** recommendation seen within the last
    ``down_window`` seconds (default 300): the count only falls once every recent recommendation
    allows it;
  - *scale-up* stabilization keeps the **lowest** recommendation within the last ``up_window``
    seconds (default 0, i.e. off): the count only rises once every recent recommendation asks
    for it;
  - both start from the *current* count, as HPA does: ``count = min(max(current, lowest_up),
    highest_down)``, where each extreme includes this sync's recommendation. A high
    recommendation from a minute ago therefore never *raises* the count on its own: it can only
    hold it where it is. (That is why ``current`` is an argument: without it a stale high
    recommendation would scale up.)
  - ``stabilized`` is ``count != recommendation``.

* A window covers ``now - window < time <= now`` plus this sync's recommendation; a window of 0
  covers only this sync's recommendation.
* ``history`` is the scaler's past recommendations, oldest first, as ``Recommendation`` values
  (or plain ``(time, replicas)`` pairs). ``new_history`` is ``history`` pruned to the longer window,
  *compacted* (an entry with a newer entry >= it and a newer entry <= it can never decide either
  window again, so it is dropped — this keeps the history as short as the number of distinct
  recent counts), capped at ``MAX_HISTORY`` entries, with ``(now, recommendation)`` appended.
* ``stabilization_changes_at(...)`` is the earliest moment the stabilized count can change with no
  new recommendation: when the newest entry still holding the count expires from its window.
  Reconcilers requeue for it instead of polling on a fixed tick.

Times are seconds on one clock the caller chooses (the pipeline uses wall-clock seconds since the
epoch). The history lives in the reconciler's memory, as HPA's does. A restart or a leader change
must not forget it into an early scale-down: a reconciler without in-memory state seeds it with
``PipelineState.seed`` (``escaler.scaling.pipeline``), one entry equal to the current count, which
is conservative (the argument is in ``seed``'s docstring). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from escaler.scaling.algorithm import Recommendation

__all__ = [
    "MAX_HISTORY",
    "History",
    "HistoryEntry",
    "as_history",
    "stabilization_changes_at",
    "stabilize",
]

# a scaler's recommendation history, oldest first
History = tuple[Recommendation, ...]
# what callers may pass as one history entry
HistoryEntry = Recommendation | tuple[float, int]
# backstop on the history's length after compaction (only reached by a pathological flapping source)
MAX_HISTORY = 1024


def _check_seconds(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _check_count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
    return value


def as_history(entries: Iterable[HistoryEntry]) -> History:
    """``entries`` as ``Recommendation`` values, validated, in the given (oldest-first) order."""
    out: list[Recommendation] = []
    for entry in entries:
        rec = entry if isinstance(entry, Recommendation) else Recommendation(*entry)
        if isinstance(rec.time, bool) or not isinstance(rec.time, int | float) or not math.isfinite(rec.time):
            raise ValueError(f"history entry time must be a finite number, got {rec.time!r}")
        _check_count(rec.replicas, "history entry replicas")
        out.append(rec)
    return tuple(out)


def _compact(entries: History) -> History:
    """Drop entries that have both a newer entry >= them and a newer entry <= them."""
    kept: list[Recommendation] = []
    newer_max = -1
    newer_min = math.inf
    for entry in reversed(entries):
        if entry.replicas > newer_max or entry.replicas < newer_min:
            kept.append(entry)
        newer_max = max(newer_max, entry.replicas)
        newer_min = min(newer_min, entry.replicas)
    kept.reverse()
    return tuple(kept[-MAX_HISTORY:])


def stabilize(
    history: Iterable[HistoryEntry],
    recommendation: int,
    now: float,
    up_window: float,
    down_window: float,
    *,
    current: int,
) -> tuple[int, History, bool]:
    """``(count, new_history, stabilized)``; see the module docstring."""
    _check_count(recommendation, "recommendation")
    _check_count(current, "current")
    up_window = _check_seconds(up_window, "up_window")
    down_window = _check_seconds(down_window, "down_window")
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise ValueError(f"now must be a finite number, got {now!r}")
    entries = as_history(history)
    longest = max(up_window, down_window)
    recent = tuple(e for e in entries if e.time > now - longest)
    lowest_up = min([e.replicas for e in recent if e.time > now - up_window] + [recommendation])
    highest_down = max([e.replicas for e in recent if e.time > now - down_window] + [recommendation])
    count = min(max(current, lowest_up), highest_down)
    new_history = (*_compact(recent), Recommendation(time=float(now), replicas=recommendation))
    return count, new_history, count != recommendation


def stabilization_changes_at(
    history: Iterable[HistoryEntry],
    count: int,
    recommendation: int,
    now: float,
    up_window: float,
    down_window: float,
) -> float | None:
    """When ``count`` (a ``stabilize`` result for ``recommendation`` at ``now``) can next change.

    ``None`` when the count is not stabilized (it equals the recommendation). ``history`` may be
    the one passed to ``stabilize`` or the one it returned.
    """
    entries = as_history(history)
    if count > recommendation:
        # held up by the scale-down window: the count can fall once the newest entry >= count expires
        holding = [e.time for e in entries if e.time > now - down_window and e.replicas >= count]
        return max(holding) + down_window if holding else None
    if count < recommendation:
        # held down by the scale-up window: it can rise once the newest entry <= count expires
        holding = [e.time for e in entries if e.time > now - up_window and e.replicas <= count]
        return max(holding) + up_window if holding else None
    return None
