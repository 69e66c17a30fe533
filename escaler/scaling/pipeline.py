"""The decision pipeline (docs/concepts.md#the-decision-pipeline), shared by every scaler:
``decide(PipelineInput) -> Decision``.

One pure function per step, composed in this order:

1. **recommend** — done before ``decide`` by the trigger's source (an algorithm over metrics, a
   State source, a signal, a custom provider); ``PipelineInput.recommend`` (a
   ``RecommendResult``) carries its raw count, or why there is none (``no_decision`` →
   ``ScalingActive=False/DecisionUnavailable``; ``invalid`` → ``False/InvalidSpec``);
2. **stabilize** (``stabilizer.stabilize``) — scale-down keeps the highest recommendation within
   its window, scale-up the lowest;
2b. **rateLimit** — an algorithm with its own per-sync rate cap (apa's ``scaleUpRate``/
   ``scaleDownRate``) reports its raw recommendation in ``RecommendResult.uncapped`` and the band
   its cap allows this step in ``RecommendResult.rate_band``: the *raw* recommendation is
   stabilized and the band applied to the result, as the HPA applies its rate policies after
   stabilizing raw recommendations (a window of capped counts would hold a scale-down of several
   rate steps one window per step). The step records ``stabilized → capped`` (``BoundBy.RATE_LIMIT``,
   ``ScalingLimited`` ScaleUpLimit/ScaleDownLimit unless a later step changes the count). An
   algorithm that reports ``uncapped`` without a band has the cap shown before stabilize, as applied;
3. **limit_step** (``limits.limit_step``) — per-direction, per-sync step limits (LLMScaler never
   caps scale-up: ``Behavior.allow_scale_up_limit=False``);
4. **clamp** (``limits.clamp``) to ``[minReplicas, maxReplicas]`` — *last*, so a lowered
   ``maxReplicas`` applies at once, even while a scale-down is being stabilized;
5. **guards** + **defer** (``guards.guards``, ``guards.defer``) — ``RolloutInProgress`` (any
   write), ``ScaleDownSettling`` (a scale-down), ``InsufficientCapacity`` (a scale-up) hold the
   write, from the facts the target's ResourceHandler computed (``guards.TargetSnapshot``); a held
   write is forced after ``deferTimeoutSeconds`` and forced writes are paced;
6. **write** — ``Decision.write`` says whether the reconciler writes ``Decision.desired`` now
   (only when the count changes, never in Advisory mode).

Special cases, in precedence order:

* ``paused_replicas`` (``elasticscaler.io/paused-replicas: N``): pin to N. Stabilization, limits,
  clamp and guards are bypassed (they are still computed and shown, not applied); the write
  happens when N differs from the current count. If ``paused`` is also set, the pin wins (as
  KEDA's ``paused-replicas`` does).
* ``paused`` (``elasticscaler.io/paused: "true"``): freeze. Nothing is written, the desired count
  is the current one, the history is left as it was and a running deferral is cleared (nothing is
  being held). The pipeline is still computed and shown, for ``escaler explain``.
* ``InvalidSpec`` / ``DecisionUnavailable``: no recommendation; the current count is held, apart
  from the min/max bounds (``clamp(current)``), and that write still passes the guards. The
  history is not touched.
* **fallback** (``PipelineInput.fallback``, ``escaler.scaling.fallback``): a DecisionUnavailable
  sync of a scaler whose fallback is *engaged* (``failureThreshold`` consecutive polls without a
  usable signal) takes ``fallback.replicas`` as its recommendation — its own ``fallback`` step
  after ``recommend`` — and runs it through stabilize, step limits, clamp and guards like any
  recommendation (recorded in the history: when the signal returns, a scale-down below it waits
  for the scale-down window). ScalingActive stays False/DecisionUnavailable. Below the threshold
  the count is held and a ``fallback`` step says how many polls remain.
* **activation** (``RecommendResult.activation``, ``escaler.scaling.activation``): a MetricsTrigger
  with ``activation`` adds its own ``activation`` step after ``recommend``: below the activation
  value the recommendation becomes 0 (the algorithm's rate band is dropped, so the count can reach
  0; the scale-down window, step limits and the clamp still apply), above it at least 1. A wake
  (current 0, active) is immediate: stabilize never keeps it at 0. ``BoundBy.ACTIVATION`` when the
  step changed the count.
* **floor** (``PipelineInput.floor``, ``escaler.scaling.floor``): a scaler with ``spec.floorFrom``
  adds its own ``floor`` step after recommend (and fallback, activation) and before stabilize: the
  recommendation becomes ``max(recommendation, floor)`` (the algorithm's rate band is widened to
  let the floor through at once). Being before stabilize, the floor is recorded in the history, so
  at a rule's end the count comes down through the scale-down window; step limits and the clamp
  (last) still apply. A sync without a decision (DecisionUnavailable, InvalidSpec) holds the
  current count raised to the floor, then clamps (the history is not touched); ScalingDisabled and
  the pause annotations ignore it. ``BoundBy.FLOOR`` when the step raised the count; the decision's
  ``requeue_after`` includes the floor's next change (a rule's next start or end), so a floor begins
  and ends on time.
* ``ScalingDisabled``: the target is at 0 replicas and the trigger cannot scale from zero
  (``RecommendResult.can_scale_from_zero=False``): nothing is written (not even to reach
  ``minReplicas``: 0 is how a user switches a workload off).
* ``advisory``: everything is computed, including the deferral state machine (as if the
  would-be write had happened, so the reported state is what Active mode would show), but
  ``Decision.write`` is False; ``Decision.would_write`` says what Active mode would do.

Time: ``PipelineInput.now`` is **wall-clock seconds since the epoch** (the reconciler passes
``clock.now().timestamp()``), because ``deferredSince`` is persisted in status and must survive a
restart; the stabilization history (in memory) uses the same clock. Nothing here reads a clock.

``Decision.requeue_after`` is the delay in seconds until the earliest moment the outcome can
change with no new event — the end of the stabilization window holding the count, the moment a
held write will be forced (which includes the pacing of forced writes), or the next start or end of
a floor Tidal's rule — or ``None`` when only a
new event (a metric poll, a target change) can change it. Never a fixed tick.

``Decision.steps`` keeps each step's input, output and a note, so ``explain_lines`` (``escaler
explain``) can print the pipeline step by step. ``Decision.bound_by`` is the ``BoundBy`` member
(``escaler.api.scaler``, the enum of ``status.recentDecisions[].boundBy``) of the *last* step that
changed the count: ``Activation``, ``Floor``, ``RateLimit``, ``Stabilize``, ``StepLimit`` (either direction),
``Clamp`` (min or max), ``Guard``, ``Paused`` or ``PausedReplicas``; None when no step changed the
recommendation.
``Decision.limited_by`` is the finer ``ScalingLimited`` reason (``LIMIT_REASONS``: ScaleUpLimit,
ScaleDownLimit, TooFewReplicas, TooManyReplicas) of the last step among rateLimit, stabilize,
stepLimit and clamp that changed the count — None when that step is stabilize or none did ("last
step wins": a limit undone by a later step is not reported). Guards and pauses do not touch it.

Restart: a reconciler with no in-memory state for a scaler (a restart, a leader change) starts
from ``PipelineState.seed(now, current, deferred_since, last_scale_time)``, which never lets the
scaler scale down earlier than one uninterrupted leader would have (see ``seed``).
Pure: no I/O, no clock, no kube.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from escaler.api.scaler import DEFAULT_DEFER_TIMEOUT_SECONDS, BoundBy
from escaler.scaling.activation import ActivationState, describe
from escaler.scaling.activation import apply as apply_activation
from escaler.scaling.algorithm import Recommendation
from escaler.scaling.annotations import DEFAULTS, PAUSED, PAUSED_REPLICAS, ScalerAnnotations
from escaler.scaling.fallback import FallbackState
from escaler.scaling.floor import FloorState, apply_floor
from escaler.scaling.floor import describe as describe_floor
from escaler.scaling.guards import (
    DeferralOutcome,
    GuardHold,
    TargetSnapshot,
    defer,
    guards,
    insufficient_capacity,
)
from escaler.scaling.limits import clamp, limit_step
from escaler.scaling.stabilizer import History, HistoryEntry, as_history, stabilization_changes_at, stabilize
from escaler.scaling.text import MAX_ERROR_BYTES, cap_text, format_time

__all__ = [
    "ACTIVITIES",
    "DECISION_UNAVAILABLE",
    "DEFAULT_DEFER_TIMEOUT_SECONDS",
    "FROM_DECISION",
    "FROM_METRICS",
    "INVALID_SPEC",
    "LIMIT_REASONS",
    "MAX_REASON_LENGTH",
    "RECOMMENDED",
    "SCALE_DOWN_LIMIT",
    "SCALE_UP_LIMIT",
    "SCALING_DISABLED",
    "TOO_FEW_REPLICAS",
    "TOO_MANY_REPLICAS",
    "Behavior",
    "BoundBy",
    "Decision",
    "PipelineInput",
    "PipelineState",
    "RecommendResult",
    "Step",
    "clamp",
    "decide",
    "defer",
    "explain_lines",
    "fallback_note",
    "guards",
    "limit_step",
    "stabilize",
]

# RecentDecision.reason's maxLength
MAX_REASON_LENGTH = 1024
# a DecisionUnavailable / InvalidSpec message: the source plus the error capped at 1 KiB
_MAX_SOURCE_MESSAGE_BYTES = 2 * MAX_ERROR_BYTES

# where a recommendation came from: decides ScalingActive's True reason and whether MetricsPipeline
# is written
FROM_METRICS = "Metrics"    # an algorithm over metrics, or LLMScaler Prometheus → MetricsAvailable
FROM_DECISION = "Decision"  # a State source, a signal, a custom provider → DecisionReceived
_KINDS = (FROM_METRICS, FROM_DECISION)

# Decision.activity: what ScalingActive says about this sync
RECOMMENDED = "Recommended"                 # ScalingActive=True
DECISION_UNAVAILABLE = "DecisionUnavailable"
INVALID_SPEC = "InvalidSpec"
SCALING_DISABLED = "ScalingDisabled"
ACTIVITIES = (RECOMMENDED, DECISION_UNAVAILABLE, INVALID_SPEC, SCALING_DISABLED)

# Decision.limited_by values: the ScalingLimited=True reasons (docs/concepts.md#conditions-and-health)
SCALE_UP_LIMIT = "ScaleUpLimit"        # a scale-up rate cap or step limit cut the count
SCALE_DOWN_LIMIT = "ScaleDownLimit"    # a scale-down rate cap or step limit cut the count
TOO_FEW_REPLICAS = "TooFewReplicas"    # raised to minReplicas
TOO_MANY_REPLICAS = "TooManyReplicas"  # capped at maxReplicas
LIMIT_REASONS = (SCALE_UP_LIMIT, SCALE_DOWN_LIMIT, TOO_FEW_REPLICAS, TOO_MANY_REPLICAS)

# Step.name values (the rows of escaler explain)
_RECOMMEND = "recommend"
_FALLBACK = "fallback"
_ACTIVATION = "activation"
_FLOOR = "floor"
_RATE = "rateLimit"
_HOLD = "hold"
_STABILIZE = "stabilize"
_LIMIT = "stepLimit"
_CLAMP = "clamp"
_GUARD = "guard"
_PIN = "pausedReplicas"
_PAUSE = "paused"
_WRITE = "write"
# the steps that decide the count (limited_by looks at these only)
_DECIDING = (_RATE, _STABILIZE, _LIMIT, _CLAMP)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0


def _is_time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class RecommendResult:
    """The recommend step's result: a raw count, or why there is none. Exactly one of
    ``replicas``, ``unavailable``, ``invalid_spec`` is set; use the constructors."""

    # the recommendation the pipeline uses, >= 0 (after the algorithm's own rate cap, if any); None
    # when there is no decision
    replicas: int | None = None
    # DecisionUnavailable: the message, naming the source and the (capped) error
    unavailable: str | None = None
    # InvalidSpec: the message, naming the field and the rule
    invalid_spec: str | None = None
    # FROM_METRICS | FROM_DECISION
    kind: str = FROM_METRICS
    # who decided, for messages ("custom provider http://...", "Tidal default/night"); may be ""
    source: str = ""
    # usable metrics this sync (FROM_METRICS); 0 <= evaluated <= total
    evaluated: int = 0
    # metrics in the spec (FROM_METRICS)
    total: int = 0
    # why, in words, for recentDecisions and events (e.g. "cpu 140% of 70%"); may be ""
    detail: str = ""
    # per unusable metric, "name: error" (capped), for the MetricsPipeline message
    metric_errors: tuple[str, ...] = ()
    # False for a trigger that cannot scale a target up from 0 replicas (→ ScalingDisabled)
    can_scale_from_zero: bool = True
    # the algorithm's raw recommendation before its own rate cap (apa scaleUpRate/scaleDownRate),
    # >= 0; None = no cap applied or not reported. Only with `replicas`.
    uncapped: int | None = None
    # the band the algorithm's rate cap allows this step (lowest, highest; None = unbounded that
    # way), from the current count; given, the pipeline stabilizes `raw` and applies the band after
    rate_band: tuple[int | None, int | None] | None = None
    # MetricsTrigger ``activation`` and this poll's wake-capable readings; None without activation.
    # Only with `replicas` (no recommendation: activation is not consulted)
    activation: ActivationState | None = None

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.replicas, self.unavailable, self.invalid_spec)]
        if sum(given) != 1:
            raise ValueError(
                "RecommendResult: exactly one of replicas, unavailable, invalid_spec must be set")
        if self.replicas is not None and not _is_count(self.replicas):
            raise ValueError(f"RecommendResult.replicas must be an integer >= 0, got {self.replicas!r}")
        if self.uncapped is not None and (self.replicas is None or not _is_count(self.uncapped)):
            raise ValueError(f"RecommendResult.uncapped must be an integer >= 0 next to replicas, got "
                             f"{self.uncapped!r}")
        if self.activation is not None and self.replicas is None:
            raise ValueError("RecommendResult.activation is only given next to replicas")
        if self.kind not in _KINDS:
            raise ValueError(f"RecommendResult.kind must be one of {', '.join(_KINDS)}, got {self.kind!r}")
        if not (_is_count(self.evaluated) and _is_count(self.total) and self.evaluated <= self.total):
            raise ValueError(f"RecommendResult: need 0 <= evaluated <= total, got {self.evaluated!r} of "
                             f"{self.total!r}")
        if self.kind == FROM_METRICS and self.replicas is not None and self.evaluated < 1:
            raise ValueError("RecommendResult: a metrics recommendation needs at least one evaluated metric")
        object.__setattr__(self, "metric_errors", tuple(cap_text(e) for e in self.metric_errors))
        # backstop for callers that build the messages themselves: no_decision already caps the error
        # at 1 KiB; a whole message (source included) never exceeds 2 KiB
        for name in ("unavailable", "invalid_spec"):
            text = getattr(self, name)
            if text is not None:
                object.__setattr__(self, name, cap_text(text, _MAX_SOURCE_MESSAGE_BYTES))

    @classmethod
    def from_metrics(cls, replicas: int, *, evaluated: int, total: int, detail: str = "",
                     metric_errors: tuple[str, ...] = (), can_scale_from_zero: bool = True,
                     uncapped: int | None = None,
                     rate_band: tuple[int | None, int | None] | None = None,
                     activation: ActivationState | None = None) -> RecommendResult:
        """``evaluated`` of ``total`` metrics recommend ``replicas`` (ScalingActive=True/MetricsAvailable);
        ``uncapped`` is the algorithm's count before its own rate cap, when it has one, and
        ``rate_band`` the band that cap allows this step; ``activation`` the trigger's activation."""
        return cls(replicas=replicas, kind=FROM_METRICS, evaluated=evaluated, total=total, detail=detail,
                   metric_errors=metric_errors, can_scale_from_zero=can_scale_from_zero, uncapped=uncapped,
                   rate_band=rate_band, activation=activation)

    @classmethod
    def from_decision(cls, replicas: int, *, source: str, detail: str = "",
                      can_scale_from_zero: bool = True) -> RecommendResult:
        """A State/Signal/custom decision of ``replicas`` (ScalingActive=True/DecisionReceived)."""
        return cls(replicas=replicas, kind=FROM_DECISION, source=source, detail=detail,
                   can_scale_from_zero=can_scale_from_zero)

    @classmethod
    def no_decision(cls, source: str, error: str, *, kind: str = FROM_METRICS, evaluated: int = 0,
                    total: int = 0, metric_errors: tuple[str, ...] = (),
                    can_scale_from_zero: bool = True) -> RecommendResult:
        """No usable signal (ScalingActive=False/DecisionUnavailable): message ``"<source>: <error>"``,
        the error capped at 1 KiB. (LLMScaler Custom passes ``source="custom provider returned no
        decision"`` so that the message starts as docs/llmscaler.md says.)"""
        return cls(unavailable=f"{source}: {cap_text(error)}" if source else cap_text(error), kind=kind,
                   source=source, evaluated=evaluated, total=total, metric_errors=metric_errors,
                   can_scale_from_zero=can_scale_from_zero)

    @classmethod
    def invalid(cls, message: str, *, kind: str = FROM_METRICS, total: int = 0) -> RecommendResult:
        """The spec cannot produce a decision (ScalingActive=False/InvalidSpec)."""
        return cls(invalid_spec=cap_text(message), kind=kind, total=total)

    @property
    def raw(self) -> int | None:
        """The source's count before any cap: ``uncapped`` when reported, else ``replicas``."""
        return self.uncapped if self.uncapped is not None else self.replicas

    def summary(self) -> str:
        """One line: what the source said (the ScalingActive message; the raw count, before a rate cap)."""
        if self.invalid_spec is not None:
            return self.invalid_spec
        if self.unavailable is not None:
            return self.unavailable
        if self.kind == FROM_METRICS:
            return f"evaluated {self.evaluated} of {self.total} metrics; recommends {self.raw} replicas"
        source = self.source or "the decision source"
        return f"received a decision from {source}: {self.raw} replicas"


