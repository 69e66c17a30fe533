"""The scaling-algorithm contract of docs/guide/elasticscaler.md#the-triggers: what an algorithm sees and what
it may return.

An algorithm is a *pure function* ``(AlgorithmContext) -> int | AlgorithmResult``: the desired
replica count recommended from the current count, the aggregated metrics, the scaler's
``algorithmConfig`` and its past recommendations. It gets no client, no clock and no mutable
state, so it cannot reach the API server, and the same inputs always give the same count — which
is what lets the simulator and ``escaler explain`` replay it.

Outcomes an algorithm may produce:

* an ``int >= 0`` — the recommendation (the pipeline then stabilizes, limits and clamps it);
* an ``AlgorithmResult(replicas, uncapped)`` — the same, from an algorithm that caps its own step
  (``apa``'s ``scaleUpRate``/``scaleDownRate``): ``uncapped`` is what the metrics ask for,
  ``replicas`` what the algorithm allows this step. The caller passes both to the pipeline, which
  shows the cap as its own step (``RateLimit``) and reports ``ScalingLimited`` when it binds. A
  plain ``int`` means "no cap of my own" (``uncapped == replicas``); ``as_result`` normalises both;
* ``NoDecision`` — the inputs cannot support a decision (a NaN/Inf/negative/missing sample, no
  metrics at all). The reconciler reports ``ScalingActive=False/DecisionUnavailable`` and holds
  the current count;
* ``ValueError`` — the *spec* cannot produce a decision (an unparsable ``algorithmConfig``
  value, a target of 0); the message names the key or the metric. The reconciler reports
  ``ScalingActive=False/InvalidSpec``.

Metric values (``MetricValue.value``) follow the target type, as the collectors produce them:

* ``Utilization`` — the average utilization across the target's pods, in percent of the
  request (``70`` means 70 %); ``target_value`` is the target percentage;
* ``AverageValue`` — the per-replica average of the metric; ``target_value`` is the per-replica
  target;
* ``Value`` — the metric as one total for the whole workload (a queue depth, a ``sum(...)``);
  ``target_value`` is what one replica should carry, so the workload needs
  ``value / target_value`` replicas.

**Pod readiness (Resource metrics).** A ``Resource`` metric carries ``MetricValue.pods``, the
HPA replica calculator's grouping of the target's pods (``PodCounts``): ``value`` is the
utilization (or per-pod average) over the *ready pods that report a metric* only, as
``status.currentMetrics`` shows it, and ``pods`` says how many pods that was and how many more are
unready (Pending, or a cpu pod not Ready within its initialization period) or missing a metric.
The count such a metric asks for is then **not** ``ceil(current * ratio)`` — 2 ready pods at
140 % of a 70 % target next to 2 Pending ones ask for 4, not 8 — but the HPA's rule over those
groups (``escaler.scaling.apa.pod_replicas``, which ``apa`` applies and a plug-in may call).
``pods`` is ``None`` for every other source.

The context is read-only: frozen dataclasses, tuples (the history may be a ``RecommendationHistory``,
an immutable sequence that reads like the tuple), and a ``MappingProxyType`` for the config.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, overload

__all__ = [
    "METRIC_TYPES",
    "TARGET_AVERAGE_VALUE",
    "TARGET_TYPES",
    "TARGET_UTILIZATION",
    "TARGET_VALUE",
    "Algorithm",
    "AlgorithmContext",
    "AlgorithmResult",
    "MetricValue",
    "NoDecision",
    "PodCounts",
    "Recommendation",
    "RecommendationHistory",
    "as_result",
    "is_usable",
]

TARGET_UTILIZATION = "Utilization"
TARGET_VALUE = "Value"
TARGET_AVERAGE_VALUE = "AverageValue"
TARGET_TYPES = (TARGET_UTILIZATION, TARGET_VALUE, TARGET_AVERAGE_VALUE)
# the metric sources of an ElasticScaler MetricsTrigger (docs/guide/elasticscaler.md)
METRIC_TYPES = ("Resource", "Custom", "External", "ExternalServer")


class NoDecision(Exception):
    """The inputs cannot support a decision; the message names the metric and the reason."""


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_weight(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0


@dataclass(frozen=True)
class PodCounts:
    """The HPA's grouping of the pods behind one Resource metric (see the module docstring).

    A pod's *weight* is what its usage is divided by: its request for a ``Utilization`` target,
    1 for an ``AverageValue`` target. Pods being deleted, ``Failed`` or ``Succeeded`` are in no group.
    """

    # Running pods that report the metric and count as ready (the HPA's readyPodCount); >= 1
    ready: int
    # the sum of their weights; > 0 (MetricValue.value is their usage / this weight)
    ready_weight: float
    # Pending pods, and (cpu) pods not Ready yet within the cpu initialization period; >= 0
    unready: int = 0
    # the sum of their weights; >= 0, 0 when unready == 0
    unready_weight: float = 0.0
    # Running pods without a metric (metrics-server has not scraped them yet); >= 0
    missing: int = 0
    # the sum of their weights; >= 0, 0 when missing == 0
    missing_weight: float = 0.0

    def __post_init__(self) -> None:
        for count, weight in (("ready", "ready_weight"), ("unready", "unready_weight"),
                              ("missing", "missing_weight")):
            n, w = getattr(self, count), getattr(self, weight)
            if not _is_count(n) or not _is_weight(w) or (n == 0 and w != 0):
                raise ValueError(f"PodCounts: {count} must be an integer >= 0 and {weight} a finite number "
                                 f">= 0 (0 with no pods), got {n!r} and {w!r}")
            object.__setattr__(self, weight, float(w))
        if self.ready < 1 or self.ready_weight <= 0:
            raise ValueError(f"PodCounts: need at least one ready pod with a weight > 0, got {self.ready!r} "
                             f"and {self.ready_weight!r}")


@dataclass(frozen=True)
class MetricValue:
    """One metric, aggregated over the window (docs/reference/annotations.md), with its target."""

    # the metric's display name (resource name, metric name, or the ExternalServer query)
    name: str
    # the metric source: Resource | Custom | External | ExternalServer
    type: str
    # the aggregated sample; None = no usable sample in the window
    value: float | None
    # Utilization | Value | AverageValue (see the module docstring for what value means)
    target_type: str
    # the target; must be a finite number > 0 for a decision
    target_value: float
    # Resource metrics: the HPA's pod groups behind value (see the module docstring); else None
    pods: PodCounts | None = None


@dataclass(frozen=True, slots=True)
class Recommendation:
    """A past recommendation of this scaler (newest last in ``AlgorithmContext.history``)."""

    # seconds since the epoch, as the caller's clock gave it
    time: float
    # the recommended count, >= 0
    replicas: int


# the most past recommendations an algorithm is given (AlgorithmContext.history; an algorithm may
# be registered with fewer: escaler.scaling.registry)
ALGORITHM_HISTORY = 64

# the largest count RecommendationHistory stores compactly (a signed 64-bit array item)
_MAX_COMPACT_REPLICAS = 2**63 - 1


class RecommendationHistory(Sequence[Recommendation]):
    """Past recommendations, oldest first, as two arrays of numbers (issue 30, memory per scaler).

    What the reconciler keeps per scaler between polls for ``AlgorithmContext.history``: up to
    ``ALGORITHM_HISTORY`` (64) entries (as many as the scaler's algorithm reads:
    ``escaler.scaling.registry``), one more every poll. As a
    tuple of ``Recommendation`` objects that was ~7.7 KiB per scaler once 64 polls had passed (an
    object, its float and a tuple slot per entry; ``MEM_POLLS=70 MEM_STEP=30 python
    bench/mem_by_owner.py``); here it is 16 bytes an entry (a ``double`` time and an ``int64``
    count) and two array headers.

    It reads like the tuple it replaces: ``len``, iteration, ``history[i]`` (a ``Recommendation``
    built on demand, equal to the one appended), ``history[a:b]`` and ``+`` (tuples), ``in``,
    ``==`` with another history or with a tuple/list of equal ``Recommendation``s, ``hash`` (the
    tuple's). Immutable: ``appended`` returns a new one. A time is stored as a ``float`` (an ``int``
    time reads back as the equal float); a count that an int64 cannot hold, or a non-integer
    count, makes ``appended`` return a plain tuple instead (nothing is ever rounded or clamped).
    """

    __slots__ = ("_replicas", "_times")

    def __init__(self, items: Iterable[Recommendation] = ()) -> None:
        times, replicas = array("d"), array("q")
        for rec in items:
            if not self.fits(rec):
                raise ValueError(f"RecommendationHistory: {rec!r} does not fit (the time must be a "
                                 "float or an int equal to one, the count an int within int64)")
            times.append(float(rec.time))
            replicas.append(rec.replicas)
        self._times = times
        self._replicas = replicas

    @staticmethod
    def fits(rec: Recommendation) -> bool:
        """Whether ``rec`` reads back equal from the arrays (a float time, or an int time equal to
        its float; an ``int`` count, not a ``bool``, within int64)."""
        t, n = rec.time, rec.replicas
        return (type(t) is float or (type(t) is int and float(t) == t)) and type(n) is int \
            and -_MAX_COMPACT_REPLICAS - 1 <= n <= _MAX_COMPACT_REPLICAS

    @classmethod
    def appended(cls, history: Sequence[Recommendation], rec: Recommendation,
                 keep: int) -> RecommendationHistory | tuple[Recommendation, ...]:
        """``history`` with ``rec`` appended, the newest ``keep`` (>= 1) kept; a tuple when some
        entry does not fit (``fits``)."""
        if isinstance(history, RecommendationHistory):
            if not cls.fits(rec):
                return (*history, rec)[-keep:]
            new = object.__new__(cls)
            start = max(len(history._times) + 1 - keep, 0)
            # concatenation allocates exactly the items (append would over-allocate every poll)
            new._times = history._times[start:] + array("d", (float(rec.time),))
            new._replicas = history._replicas[start:] + array("q", (rec.replicas,))
            return new
        kept = (*history, rec)[-keep:]
        return cls(kept) if all(cls.fits(r) for r in kept) else kept

    def __len__(self) -> int:
        return len(self._times)

    @overload
    def __getitem__(self, index: int) -> Recommendation: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Recommendation, ...]: ...

    def __getitem__(self, index: int | slice) -> Recommendation | tuple[Recommendation, ...]:
        if isinstance(index, slice):
            return tuple(Recommendation(t, n) for t, n in zip(self._times[index], self._replicas[index],
                                                              strict=True))
        return Recommendation(self._times[index], self._replicas[index])

    def __iter__(self) -> Iterator[Recommendation]:
        return (Recommendation(t, n) for t, n in zip(self._times, self._replicas, strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecommendationHistory):
            return self._times == other._times and self._replicas == other._replicas
        if isinstance(other, tuple | list):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Sequence[Recommendation]) -> tuple[Recommendation, ...]:
        return (*self, *other)

    def __radd__(self, other: Sequence[Recommendation]) -> tuple[Recommendation, ...]:
        return (*other, *self)

    def __repr__(self) -> str:
        return f"RecommendationHistory({list(self)!r})"


def _readonly(config: Mapping[str, str]) -> Mapping[str, str]:
    items = dict(config)
    for key, value in items.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(
                f"AlgorithmContext.config: keys and values must be strings, got {key!r}: {value!r}")
    return MappingProxyType(items)


@dataclass(frozen=True)
class AlgorithmContext:
    """Everything an algorithm may read; immutable."""

    # the target's current replica count (spec), >= 0
    current_replicas: int
    # the aggregated metrics, in spec order
    metrics: tuple[MetricValue, ...] = ()
    # spec.trigger.metricsTrigger.algorithmConfig, read-only
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # past recommendations, oldest first: a tuple, or the reconciler's compact
    # ``RecommendationHistory`` (reads, slices, adds and compares like the tuple)
    history: tuple[Recommendation, ...] | RecommendationHistory = ()

    def __post_init__(self) -> None:
        if isinstance(self.current_replicas, bool) or not isinstance(self.current_replicas, int) \
                or self.current_replicas < 0:
            raise ValueError(f"AlgorithmContext.current_replicas: must be an integer >= 0, "
                             f"got {self.current_replicas!r}")
        # normalise to immutable containers even when the caller passed lists or a dict
        object.__setattr__(self, "metrics", tuple(self.metrics))
        if not isinstance(self.history, RecommendationHistory):  # that one is immutable already
            object.__setattr__(self, "history", tuple(self.history))
        object.__setattr__(self, "config", _readonly(self.config))

    def with_metrics(self, metrics: tuple[MetricValue, ...]) -> AlgorithmContext:
        """This context with other ``metrics``, built without validating it again: its current
        count, config and history were validated when this one was made, and each ``MetricValue``
        when it was (one decision runs the algorithm on up to four sets of metrics with the same
        rest: ``escaler.scaling.metricdecision``)."""
        ctx = object.__new__(AlgorithmContext)
        object.__setattr__(ctx, "current_replicas", self.current_replicas)
        object.__setattr__(ctx, "metrics", tuple(metrics))
        object.__setattr__(ctx, "config", self.config)
        object.__setattr__(ctx, "history", self.history)
        return ctx


@dataclass(frozen=True)
class AlgorithmResult:
    """An algorithm's recommendation after its own step cap, and before it."""

    # the recommendation the pipeline uses; >= 0
    replicas: int
    # what the metrics ask for before the algorithm's own cap; >= 0 (== replicas when no cap bound)
    uncapped: int
    # the band the algorithm's cap allows this step, from the current count: the lowest and highest
    # count (None: unbounded that way). Given, the pipeline stabilizes the *uncapped* recommendations
    # and applies the band afterwards, as the HPA does with its rate policies (stabilizing capped
    # counts would make a scale-down of more than one rate step wait one window per step)
    lowest: int | None = None
    highest: int | None = None

    def __post_init__(self) -> None:
        if not (_is_count(self.replicas) and _is_count(self.uncapped)):
            raise ValueError(f"AlgorithmResult: replicas and uncapped must be integers >= 0, got "
                             f"{self.replicas!r} and {self.uncapped!r}")
        for name in ("lowest", "highest"):
            value = getattr(self, name)
            if value is not None and not _is_count(value):
                raise ValueError(f"AlgorithmResult.{name} must be an integer >= 0 or None, got {value!r}")
        if self.lowest is not None and self.highest is not None and self.lowest > self.highest:
            raise ValueError(f"AlgorithmResult: lowest {self.lowest} > highest {self.highest}")

    @property
    def band(self) -> tuple[int | None, int | None] | None:
        """``(lowest, highest)``, or None when the algorithm reported no band."""
        if self.lowest is None and self.highest is None:
            return None
        return (self.lowest, self.highest)

    @property
    def capped(self) -> bool:
        """The algorithm's own cap changed the count."""
        return self.replicas != self.uncapped


class Algorithm(Protocol):
    """A pure function of the context to a desired replica count (see the module docstring)."""

    def __call__(self, ctx: AlgorithmContext, /) -> int | AlgorithmResult: ...


def as_result(raw: object, name: str = "algorithm") -> AlgorithmResult:
    """An algorithm's return value as an ``AlgorithmResult``; ``ValueError`` naming ``name`` when it
    is neither an integer >= 0 nor an ``AlgorithmResult``."""
    if isinstance(raw, AlgorithmResult):
        return raw
    if not _is_count(raw):
        raise ValueError(f"algorithm {name!r} returned {raw!r}, not an integer >= 0 or an AlgorithmResult")
    assert isinstance(raw, int)
    return AlgorithmResult(replicas=raw, uncapped=raw)


def is_usable(value: float | None) -> bool:
    """True for a finite, non-negative sample."""
    return value is not None and not isinstance(value, bool) and math.isfinite(value) and value >= 0
