"""``decide_metrics``: windowed metric values and an algorithm → the recommend step
(docs/guide/elasticscaler.md#the-triggers, docs/reference/annotations.md).

The pure core of a MetricsTrigger sync, after the samples are windowed: the ElasticScaler
reconciler (``escaler.reconcilers.elasticscaler.metricsync``) calls it on the values it collected,
and the policy simulator (``escaler.sim``) on the values it scraped — one decision path.

Contract of ``decide_metrics(algorithm, config, current, now, metrics, errors, history)``:

* ``metrics`` are the scaler's metrics in spec order, each a ``WindowedValue``: the stable
  aggregate as a ``MetricValue`` (value None when the window holds nothing usable), the newest
  sample of the panic window and the peak of the stable window (None without one), all per replica
  where the target type says so;
* no usable metric → ``RecommendResult.no_decision`` ("metrics", the read ``errors`` or "no usable
  sample in the window"), history unchanged, ``used`` None;
* else the algorithm runs on the stable values, on the panic values (a metric without one keeps
  its stable value) and on the peaks, and ``escaler.scaling.window.choose`` picks: the panic
  window takes over a scale-up, a scale-down waits until the whole window asks for it;
* an unknown algorithm or a ``ValueError`` of the algorithm (the spec cannot produce a decision)
  → ``RecommendResult.invalid`` (``spec.trigger.metricsTrigger: ...``); ``NoDecision`` →
  ``no_decision``; in each case the history is unchanged and ``used`` None;
* some metrics unusable and the rest asking for fewer replicas → the current count (a partial
  picture never scales down), said in the detail;
* the result's count is appended to ``history`` (``Recommendation(now, n)``, the newest
  ``history_length(algorithm)`` kept — ``ALGORITHM_HISTORY`` (64) unless the algorithm was
  registered reading fewer; ``apa`` and ``flow`` read none, so their history stays empty — as a
  compact ``RecommendationHistory``: two arrays of numbers, not an object per entry); the
  algorithm is given at most that many of the entries it is called with; ``used`` is the value
  each metric's chosen window used and ``alone`` what each metric alone recommends (None when it
  cannot say), for ``status.currentMetrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from escaler.scaling.algorithm import (
    ALGORITHM_HISTORY,
    Algorithm,
    AlgorithmContext,
    AlgorithmResult,
    MetricValue,
    NoDecision,
    Recommendation,
    RecommendationHistory,
    as_result,
    is_usable,
)
from escaler.scaling.pipeline import RecommendResult
from escaler.scaling.registry import AlgorithmNotRegistered, get_algorithm, history_length
from escaler.scaling.window import PANIC, SETTLING, WindowChoice, choose

__all__ = ["ALGORITHM_HISTORY", "MetricsDecision", "WindowedValue", "decide_metrics"]


@dataclass(frozen=True)
class WindowedValue:
    """One metric after windowing (see the module docstring)."""

    stable: MetricValue
    panic: float | None = None
    peak: float | None = None


@dataclass(frozen=True)
class MetricsDecision:
    """What ``decide_metrics`` returns."""

    recommend: RecommendResult
    # the history to keep (this sync's recommendation appended when there was one): compact
    # (``RecommendationHistory``) once a recommendation was appended, else as given
    history: Sequence[Recommendation]
    # per metric: the value the chosen window used; None when no decision was made
    used: tuple[MetricValue, ...] | None = None
    # per metric: what it alone recommends; None where it cannot say (or no decision was made)
    alone: tuple[int | None, ...] | None = None


def decide_metrics(algorithm: str, config: Mapping[str, str], current: int, now: float,
                   metrics: Sequence[WindowedValue], errors: tuple[str, ...],
                   history: Sequence[Recommendation]) -> MetricsDecision:
    """See the module docstring."""
    total = len(metrics)
    usable = [m for m in metrics if is_usable(m.stable.value)]
    if not usable:
        return MetricsDecision(RecommendResult.no_decision(
            "metrics", "; ".join(errors) or "no usable sample in the window", total=total,
            metric_errors=errors, can_scale_from_zero=False), history)
    keep = history_length(algorithm)
    history = _newest(history, keep)
    try:
        run = _Runner(get_algorithm(algorithm), algorithm,
                      AlgorithmContext(current_replicas=current, config=config,
                                       history=history if isinstance(history, RecommendationHistory)
                                       else tuple(history)))
        choice = choose(current, run.on(m.stable for m in usable),
                        run.optional(usable, lambda m: m.panic), run.optional(usable, lambda m: m.peak))
    except AlgorithmNotRegistered as err:
        return MetricsDecision(RecommendResult.invalid(str(err), total=total), history)
    except NoDecision as err:
        return MetricsDecision(RecommendResult.no_decision(
            "metrics", str(err), evaluated=len(usable), total=total, metric_errors=errors,
            can_scale_from_zero=False), history)
    except ValueError as err:
        return MetricsDecision(RecommendResult.invalid(f"spec.trigger.metricsTrigger: {err}", total=total),
                               history)
    used = tuple(_used(m, choice) for m in metrics)
    alone = tuple(run.alone(v) for v in used)
    result, notes = choice.result, _notes(choice, [v for v in used if is_usable(v.value)])
    if len(usable) < total and result.replicas < current:
        notes.append(f"partial metrics: scale-down to {result.replicas} suppressed")
        result = AlgorithmResult(replicas=current, uncapped=current)
    kept: Sequence[Recommendation] = () if keep == 0 else RecommendationHistory.appended(
        history, Recommendation(time=now, replicas=result.replicas), keep)
    rr = RecommendResult.from_metrics(result.replicas, evaluated=len(usable), total=total,
                                      detail=", ".join(notes), metric_errors=errors,
                                      can_scale_from_zero=False, uncapped=result.uncapped,
                                      rate_band=result.band)
    return MetricsDecision(rr, kept, used, alone)


def _newest(history: Sequence[Recommendation], keep: int) -> Sequence[Recommendation]:
    """The newest ``keep`` entries of ``history`` (itself when it has no more)."""
    if len(history) <= keep:
        return history
    return tuple(history)[len(history) - keep:]


@dataclass(frozen=True)
class _Runner:
    """Runs the algorithm on a set of metric values with the sync's fixed inputs."""

    algorithm: Algorithm
    name: str
    # the sync's current count, config and history, validated once (no metrics)
    base: AlgorithmContext

    def on(self, metrics: Iterable[MetricValue]) -> AlgorithmResult:
        """The algorithm on ``metrics``; ``NoDecision``/``ValueError`` as it raises them."""
        return as_result(self.algorithm(self.base.with_metrics(tuple(metrics))), self.name)

    def optional(self, usable: Sequence[WindowedValue], pick: Callable[[WindowedValue], float | None],
                 ) -> AlgorithmResult | None:
        """The algorithm with each metric's ``pick`` value where it has one (its stable value
        elsewhere); None when no metric has one or the algorithm cannot decide on them."""
        values = [pick(m) for m in usable]
        if all(v is None for v in values):
            return None
        try:
            return self.on(m.stable if v is None else replace(m.stable, value=v)
                           for m, v in zip(usable, values, strict=True))
        except (NoDecision, ValueError):
            return None

    def alone(self, metric: MetricValue) -> int | None:
        """What one metric alone recommends (capped), for its row; None when it cannot say."""
        if not is_usable(metric.value):
            return None
        try:
            return self.on((metric,)).replicas
        except (NoDecision, ValueError):
            return None


def _used(m: WindowedValue, choice: WindowChoice) -> MetricValue:
    """The value of ``m`` the chosen window used (the panic value when the panic window took over)."""
    if choice.source == PANIC and m.panic is not None and is_usable(m.stable.value):
        return replace(m.stable, value=m.panic)
    return m.stable


def _notes(choice: WindowChoice, used: Sequence[MetricValue]) -> list[str]:
    notes = [f"{v.name[:80]} {v.value:g}/{v.target_value:g} ({v.target_type})" for v in used
             if v.value is not None]
    if choice.source == PANIC:
        notes.append("panic window: the newest samples take over the scale-up")
    elif choice.source == SETTLING:
        notes.append("scale-down waits until every sample of the window asks for it")
    return notes