@dataclass(frozen=True)
class Behavior:
    """A scaler's bounds and behavior policies (validated)."""

    # lower bound; >= 0
    min_replicas: int
    # upper bound; >= min_replicas
    max_replicas: int
    # scale-up stabilization window, seconds; >= 0
    scale_up_stabilization_seconds: float = DEFAULTS.scale_up_stabilization_seconds
    # scale-down stabilization window, seconds; >= 0
    scale_down_stabilization_seconds: float = DEFAULTS.scale_down_stabilization_seconds
    # at most this many replicas added per sync; >= 1, None = unlimited
    scale_up_max_pods: int | None = DEFAULTS.scale_up_max_pods_per_step
    # at most this many replicas removed per sync; >= 1, None = unlimited
    scale_down_max_pods: int | None = DEFAULTS.scale_down_max_pods_per_step
    # False for LLMScaler: scale-up is never capped (scale_up_max_pods is then ignored)
    allow_scale_up_limit: bool = True
    # seconds a guard may hold a write before it is forced; >= 0, 0 = never force
    defer_timeout_seconds: float = DEFAULT_DEFER_TIMEOUT_SECONDS

    def __post_init__(self) -> None:
        if not (_is_count(self.min_replicas) and _is_count(self.max_replicas)):
            raise ValueError(f"Behavior: minReplicas and maxReplicas must be integers >= 0, got "
                             f"{self.min_replicas!r} and {self.max_replicas!r}")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"Behavior: minReplicas ({self.min_replicas}) must be <= maxReplicas "
                             f"({self.max_replicas})")
        for name in ("scale_up_stabilization_seconds", "scale_down_stabilization_seconds",
                     "defer_timeout_seconds"):
            if not _is_seconds(getattr(self, name)):
                raise ValueError(f"Behavior.{name} must be a finite number >= 0, got {getattr(self, name)!r}")
        for name in ("scale_up_max_pods", "scale_down_max_pods"):
            value = getattr(self, name)
            if value is not None and not (_is_count(value) and value >= 1):
                raise ValueError(f"Behavior.{name} must be an integer >= 1 or None, got {value!r}")

    @classmethod
    def from_annotations(cls, annotations: ScalerAnnotations, *, min_replicas: int, max_replicas: int,
                         defer_timeout_seconds: float = DEFAULT_DEFER_TIMEOUT_SECONDS) -> Behavior:
        """ElasticScaler: the bounds from the spec, the behavior from the behavior annotations."""
        return cls(
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            scale_up_stabilization_seconds=annotations.scale_up_stabilization_seconds,
            scale_down_stabilization_seconds=annotations.scale_down_stabilization_seconds,
            scale_up_max_pods=annotations.scale_up_max_pods_per_step,
            scale_down_max_pods=annotations.scale_down_max_pods_per_step,
            defer_timeout_seconds=defer_timeout_seconds,
        )

    @classmethod
    def for_llmscaler(cls, *, min_replicas: int, max_replicas: int,
                      scale_down_stabilization_seconds: float = DEFAULTS.scale_down_stabilization_seconds,
                      scale_down_max_step_replicas: int | None = None,
                      defer_timeout_seconds: float = DEFAULT_DEFER_TIMEOUT_SECONDS) -> Behavior:
        """LLMScaler (docs/llmscaler.md): ``scaleDown`` only; no scale-up stabilization and no
        ScaleUpLimit."""
        return cls(
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            scale_up_stabilization_seconds=0,
            scale_down_stabilization_seconds=scale_down_stabilization_seconds,
            scale_up_max_pods=None,
            scale_down_max_pods=scale_down_max_step_replicas,
            allow_scale_up_limit=False,
            defer_timeout_seconds=defer_timeout_seconds,
        )


