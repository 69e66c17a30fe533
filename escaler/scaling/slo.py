"""SLO sizing (docs/slo.md): an SLO requirement's signals and current replicas → a replica decision.

Pure: data in, data out — no I/O, no clock (the caller stamps the decision's time).

**Bounds → replicas** (``replica_bounds``). A bound is ``{type, value}``:

* ``replica``: ``value`` replicas, as is;
* ``concurrency``: ``ceil(value / concurrencyPerReplica)`` replicas — the replicas needed to serve
  ``value`` concurrent requests. Both bounds round up, so the conversion is monotone and an LLM
  requirement's ``min <= max`` (same type, checked by CEL) survives it;
* ``pdengine`` (``deployType: pd`` only): ``value`` PD engine groups. In escaler a PD engine group is
  **one replica of the target**: the target of a pd requirement is a ResourceScalingGroup (or a
  LeaderWorkerSet), whose ``/scale`` replicas count groups — one prefill + decode unit
  (``TargetSnapshot.spec_replicas``: "for LWS and RSG: groups"). The decision is then in groups.

``0`` is a valid bound (scale to zero). Absent bounds mean ``[0, unbounded)``. A job's ``min`` may be
``concurrency`` while its ``max`` is ``replica`` (no CEL can compare them before conversion): when the
converted minimum exceeds the maximum, **the maximum wins** and the reason says so.

**LLM rule** (``size_llm``). Each objective gives a *ratio*, > 1 meaning the SLO is missed:

* TTFT (an upper bound): ``observed_ms / targetMs``;
* OTPS (a lower bound): ``target / observed``;
* in-flight requests (optional, ``load_objective``): ``inflight / (serving x concurrencyPerReplica)``
  with ``serving`` the ready replicas (the current count when unknown, at least 1). Latency alone
  is a poor capacity signal: an idle replica's TTFT is its prefill time, so a latency ratio far
  below 1 predicts a scale-down far deeper than the load allows (measured in ``escaler.sim``: the
  TTFT-only rule went 2 → 1 and saturated). The load ratio is linear in replicas, so with it the
  scale-down below lands where the load fits, and the scale-up of a saturated service is
  ``ceil(inflight / concurrencyPerReplica)`` rather than a multiple of a queueing delay.

With ``worst`` the largest ratio and ``n`` the current replicas:

* ``worst > 1`` → scale up, proportionally: ``ceil(max(n, 1) x worst)``; when only ``ready < n``
  replicas serve (the others still start: an LLM server loads its weights for minutes), the signal
  is what the ready ones carry, so the count is ``max(n, ceil(max(ready, 1) x worst))`` — the
  starting replicas count as capacity on its way and a cold start is not multiplied again at every
  poll while it loads (the HPA counts pods without metrics the same way on a scale-up);
* ``worst < 1 - band`` (every signal has headroom; ``band`` = ``DEFAULT_HYSTERESIS_BAND``) → one
  step down, to the smallest count whose *predicted* worst ratio stays at or below ``1 - band``
  under the linear model (load spreads evenly: a ratio scales as ``1 / replicas``):
  ``ceil(n x worst / (1 - band))``; when that is not below ``n`` the count holds;
* otherwise (``1 - band <= worst <= 1``, the hysteresis band) → hold ``n``.

Scaling down to a predicted ratio of ``1 - band`` (not ``1``) lands the next observation inside the
band, so noise around the target does not flap the count. An LLM decision never reaches 0 on its
own (a ratio model cannot predict zero load); 0 comes only from ``bounds.max`` 0.

**Job rule** (``size_job``): ``ceil(depth / maxDepth x n)``; from ``n == 0`` a non-empty queue
counts as ``n == 1`` (activation: ``ceil(depth / maxDepth)``), an empty one decides 0.

**Missing signals** (a query failed, or an OTPS of 0: no output tokens to judge): the decision
**holds** the last one (``last``; the current count when there is none), clamped to the current
bounds, with ``held`` set and the reason naming each missing signal and its error. A partial
reading is not acted on: a scale-down on half the picture could break the SLO the other half
measures.

Then the count is clamped to the bounds (last step).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from escaler.api.slo import Bound, BoundType, JobBounds, LLMBounds

__all__ = [
    "DEFAULT_HYSTERESIS_BAND",
    "INFLIGHT",
    "Decision",
    "Direction",
    "Objective",
    "ReplicaBounds",
    "bound_replicas",
    "hold",
    "load_objective",
    "replica_bounds",
    "size_job",
    "size_llm",
]

# scale down only when every ratio is below 1 - band (and only to a predicted ratio of 1 - band)
DEFAULT_HYSTERESIS_BAND = 0.1
# a band must leave room for a scale-down: 0 < band < MAX_HYSTERESIS_BAND
MAX_HYSTERESIS_BAND = 0.9
# the in-flight signal's name in Decision.signals (per serving replica)
INFLIGHT = "inflightPerReplica"
# float slack when rounding up a product that is an integer in exact arithmetic (4 x 1.25 = 5.000001)
_EPSILON = 1e-9


class Direction(StrEnum):
    """How an objective bounds its signal."""

    # the observed value must stay at or below the target (TTFT)
    UPPER = "upper"
    # the observed value must stay at or above the target (OTPS)
    LOWER = "lower"


@dataclass(frozen=True)
class Objective:
    """One SLO signal as read this sync."""

    # the signal's key in ``Decision.signals`` and in messages, e.g. "ttftMs"
    name: str
    # how the reason names it, e.g. "TTFT p90"
    label: str
    # the objective's target (> 0)
    target: float
    direction: Direction
    # the value read; None when it could not be read (``error`` says why)
    observed: float | None = None
    # why ``observed`` is None (a query error); None when it was read
    error: str | None = None
    # the target's key in ``Decision.signals``; "" = ``<name>Target``
    target_name: str = ""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target) and self.target > 0):
            raise ValueError(f"Objective.target: must be a finite number > 0, got {self.target!r}")

    def problem(self) -> str | None:
        """Why this objective cannot be judged this sync; None when it can."""
        if self.observed is None:
            return self.error or "no value"
        if not math.isfinite(self.observed) or self.observed < 0:
            return f"the value {self.observed!r} is not a finite number >= 0"
        if self.direction is Direction.LOWER and self.observed == 0:
            return "the value is 0 (nothing to judge it by: no output observed)"
        return None

    def ratio(self) -> float:
        """> 1 when the SLO is missed; only for an objective without ``problem()``."""
        assert self.observed is not None
        if self.direction is Direction.UPPER:
            return self.observed / self.target
        return self.target / self.observed


@dataclass(frozen=True)
class ReplicaBounds:
    """Bounds in replicas (see the module docstring)."""

    # lower bound, >= 0
    minimum: int = 0
    # upper bound, >= 0; None = unbounded
    maximum: int | None = None

    def __post_init__(self) -> None:
        if self.minimum < 0 or (self.maximum is not None and self.maximum < 0):
            raise ValueError(f"ReplicaBounds: bounds must be >= 0, got [{self.minimum}, {self.maximum}]")

    def clamp(self, n: int) -> tuple[int, str]:
        """``n`` within the bounds (the maximum wins over a larger minimum), and what bound it, if any."""
        if self.maximum is not None and n > self.maximum:
            return self.maximum, f"capped at bounds.max ({self.maximum} replicas)"
        if n < self.minimum:
            if self.maximum is not None and self.minimum > self.maximum:
                return self.maximum, (f"bounds.min ({self.minimum} replicas) exceeds bounds.max "
                                      f"({self.maximum}): the maximum wins")
            return self.minimum, f"raised to bounds.min ({self.minimum} replicas)"
        return n, ""


@dataclass(frozen=True)
class Decision:
    """A sizing result."""

    # decided replicas (>= 0), within the bounds
    replicas: int
    # why, in words: the driving signal and its ratio, the hold, the bound that applied
    reason: str
    # the values the decision was computed from (JSON numbers), e.g. {"ttftMs": 912.0, ...}
    signals: Mapping[str, float | int] = field(default_factory=dict)
    # True when missing signals held the last decision
    held: bool = False
    # the signals that could not be read, with why: ("ttftMs: HTTP 503", ...)
    missing: tuple[str, ...] = ()


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - _EPSILON))


def load_objective(inflight: float | None, error: str | None, *, concurrency_per_replica: int,
                   current: int, ready: int | None) -> Objective:
    """The in-flight requests as an objective: observed per serving replica (ready when known, else
    ``current``, at least 1), target ``concurrency_per_replica`` (see the module docstring)."""
    if concurrency_per_replica < 1:
        raise ValueError(f"concurrencyPerReplica: must be >= 1, got {concurrency_per_replica}")
    serving = max(1, ready if ready is not None else current)
    per = None if inflight is None or not math.isfinite(inflight) else inflight / serving
    if inflight is not None and per is None:
        error = f"the value {inflight!r} is not a finite number >= 0"
    return Objective(INFLIGHT, "in-flight requests per serving replica", float(concurrency_per_replica),
                     Direction.UPPER, per, error, target_name="concurrencyPerReplica")


def bound_replicas(bound: Bound, concurrency_per_replica: int) -> int:
    """One bound in replicas (see the module docstring)."""
    if concurrency_per_replica < 1:
        raise ValueError(f"concurrencyPerReplica: must be >= 1, got {concurrency_per_replica}")
    if bound.type is BoundType.CONCURRENCY:
        return _ceil(bound.value / concurrency_per_replica)
    return bound.value  # replica, and pdengine: one engine group is one replica of the target


def replica_bounds(bounds: LLMBounds | JobBounds | None, concurrency_per_replica: int) -> ReplicaBounds:
    if bounds is None:
        return ReplicaBounds()
    return ReplicaBounds(bound_replicas(bounds.min, concurrency_per_replica),
                         bound_replicas(bounds.max, concurrency_per_replica))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _with_bound(n: int, why: str, bounds: ReplicaBounds) -> tuple[int, str]:
    clamped, note = bounds.clamp(n)
    return clamped, f"{why}; {note}" if note else why


def hold(last: int | None, current: int, bounds: ReplicaBounds, missing: Sequence[str],
         signals: Mapping[str, float | int]) -> Decision:
    """The decision of a sync with ``missing`` signals (``"<name>: <why>"`` each): the last one (the
    current count when there is none), within the bounds, held and saying why (the module docstring)."""
    base = last if last is not None else current
    what = (f"holding the last decision ({base} replicas)" if last is not None
            else f"no decision yet: holding the current count ({base} replicas)")
    n, why = _with_bound(base, f"signals missing ({'; '.join(missing)}): {what}", bounds)
    return Decision(n, why, dict(signals), held=True, missing=tuple(missing))


def _signals(objectives: Sequence[Objective], current: int) -> dict[str, float | int]:
    out: dict[str, float | int] = {"currentReplicas": current}
    for o in objectives:
        if o.observed is not None and math.isfinite(o.observed):
            out[o.name] = o.observed
        out[o.target_name or f"{o.name}Target"] = o.target
    return out


def size_llm(objectives: Sequence[Objective], *, current: int, bounds: ReplicaBounds, last: int | None,
             band: float = DEFAULT_HYSTERESIS_BAND, ready: int | None = None) -> Decision:
    """The LLM rule of the module docstring."""
    if not 0 < band < MAX_HYSTERESIS_BAND:
        raise ValueError(f"band: must be in (0, {MAX_HYSTERESIS_BAND}), got {band!r}")
    if current < 0:
        raise ValueError(f"current: must be >= 0, got {current}")
    if ready is not None and ready < 0:
        raise ValueError(f"ready: must be >= 0, got {ready}")
    signals = _signals(objectives, current)
    if not objectives:
        n, why = _with_bound(current, "no ttft, otps or inflight signal: the current count "
                                      f"({current} replicas) within the bounds", bounds)
        return Decision(n, why, signals)
    missing = [f"{o.name}: {p}" for o in objectives if (p := o.problem()) is not None]
    if missing:
        return hold(last, current, bounds, missing, signals)
    driver = max(objectives, key=lambda o: o.ratio())
    worst = driver.ratio()
    assert driver.observed is not None
    seen = (f"{driver.label} {_fmt(driver.observed)} vs target {_fmt(driver.target)} "
            f"(ratio {worst:.3f})")
    floor = 1.0 - band
    if worst > 1.0 and ready is not None and ready < current:
        # replicas still starting serve nothing yet: the signal is what the ready ones carry; they
        # count as capacity on its way (never below the current count), so a slow cold start is not
        # multiplied again at every poll while it loads
        raw = max(current, _ceil(max(ready, 1) * worst))
        why = (f"{seen} misses the SLO with {ready} of {current} replicas ready: "
               + (f"scale up {current} -> {raw}" if raw > current else
                  f"holding {current} while {current - ready} start"))
    elif worst > 1.0:
        raw = _ceil(max(current, 1) * worst)
        why = f"{seen} misses the SLO: scale up {current} -> {raw}"
    elif worst < floor:
        raw = _ceil(current * worst / floor)
        if raw < current:
            why = (f"every signal has headroom (worst: {seen} < {floor:.2f}): scale down {current} -> {raw}, "
                   f"the smallest count predicted to stay at or below {floor:.2f}")
        else:
            raw = current
            why = (f"every signal has headroom (worst: {seen}) but not enough to remove a replica: "
                   f"holding {current}")
    else:
        raw = current
        why = f"within the hysteresis band [{floor:.2f}, 1.00] (worst: {seen}): holding {current}"
    n, why = _with_bound(raw, why, bounds)
    return Decision(n, why, signals)


def size_job(depth: Objective, *, current: int, bounds: ReplicaBounds, last: int | None) -> Decision:
    """The job rule of the module docstring; ``depth`` carries the queue depth and ``maxDepth`` as its
    target (an upper bound)."""
    if current < 0:
        raise ValueError(f"current: must be >= 0, got {current}")
    signals: dict[str, float | int] = {"currentReplicas": current,
                                       depth.target_name or f"{depth.name}Target": depth.target}
    problem = depth.problem()
    if problem is not None:
        return hold(last, current, bounds, [f"{depth.name}: {problem}"], signals)
    assert depth.observed is not None
    signals[depth.name] = depth.observed
    base = current if current > 0 else 1
    raw = _ceil(depth.observed / depth.target * base) if depth.observed > 0 else 0
    why = (f"queue depth {_fmt(depth.observed)} / maxDepth {_fmt(depth.target)} x {base} replicas"
           f"{' (activation from zero)' if current == 0 and raw > 0 else ''} -> {raw}")
    n, why = _with_bound(raw, why, bounds)
    return Decision(n, why, signals)
