"""Status drift: which status changes are worth an API write (idle must mean idle).

A scaler's status is what a user acts on, not a live feed: with a metric that wobbles inside the
algorithm's tolerance, writing ``currentMetrics[].value`` on every poll would cost one status
patch per scaler per poll (~330 writes/s at 10,000 scalers on a 30 s poll) while nothing scales.
So a status that differs from the one the cluster holds is written **at once** when the difference
is *significant*:

* anything but ``conditions`` and ``currentMetrics`` changed: the replica counts
  (``currentReplicas``, ``desiredReplicas``), ``recentDecisions`` and ``lastScaleTime`` (a
  decision), ``deferredSince``, ``observedGeneration``, ``resolvedTargetRef``, ``hpaName``;
* a condition changed its type, status, reason, observedGeneration or lastTransitionTime (a
  condition appeared or went away, too), or its message changed — for a condition whose status is
  not True (a failure: its message carries error text, which embeds latencies, sizes and times),
  only a change in more than its numbers counts; a True condition's message is made of the counts
  the controller decided ("recommends 5 replicas", "the target is at the desired count (4)") and
  is compared exactly;
* a ``currentMetrics`` row appeared or went away, or changed anything but its value and the
  numbers of its error text: its name, type, target, targetType or ``recommendedReplicas`` (the
  per-metric recommendation: what the algorithm makes of the value), an error appearing or
  clearing;
* a row's value moved *beyond the significance* from the value the cluster holds:
  ``|new - held| > significance * max(|held|, |target|)`` — with the significance the scaler's
  algorithm tolerance (apa's ``algorithmConfig.tolerance``, default 0.1; ``DEFAULT_SIGNIFICANCE``
  for other algorithms, whose recommendation change is caught by ``recommendedReplicas``), never
  below ``MIN_SIGNIFICANCE``. A move smaller than the tolerance band is, by the algorithm's own
  definition, noise; taking the larger of the value and the target as the scale keeps a value
  wobbling near zero (an idle queue) quiet. A value appearing or vanishing is significant.

Anything else is *drift* — a value inside the significance, an error text whose numbers changed
(``HTTP 503 after 1.2s`` → ``after 1.3s``, in a row's error or a failing condition's message) — and
is not written on its own: a status value is always within the significance of the live one, and
a noisy but steady scaler writes nothing at all (0 writes per idle scaler-hour, the issue 10 goal).
A manager may opt in to a periodic refresh of drift, ``--status-refresh-seconds`` (default 0:
never): drift is then written at most once per that interval, measured on the injected clock from
the last status write of that scaler (a manager that has not written a scaler yet counts from the
first drift it saw there, so a restart does not rewrite the fleet) — at 300 s, at most 12 writes per
scaler-hour. The exact live values are on ``/metrics`` (``escaler_scaler_metric_value``,
``escaler_current_replicas``, ``escaler_desired_replicas``; see
``escaler.reconcilers.kit.scalermetrics``), and ``escaler explain`` prints the status values with the
time they were last written.

``lastTransitionTime`` keeps its ``metav1.Condition`` meaning: a status flip is significant, so it is
written in the sync it happens, with that sync's time; a message-only change never touches it.

Pure functions over the JSON (camelCase) form of a status; no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from escaler.scaling.apa import tolerance_of

__all__ = [
    "DEFAULT_SIGNIFICANCE",
    "DEFAULT_STATUS_REFRESH_SECONDS",
    "MIN_SIGNIFICANCE",
    "mask_numbers",
    "significance_of",
    "significant",
    "value_moved",
]

# --status-refresh-seconds: drift (see the module docstring) is written at most this often per
# scaler, seconds; 0 = never on its own
DEFAULT_STATUS_REFRESH_SECONDS = 0.0
# the significance of a metric value's move when the algorithm states no tolerance (apa's default)
DEFAULT_SIGNIFICANCE = 0.1
# a value's move below this fraction is never significant by itself (a tolerance of 0 would
# otherwise make every float wobble a write); recommendedReplicas still catches what it decides
MIN_SIGNIFICANCE = 0.01

_APA = "apa"
_NUMBER = re.compile(r"[-+]?\d+(?:[.,:]\d+)*(?:[eE][-+]?\d+)?")
# status fields drift may touch; every other field must be equal
_DRIFTING = ("conditions", "currentMetrics")


def significance_of(algorithm: str, config: Mapping[str, str] | None) -> float:
    """The significance of a metric value's move for a scaler (see the module docstring)."""
    tolerance = tolerance_of(config or {}) if algorithm == _APA else DEFAULT_SIGNIFICANCE
    return max(MIN_SIGNIFICANCE, tolerance)


def mask_numbers(text: str) -> str:
    """``text`` with every number replaced by ``#``: two messages that differ only in numbers are drift."""
    return _NUMBER.sub("#", text)


def value_moved(held: float | None, new: float | None, target: float | None, significance: float) -> bool:
    """True when a metric value moved beyond ``significance`` (see the module docstring)."""
    if held is None or new is None:
        return held is not new
    if not (math.isfinite(held) and math.isfinite(new)):
        return held != new and not (math.isnan(held) and math.isnan(new))
    scale = max(abs(held), abs(target) if target is not None and math.isfinite(target) else 0.0)
    if scale == 0.0:
        return new != held
    return abs(new - held) > significance * scale


def significant(held: Mapping[str, Any], new: Mapping[str, Any], significance: float) -> bool:
    """True when status ``new`` differs from ``held`` (what the cluster holds) in a way worth a write
    at once; False when they are equal or differ only by drift."""
    keys = set(held) | set(new)
    if any(held.get(k) != new.get(k) for k in keys if k not in _DRIFTING):
        return True
    return _conditions_differ(held.get("conditions"), new.get("conditions")) or \
        _metrics_differ(held.get("currentMetrics"), new.get("currentMetrics"), significance)


def _rows(value: Any) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def _masked(row: Any, text_key: str) -> Any:
    """A row/condition with its ``text_key`` text number-masked (and anything not a mapping as is)."""
    if not isinstance(row, Mapping):
        return row
    text = row.get(text_key)
    return {**row, text_key: mask_numbers(text)} if isinstance(text, str) else dict(row)


def _condition(c: Any) -> Any:
    """A condition as compared: a failing one's message number-masked (see the module docstring)."""
    return c if isinstance(c, Mapping) and c.get("status") == "True" else _masked(c, "message")


def _conditions_differ(held: Any, new: Any) -> bool:
    a, b = _rows(held), _rows(new)
    return len(a) != len(b) or any(_condition(x) != _condition(y) for x, y in zip(a, b, strict=True))


def _metrics_differ(held: Any, new: Any, significance: float) -> bool:
    a, b = _rows(held), _rows(new)
    if len(a) != len(b):
        return True
    for x, y in zip(a, b, strict=True):
        if not (isinstance(x, Mapping) and isinstance(y, Mapping)):
            if x != y:
                return True
            continue
        if {k: v for k, v in _masked(x, "error").items() if k != "value"} != \
                {k: v for k, v in _masked(y, "error").items() if k != "value"}:
            return True
        if value_moved(_number(x.get("value")), _number(y.get("value")), _number(y.get("target")),
                       significance):
            return True
    return False


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