@dataclass(frozen=True, slots=True)
class PipelineState:
    """What a scaler carries from one sync to the next (the reconciler keeps it)."""

    # past recommendations, oldest first, compacted (see stabilizer); in memory only
    history: History = ()
    # start of the running deferral (status.deferredSince), epoch seconds; None when nothing is held
    deferred_since: float | None = None
    # the last forced write, epoch seconds, for pacing; None when never. A reconciler that does not
    # keep it may pass status.lastScaleTime (paces forced writes against normal ones too; restart-safe)
    last_forced_write: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", as_history(self.history))
        for name in ("deferred_since", "last_forced_write"):
            value = getattr(self, name)
            if value is not None and not _is_time(value):
                raise ValueError(f"PipelineState.{name} must be a finite number or None, got {value!r}")

    @classmethod
    def of(cls, history: tuple[HistoryEntry, ...] = (), deferred_since: float | None = None,
           last_forced_write: float | None = None) -> PipelineState:
        """Build from plain ``(time, replicas)`` pairs as well as ``Recommendation`` values."""
        return cls(as_history(history), deferred_since, last_forced_write)

    @classmethod
    def seed(cls, now: float, current: int, deferred_since: float | None,
             last_scale_time: float | None) -> PipelineState:
        """The state for a scaler the reconciler holds no memory of (a restart, a leader change).

        ``now`` is the sync's time, ``current`` the target's count, ``deferred_since`` and
        ``last_scale_time`` are ``status.deferredSince`` and ``status.lastScaleTime`` (epoch seconds,
        None when absent). The result:

        * ``history = ((now, current),)``: one recommendation equal to the current count, as if it
          had just been recommended, so the scale-down window (and the scale-up window, when set)
          must elapse again from ``now`` before the count leaves ``current``;
        * ``deferred_since``: a running deferral goes on (its force time is not reset);
        * ``last_forced_write = last_scale_time``: forced writes stay paced across the restart.
          ``lastScaleTime`` is the last write of either kind, so a normal write paces a forced one
          too: never earlier than one leader, at most one ``deferTimeoutSeconds`` later.

        Why it never scales down earlier than one uninterrupted leader would have. Let ``c`` be
        ``current``, ``t0`` = ``now``, ``W`` the scale-down window, and ``R`` the recommendations
        made after ``t0`` (the same for both: same metrics, same algorithm). The stabilized count
        is ``min(max(current, lowest_up), highest_down)``: it never exceeds ``highest_down`` (the
        highest recommendation in the window, this sync's included) and, when it falls below the
        current count, it *equals* ``highest_down``. Hence:

        1. before ``t0 + W`` the seed entry ``c`` is in the window, so ``highest_down >= c``: the
           seeded count never falls below ``c`` (the count only changes by the pipeline's own
           writes, so by induction it stays ``>= c``);
        2. from ``t0 + W`` on, the seeded window holds only recommendations from ``R`` — exactly
           the ones the uninterrupted leader's window holds (its pre-restart entries, spikes
           included, have expired too): both compute the same ``highest_down``.

        So a seeded scale-down to ``L < c`` at ``t`` needs ``t >= t0 + W`` and every ``r`` in ``R``
        within ``(t - W, t]`` to be ``<= L``, and at that ``t`` the uninterrupted leader's
        stabilized count is bounded by the same ``highest_down <= L``: the one-leader stabilized
        count is never above what the seed allows, at any time the seed allows it. The seed can only
        be *later*: one leader whose last high recommendation came before ``t0`` may scale down
        before ``t0 + W``; the cost of a restart is at most one window ``W`` of extra replicas,
        never an early scale-down. (Symmetrically, with a scale-up window ``U`` > 0 the seed delays a
        scale-up above ``c`` by at most ``U``; with the default ``U = 0`` it does not delay it.)
        Step limits and the clamp apply after stabilization to both alike.
        """
        if not _is_time(now):
            raise ValueError(f"PipelineState.seed: now must be a finite number, got {now!r}")
        if not _is_count(current):
            raise ValueError(f"PipelineState.seed: current must be an integer >= 0, got {current!r}")
        return cls(history=(Recommendation(time=float(now), replicas=current),),
                   deferred_since=deferred_since, last_forced_write=last_scale_time)


@dataclass(frozen=True)
class PipelineInput:
    """Everything ``decide`` reads; immutable."""

    # wall-clock seconds since the epoch (see the module docstring)
    now: float
    # the target's spec.replicas (the count a write changes); >= 0
    current_replicas: int
    # the recommend step's result
    recommend: RecommendResult
    # bounds and behavior
    behavior: Behavior
    # the target as the guards see it; None = no guard information (nothing is held)
    target: TargetSnapshot | None = None
    # what the previous sync left
    state: PipelineState = field(default_factory=PipelineState)
    # elasticscaler.io/paused
    paused: bool = False
    # elasticscaler.io/paused-replicas; >= 0, None = not pinned
    paused_replicas: int | None = None
    # spec.mode == Advisory: compute and report, never write
    advisory: bool = False
    # spec.fallback and the running count of polls without a usable signal; None = no fallback
    fallback: FallbackState | None = None
    # spec.floorFrom: the floor Tidal's state now (escaler.scaling.floor.floor_of); None = no floorFrom
    floor: FloorState | None = None

    def __post_init__(self) -> None:
        if not _is_time(self.now):
            raise ValueError(f"PipelineInput.now must be a finite number, got {self.now!r}")
        if not _is_count(self.current_replicas):
            raise ValueError(f"PipelineInput.current_replicas must be an integer >= 0, got "
                             f"{self.current_replicas!r}")
        if self.paused_replicas is not None and not _is_count(self.paused_replicas):
            raise ValueError(f"PipelineInput.paused_replicas must be an integer >= 0 or None, got "
                             f"{self.paused_replicas!r}")


@dataclass(frozen=True)
class Step:
    """One row of ``escaler explain``: a step's input and output count and what it did."""

    # recommend | fallback | activation | floor | rateLimit | hold | stabilize | stepLimit | clamp | guard |
    # pausedReplicas |
    # paused | write
    name: str
    # the count the step received (None for recommend)
    before: int | None
    # the count it produced (None when recommend had no decision)
    after: int | None
    # what it did, in words
    note: str
    # the BoundBy member when this step changed the count, else None
    bound: BoundBy | None = None
    # the ScalingLimited reason (LIMIT_REASONS) when this step changed the count and is a limit, else
    # None
    limit: str | None = None


@dataclass(frozen=True)
class Decision:
    """The pipeline's result: the counts after each step, what to write, and the state to keep."""

    # the sync's time (epoch seconds)
    now: float
    # the target's count before this sync
    current: int
    # RECOMMENDED | DECISION_UNAVAILABLE | INVALID_SPEC | SCALING_DISABLED (→ ScalingActive)
    activity: str
    # the recommend step's result (for messages)
    recommend: RecommendResult
    # the bounds and behavior used
    behavior: Behavior
    # the raw recommendation; None without a decision
    recommendation: int | None
    # after stabilize (the current count when there was no recommendation)
    stabilized: int
    # after the step limits
    limited: int
    # after the min/max clamp
    clamped: int
    # the final desired count (status.desiredReplicas): the clamped count, the pin, or (paused,
    # ScalingDisabled) the current count. While a guard holds the write it is the held count.
    desired: int
    # write `desired` to the target now (never in Advisory mode)
    write: bool
    # what Active mode would do: desired != current and nothing holds it (write, ignoring Advisory)
    would_write: bool
    # the write is forced after deferTimeoutSeconds (DeferralTimedOut)
    forced: bool
    # the guard seen this sync (holding, or forced through); None when no guard applies
    guard: GuardHold | None
    # a guard holds the write this sync (not forced)
    held: bool
    # a deferral started this sync: emit ScalingDeferred (once per deferral)
    deferral_started: bool
    # while held: when the write will be forced (epoch seconds); None otherwise or never
    force_at: float | None
    # the scale-down window kept the final count above what the recommendation alone gives
    down_stabilized: bool
    # the scale-up window kept the final count below what the recommendation alone gives
    up_stabilized: bool
    # the BoundBy of the last step that changed the count, None when none did
    bound_by: BoundBy | None
    # the ScalingLimited reason (LIMIT_REASONS) of the last deciding step (rateLimit, stabilize,
    # stepLimit, clamp) that changed the count; None when it is stabilize or none did
    limited_by: str | None
    # why, in words, for status.recentDecisions and events; <= MAX_REASON_LENGTH bytes
    reason: str
    # the state to keep for the next sync, assuming the write (if any) succeeds
    state: PipelineState
    # the state this sync started from
    previous_state: PipelineState
    # seconds until the outcome can change with no new event; None = only an event can change it
    requeue_after: float | None
    # each step's input, output and note, in pipeline order
    steps: tuple[Step, ...]
    # the input's pause flags and mode
    paused: bool = False
    paused_replicas: int | None = None
    advisory: bool = False
    # the InsufficientCapacity report (guards.insufficient_capacity) when the target has Unschedulable
    # pods, held or not; None otherwise or when the guards did not run (paused, pinned, disabled)
    capacity: GuardHold | None = None
    # the input's fallback (policy and count); None without spec.fallback
    fallback: FallbackState | None = None
    # the input's floor (spec.floorFrom's Tidal now); None without spec.floorFrom
    floor: FloorState | None = None

    @property
    def fallback_engaged(self) -> bool:
        """No usable signal for ``failureThreshold`` polls: ``fallback.replicas`` was the recommendation."""
        return self.activity == DECISION_UNAVAILABLE and self.fallback is not None and self.fallback.engaged

    @property
    def limiting_step(self) -> Step | None:
        """The step ``limited_by`` reports (its note says what bound the count), or None."""
        if self.limited_by is None:
            return None
        return next((s for s in reversed(self.steps) if s.limit is not None), None)

    @property
    def pinned(self) -> bool:
        """``elasticscaler.io/paused-replicas`` decided the count."""
        return self.paused_replicas is not None

    @property
    def frozen(self) -> bool:
        """``elasticscaler.io/paused`` froze the count (and no pin overrides it)."""
        return self.paused and self.paused_replicas is None

    @property
    def state_after_failed_write(self) -> PipelineState:
        """The state to keep when the write failed: the new history, the previous deferral times."""
        return replace(self.state, deferred_since=self.previous_state.deferred_since,
                       last_forced_write=self.previous_state.last_forced_write)


def _activity(rr: RecommendResult, current: int) -> str:
    if rr.invalid_spec is not None:
        return INVALID_SPEC
    if current == 0 and not rr.can_scale_from_zero:
        return SCALING_DISABLED
    if rr.replicas is None:
        return DECISION_UNAVAILABLE
    return RECOMMENDED


def _stabilize_note(b: Behavior, before: int, after: int) -> str:
    if after > before:
        return (f"held at {after} by the scale-down stabilization window "
                f"({b.scale_down_stabilization_seconds:g}s)")
    if after < before:
        return f"held at {after} by the scale-up stabilization window ({b.scale_up_stabilization_seconds:g}s)"
    return (f"windows: scale-up {b.scale_up_stabilization_seconds:g}s, "
            f"scale-down {b.scale_down_stabilization_seconds:g}s")


def _limit_note(b: Behavior, before: int, after: int) -> str:
    if after < before:
        return f"limited to {after} by the scale-up step limit ({b.scale_up_max_pods} per sync)"
    if after > before:
        return f"limited to {after} by the scale-down step limit ({b.scale_down_max_pods} per sync)"
    if not b.allow_scale_up_limit:
        up = "never limited"
    else:
        up = "unlimited" if b.scale_up_max_pods is None else f"{b.scale_up_max_pods} per sync"
    down = "unlimited" if b.scale_down_max_pods is None else f"{b.scale_down_max_pods} per sync"
    return f"limits: scale-up {up}, scale-down {down}"


def _in_band(count: int, band: tuple[int | None, int | None] | None) -> int:
    if band is None:
        return count
    lowest, highest = band
    if highest is not None and count > highest:
        return highest
    if lowest is not None and count < lowest:
        return lowest
    return count


def _rate_step(raw: int, capped: int) -> Step:
    if capped < raw:
        return Step(_RATE, raw, capped, f"capped to {capped} by the algorithm's scale-up rate "
                                        f"(recommended {raw})", BoundBy.RATE_LIMIT, SCALE_UP_LIMIT)
    return Step(_RATE, raw, capped, f"capped to {capped} by the algorithm's scale-down rate "
                                    f"(recommended {raw})", BoundBy.RATE_LIMIT, SCALE_DOWN_LIMIT)


def _limit_step(b: Behavior, before: int, after: int) -> Step:
    note = _limit_note(b, before, after)
    if after < before:
        return Step(_LIMIT, before, after, note, BoundBy.STEP_LIMIT, SCALE_UP_LIMIT)
    if after > before:
        return Step(_LIMIT, before, after, note, BoundBy.STEP_LIMIT, SCALE_DOWN_LIMIT)
    return Step(_LIMIT, before, after, note)


def _clamp_step(b: Behavior, before: int) -> Step:
    after = clamp(before, b.min_replicas, b.max_replicas)
    if after > before:
        return Step(_CLAMP, before, after, f"raised to minReplicas {b.min_replicas}", BoundBy.CLAMP,
                    TOO_FEW_REPLICAS)
    if after < before:
        return Step(_CLAMP, before, after, f"capped at maxReplicas {b.max_replicas}", BoundBy.CLAMP,
                    TOO_MANY_REPLICAS)
    return Step(_CLAMP, before, after, f"within [{b.min_replicas}, {b.max_replicas}]")


def _guard_step(clamped: int, current: int, outcome: DeferralOutcome, timeout: float) -> Step:
    assert outcome.hold is not None
    hold = outcome.hold
    if outcome.forced:
        return Step(_GUARD, clamped, clamped,
                    f"{hold.reason}: {hold.message}; the held write is forced after deferTimeoutSeconds "
                    f"{timeout:g}")
    when = "never forced (deferTimeoutSeconds 0)" if outcome.force_at is None \
        else f"forced at {format_time(outcome.force_at)}"
    since = "" if outcome.deferred_since is None else f" since {format_time(outcome.deferred_since)}"
    if clamped == current:  # a no-op: nothing is held back, the running deferral goes on
        return Step(_GUARD, clamped, current, f"deferral by {hold.reason}{since} goes on: {hold.message}; "
                                              f"{when}")
    return Step(_GUARD, clamped, current, f"held by {hold.reason}{since}: {hold.message}; {when}",
                BoundBy.GUARD)


_Band = tuple[int | None, int | None] | None


def _activation_step(act: ActivationState, rec: int, raw: int, band: _Band, current: int,
                     steps: list[Step]) -> tuple[int, int, _Band]:
    """The activation step: the new (rec, raw, band); inactive drops the rate band (see the docstring)."""
    flowing = raw if band is not None else rec  # what stabilize receives
    after = apply_activation(act, flowing, current)
    # it binds when it changed the count, or lifted a rate cap that would have kept the count above 0
    lifted = after == 0 and band is not None and (band[0] or 0) > 0
    steps.append(Step(_ACTIVATION, flowing, after, describe(act),
                      BoundBy.ACTIVATION if after != flowing or lifted else None))
    if after == 0:
        return 0, 0, None
    return (rec, after, band) if band is not None else (after, raw, band)


def _floor_step(fl: FloorState, rec: int, raw: int, band: _Band,
                steps: list[Step]) -> tuple[int, int, _Band]:
    """The floor step: the new (rec, raw, band); a lift widens the rate band to let it through."""
    flowing = raw if band is not None else rec  # what stabilize receives
    after = apply_floor(flowing, fl)
    if after == flowing:
        note = describe_floor(fl) + ("" if fl.replicas is None else f"; the recommendation {flowing} is "
                                                                     "at or above it")
        steps.append(Step(_FLOOR, flowing, after, note))
        return rec, raw, band
    steps.append(Step(_FLOOR, flowing, after, f"raised to {after} by the schedule floor "
                                              f"({describe_floor(fl)})", BoundBy.FLOOR))
    if band is None:
        return after, raw, band
    lowest, highest = band
    return rec, after, (lowest, None if highest is None else max(highest, after))


def fallback_note(fb: FallbackState) -> str:
    """What the fallback step says (also the ScalingActive message's tail)."""
    since = "" if fb.count is None else f" since {format_time(fb.count.since)}"
    if fb.engaged:
        return (f"fallback engaged: {fb.failures} consecutive metric polls without a usable "
                f"signal{since} (failureThreshold {fb.failure_threshold}): recommending fallback.replicas "
                f"{fb.replicas}")
    return (f"fallback not engaged: {fb.failures} of {fb.failure_threshold} consecutive metric polls "
            f"without a usable signal{since}; at {fb.failure_threshold}, fallback to {fb.replicas} replicas")


def _write_step(d_current: int, desired: int, would_write: bool, write: bool, forced: bool,
                held: bool, frozen: bool) -> Step:
    if write:
        return Step(_WRITE, d_current, desired, "forced write" if forced else "write")
    if would_write:
        return Step(_WRITE, d_current, d_current, f"no write: Advisory mode (Active would write {desired})")
    if held and desired != d_current:
        return Step(_WRITE, d_current, d_current, "no write: held by a guard")
    if frozen:
        return Step(_WRITE, d_current, d_current, f"no write: paused ({PAUSED})")
    return Step(_WRITE, d_current, d_current, "no write: the count does not change")


def decide(inp: PipelineInput) -> Decision:
    """Run the pipeline once; see the module docstring."""
    b, rr, cur, now, prev = inp.behavior, inp.recommend, inp.current_replicas, inp.now, inp.state
    activity = _activity(rr, cur)
    fb = inp.fallback
    engaged = activity == DECISION_UNAVAILABLE and fb is not None and fb.engaged
    steps: list[Step] = []
    history = prev.history
    down_stabilized = up_stabilized = False
    stabilization_end: float | None = None
    recommendation = rr.replicas

    if activity == RECOMMENDED or engaged:
        if engaged:
            assert fb is not None
            rec = raw = fb.replicas
            recommendation = rec
            band: tuple[int | None, int | None] | None = None
            steps.append(Step(_RECOMMEND, None, None, rr.summary()))
            steps.append(Step(_FALLBACK, None, rec, fallback_note(fb)))
        else:
            got, got_raw = rr.replicas, rr.raw
            assert got is not None and got_raw is not None
            rec, raw = got, got_raw
            band = rr.rate_band
            steps.append(Step(_RECOMMEND, None, raw, rr.summary() + (f" ({rr.detail})" if rr.detail else "")))
        if band is None and raw != rec:
            steps.append(_rate_step(raw, rec))  # a cap without a band: shown, already applied
        act = None if engaged else rr.activation
        if act is not None:
            rec, raw, band = _activation_step(act, rec, raw, band, cur, steps)
        if inp.floor is not None:
            rec, raw, band = _floor_step(inp.floor, rec, raw, band, steps)
        # with a band, the raw recommendations are stabilized and the band applied after (the HPA's
        # order): a capped history would hold a multi-step scale-down one window per step
        rec = raw if band is not None else rec
        stabilized, history, changed = stabilize(
            prev.history, rec, now, b.scale_up_stabilization_seconds, b.scale_down_stabilization_seconds,
            current=cur)
        waking = act is not None and cur == 0 and act.active and stabilized < 1
        if waking:
            # a wake is immediate: the scale-up window never keeps the target at 0
            stabilized, changed = 1, stabilized != rec
        steps.append(Step(_STABILIZE, rec, stabilized,
                          "waking from 0: the scale-up window does not delay a wake" if waking
                          else _stabilize_note(b, rec, stabilized),
                          BoundBy.STABILIZE if changed else None))
        rated = _in_band(stabilized, band)
        if rated != stabilized:
            steps.append(_rate_step(stabilized, rated))
        limited = limit_step(cur, rated, b.scale_up_max_pods, b.scale_down_max_pods,
                             b.allow_scale_up_limit)
        steps.append(_limit_step(b, rated, limited))
        clamp_step = _clamp_step(b, limited)
        steps.append(clamp_step)
        clamped = clamp(limited, b.min_replicas, b.max_replicas)
        # what the count would be without stabilization: tells whether the window decided it
        plain = clamp(
            limit_step(cur, _in_band(rec, band), b.scale_up_max_pods, b.scale_down_max_pods,
                       b.allow_scale_up_limit),
            b.min_replicas, b.max_replicas)
        down_stabilized, up_stabilized = clamped > plain, clamped < plain
        if down_stabilized or up_stabilized:
            stabilization_end = stabilization_changes_at(
                history, stabilized, rec, now, b.scale_up_stabilization_seconds,
                b.scale_down_stabilization_seconds)
    elif activity == SCALING_DISABLED:
        steps.append(Step(_RECOMMEND, None, rr.replicas, rr.summary()))
        steps.append(Step(_HOLD, None, cur, "scaling is disabled: the target has 0 replicas and the trigger "
                                            "cannot scale from zero"))
        stabilized = limited = clamped = cur
    else:
        steps.append(Step(_RECOMMEND, None, None, rr.summary()))
        steps.append(Step(_HOLD, None, cur,
                          f"no decision: the current count {cur} is held, apart from the min/max bounds"))
        if fb is not None and activity == DECISION_UNAVAILABLE:
            steps.append(Step(_FALLBACK, cur, cur, fallback_note(fb)))
        held_at = cur
        if inp.floor is not None:
            held_at = _floor_step(inp.floor, cur, cur, None, steps)[0]
        stabilized = limited = held_at
        steps.append(_clamp_step(b, held_at))
        clamped = clamp(held_at, b.min_replicas, b.max_replicas)

    outcome: DeferralOutcome | None = None
    capacity: GuardHold | None = None
    deferred_since: float | None = None
    last_forced = prev.last_forced_write
    if inp.paused_replicas is not None:
        desired = inp.paused_replicas
        steps.append(Step(_PIN, clamped, desired, f"pinned to {desired} by {PAUSED_REPLICAS}; the pipeline "
                                                  f"is bypassed",
                          BoundBy.PAUSED_REPLICAS if desired != clamped else None))
        history = prev.history
    elif inp.paused:
        desired = cur
        steps.append(Step(_PAUSE, clamped, cur, f"frozen at {cur} by {PAUSED}: nothing is written",
                          BoundBy.PAUSED if cur != clamped else None))
        history = prev.history
    elif activity == SCALING_DISABLED:
        desired = cur
    else:
        desired = clamped
        capacity = insufficient_capacity(inp.target)
        # a no-op while a deferral runs keeps it (and the guard's reason) while a guard stands
        deferring = prev.deferred_since is not None
        outcome = defer(guards(inp.target, cur, desired, deferring=deferring), prev.deferred_since,
                        prev.last_forced_write, now, b.defer_timeout_seconds, no_op=desired == cur)
        if outcome.hold is not None:
            steps.append(_guard_step(clamped, cur, outcome, b.defer_timeout_seconds))
        deferred_since, last_forced = outcome.deferred_since, outcome.last_forced_write

    held = outcome is not None and outcome.held
    forced = outcome is not None and outcome.forced
    would_write = desired != cur and not held and not (inp.paused and inp.paused_replicas is None)
    write = would_write and not inp.advisory
    frozen = inp.paused and inp.paused_replicas is None
    steps.append(_write_step(cur, desired, would_write, write, forced, held, frozen))

    bound_by = next((s.bound for s in reversed(steps) if s.bound is not None), None)
    # last step wins: the last deciding step that changed the count says what limited it
    deciding = next((s for s in reversed(steps) if s.name in _DECIDING and s.bound is not None), None)
    limited_by = None if deciding is None else deciding.limit

    waits: list[float] = []
    if stabilization_end is not None and not inp.paused and inp.paused_replicas is None:
        waits.append(stabilization_end - now)
    if outcome is not None and outcome.held and outcome.force_at is not None:
        waits.append(outcome.force_at - now)
    if inp.floor is not None and inp.floor.next_change is not None:
        waits.append(inp.floor.next_change - now)
    requeue_after = min((w for w in waits if w > 0), default=None)

    return Decision(
        now=now,
        current=cur,
        activity=activity,
        recommend=rr,
        behavior=b,
        recommendation=recommendation,
        stabilized=stabilized,
        limited=limited,
        clamped=clamped,
        desired=desired,
        write=write,
        would_write=would_write,
        forced=forced,
        guard=None if outcome is None else outcome.hold,
        held=held,
        deferral_started=outcome is not None and outcome.started,
        force_at=None if outcome is None else outcome.force_at,
        down_stabilized=down_stabilized,
        up_stabilized=up_stabilized,
        bound_by=bound_by,
        limited_by=limited_by,
        reason=_reason(activity, rr, cur, steps, forced, fb if engaged else None),
        state=PipelineState(history=history, deferred_since=deferred_since, last_forced_write=last_forced),
        previous_state=prev,
        requeue_after=requeue_after,
        steps=tuple(steps),
        paused=inp.paused,
        paused_replicas=inp.paused_replicas,
        advisory=inp.advisory,
        capacity=capacity,
        fallback=fb,
        floor=inp.floor,
    )


def _reason(activity: str, rr: RecommendResult, current: int, steps: list[Step], forced: bool,
            fallback: FallbackState | None = None) -> str:
    if fallback is not None:
        base = (f"no decision ({rr.unavailable}); fallback to {fallback.replicas} replicas after "
                f"{fallback.failures} consecutive metric polls without a usable signal (failureThreshold "
                f"{fallback.failure_threshold})")
    elif activity == RECOMMENDED:
        base = rr.summary() + (f" ({rr.detail})" if rr.detail else "")
        if rr.activation is not None:
            base += f"; {describe(rr.activation)}"
    elif activity == SCALING_DISABLED:
        base = "scaling is disabled: the target has 0 replicas and the trigger cannot scale from zero"
    elif activity == INVALID_SPEC:
        base = f"invalid spec ({rr.invalid_spec}); holding {current}"
    else:
        base = f"no decision ({rr.unavailable}); holding {current}"
    parts = [base]
    for step in steps:
        if step.name == _ACTIVATION:
            continue  # already in the base, with the recommendation
        if step.bound is not None or (forced and step.name == _GUARD):
            parts.append(step.note)
    return cap_text("; ".join(parts), MAX_REASON_LENGTH)


def explain_lines(decision: Decision) -> list[str]:
    """The pipeline step by step, for ``escaler explain``: one line per step, then the outcome."""
    d, b = decision, decision.behavior
    mode = "Advisory" if d.advisory else "Active"
    flags = ""
    if d.pinned:
        flags = f", pinned by {PAUSED_REPLICAS}"
    elif d.paused:
        flags = f", paused by {PAUSED}"
    lines = [f"at {format_time(d.now)}: current {d.current} replicas, bounds [{b.min_replicas}, "
             f"{b.max_replicas}], mode {mode}{flags}"]
    for i, step in enumerate(d.steps, 1):
        if step.before is None:
            counts = "-" if step.after is None else f"{step.after}"
        else:
            counts = f"{step.before} -> {step.after}"
        mark = f" [bound: {step.bound.value}]" if step.bound is not None else ""
        lines.append(f"{i}. {step.name}: {counts}: {step.note}{mark}")
    lines.append(f"desired {d.desired}; " + (
        ("forced write " if d.forced else "write ") + f"{d.current} -> {d.desired}" if d.write
        else "no write"))
    bound = "nothing" if d.bound_by is None else d.bound_by.value
    lines.append(f"bound by: {bound}; ScalingLimited: {d.limited_by or 'nothing'}")
    if d.capacity is not None and d.guard != d.capacity:
        # reported, not holding (a scale-down or no write)
        lines.append(f"{d.capacity.reason} (not holding this sync): {d.capacity.message}")
    if d.state.deferred_since is not None:
        lines.append(f"deferred since {format_time(d.state.deferred_since)}")
    if d.requeue_after is not None:
        lines.append(f"requeue after {d.requeue_after:g}s (at {format_time(d.now + d.requeue_after)})")
    else:
        lines.append("requeue: on the next event or poll")
    return lines

