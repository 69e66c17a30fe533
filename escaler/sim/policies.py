"""escaler's own policies in the simulator: the code the manager runs, fed from the scrapes.

Contract — each policy is the decision path of a reconciler with its I/O replaced by the
simulated fleet, never a re-implementation:

* ``ApaPolicy`` is an ElasticScaler MetricsTrigger with ``scalingAlgorithm: apa`` and one
  ExternalServer metric ``sum(<metric>)`` over the serving replicas with a ``Value`` target
  (``target`` per replica). Every ``poll_s`` (the manager's ``--metrics-trigger-poll-interval``,
  30 s) it reads the query as Prometheus holds it (the newest scrape at its ``prometheus_scrape_s``
  cadence), adds the sample to the same ``MetricWindows`` the reconciler keeps (window, panic window
  and outlier filter from ``annotations``, SPEC §5.4 defaults when absent), then runs
  ``escaler.scaling.metricdecision.decide_metrics`` (algorithm, panic/settling choice, history) and
  ``escaler.scaling.pipeline.decide`` (stabilization, limits, clamp) with
  ``Behavior.from_annotations`` — the ElasticScaler reconciler's ``metricsync`` and ``_decide``.
* ``SloPolicy`` is an LLMSLORequirement sized by the SLO decision engine
  (``escaler.scaling.slo.size_llm`` on a TTFT objective: the ``percentile`` of the TTFTs of the
  last ``signal_window_s`` as Prometheus answers it — ``histogram_quantile`` over vLLM's TTFT
  buckets, up to the newest scrape it holds (``escaler.sim.signals``); ``ttft_buckets_s=()`` reads
  the exact percentile instead) whose decision an
  LLMScaler with a Custom provider reads (``escaler.reconcilers.llmscaler.provider.custom_result``)
  and passes through its pipeline (``Behavior.for_llmscaler``: scale-down stabilization
  ``scale_down_stabilization_s``, no scale-up cap). The engine reads the target's ready replicas as
  it does in the manager (the serving ones here). No first token in the window is a missing
  signal: the engine holds its last decision, as it does in the manager. With
  ``concurrency_per_replica`` set the requirement also has ``spec.inflight`` (the sum of the
  serving replicas' running + waiting, as Prometheus holds it at its ``prometheus_scrape_s``
  cadence) judged by ``escaler.scaling.slo.load_objective``; 0 leaves it out (TTFT only).
* Pipeline time is ``EPOCH + simulated seconds`` (the pipeline works in epoch seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from escaler.api.llmscaler import DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS
from escaler.reconcilers.llmscaler.provider import CustomReading, custom_result
from escaler.scaling.algorithm import TARGET_VALUE, MetricValue, Recommendation
from escaler.scaling.annotations import parse_annotations
from escaler.scaling.metricdecision import WindowedValue, decide_metrics
from escaler.scaling.pipeline import Behavior, PipelineInput, PipelineState, decide
from escaler.scaling.slo import Direction, Objective, ReplicaBounds, load_objective, size_llm
from escaler.scaling.window import MetricWindows, WindowPolicy
from escaler.sim.engine import View, percentile
from escaler.sim.signals import (
    METRICS,
    PROMETHEUS_SCRAPE_S,
    VLLM_TTFT_BUCKETS_S,
    histogram_quantile,
    prometheus_view,
    prometheus_window,
    value_of,
)

__all__ = ["EPOCH", "ApaPolicy", "SloPolicy"]

# simulated time 0 in the pipeline's epoch seconds (2024-01-01T00:00:00Z)
EPOCH = 1_704_067_200.0
_KEY = "0"


@dataclass
class ApaPolicy:
    """See the module docstring."""

    metric: str
    target: float
    min_replicas: int
    max_replicas: int
    annotations: Mapping[str, str] = field(default_factory=dict)
    algorithm_config: Mapping[str, str] = field(default_factory=dict)
    poll_s: float = 30.0
    prometheus_scrape_s: float = PROMETHEUS_SCRAPE_S
    name: str = "apa"
    _windows: MetricWindows = field(init=False)
    _behavior: Behavior = field(init=False)
    _state: PipelineState = field(default_factory=PipelineState)
    _history: tuple[Recommendation, ...] = ()

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"apa metric: must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if not self.target > 0:
            raise ValueError(f"apa target: must be > 0, got {self.target}")
        ann, problems = parse_annotations(dict(self.annotations))
        if problems:
            raise ValueError("apa annotations: " + "; ".join(str(p) for p in problems))
        self._windows = MetricWindows(WindowPolicy.from_annotations(ann))
        self._behavior = Behavior.from_annotations(ann, min_replicas=self.min_replicas,
                                                   max_replicas=self.max_replicas)

    @property
    def period_s(self) -> float:
        return self.poll_s

    def decide(self, view: View) -> int:
        now = EPOCH + view.now
        scrape = prometheus_view(view.scrapes, view.now, self.prometheus_scrape_s)
        if scrape is not None:
            self._windows.add(_KEY, now, sum(value_of(g, self.metric) for g in scrape.gauges))
        name = f"sum({self.metric})"
        stable = self._windows.aggregate(_KEY, now, metric=name) if _KEY in self._windows else None
        panic = self._windows.panic(_KEY, now) if _KEY in self._windows else None
        peak = self._windows.peak(_KEY, now) if _KEY in self._windows else None
        self._windows.gc(now)
        mv = MetricValue(name, "ExternalServer", stable, TARGET_VALUE, self.target)
        md = decide_metrics("apa", dict(self.algorithm_config), view.replicas, now,
                            [WindowedValue(mv, panic, peak)], (), self._history)
        self._history = md.history
        d = decide(PipelineInput(now=now, current_replicas=view.replicas, recommend=md.recommend,
                                 behavior=self._behavior, state=self._state))
        self._state = d.state
        return d.desired


@dataclass
class SloPolicy:
    """See the module docstring."""

    ttft_target_s: float
    min_replicas: int
    max_replicas: int
    percentile: float = 90.0
    signal_window_s: float = 60.0
    poll_s: float = 30.0
    scale_down_stabilization_s: float = float(DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS)
    # spec.concurrencyPerReplica of the in-flight signal; 0 = no spec.inflight (TTFT only)
    concurrency_per_replica: int = 0
    prometheus_scrape_s: float = PROMETHEUS_SCRAPE_S
    # the TTFT histogram's buckets (histogram_quantile, as Prometheus answers); () = the exact
    # percentile of every observation, which no real pipeline gives
    ttft_buckets_s: tuple[float, ...] = VLLM_TTFT_BUCKETS_S
    name: str = "slo"
    _behavior: Behavior = field(init=False)
    _state: PipelineState = field(default_factory=PipelineState)
    _last: int | None = None

    def __post_init__(self) -> None:
        if not self.ttft_target_s > 0:
            raise ValueError(f"slo ttft target: must be > 0, got {self.ttft_target_s}")
        if not 0 < self.percentile < 100:
            raise ValueError(f"slo percentile: must be in (0, 100), got {self.percentile}")
        if self.concurrency_per_replica < 0:
            raise ValueError(f"slo concurrency per replica: must be >= 0, got {self.concurrency_per_replica}")
        self._behavior = Behavior.for_llmscaler(
            min_replicas=self.min_replicas, max_replicas=self.max_replicas,
            scale_down_stabilization_seconds=self.scale_down_stabilization_s)

    @property
    def period_s(self) -> float:
        return self.poll_s

    def decide(self, view: View) -> int:
        now = EPOCH + view.now
        span = prometheus_window(view.scrapes, view.now, self.signal_window_s, self.prometheus_scrape_s)
        ttfts = [t for s in span for t in s.ttfts]
        q = self.percentile
        observed = (histogram_quantile(q / 100, ttfts, self.ttft_buckets_s) if self.ttft_buckets_s
                    else percentile(ttfts, q))
        objective = Objective("ttftMs", f"TTFT p{self.percentile:g} (ms)", self.ttft_target_s * 1000.0,
                              Direction.UPPER, None if observed is None else observed * 1000.0,
                              None if observed is not None else "no first token in the window",
                              target_name="ttftTargetMs")
        objectives = [objective]
        if self.concurrency_per_replica > 0:
            scrape = prometheus_view(view.scrapes, view.now, self.prometheus_scrape_s)
            inflight = sum(value_of(g, "inflight") for g in scrape.gauges) if scrape is not None else None
            objectives.append(load_objective(inflight, None if scrape is not None else "no scrape yet",
                                             concurrency_per_replica=self.concurrency_per_replica,
                                             current=view.replicas, ready=view.serving))
        sized = size_llm(objectives, current=view.replicas,
                         bounds=ReplicaBounds(self.min_replicas, self.max_replicas), last=self._last,
                         ready=view.serving)
        self._last = sized.replicas
        rr = custom_result("http://escaler-manager/decisions/sim", CustomReading(sized.replicas))
        d = decide(PipelineInput(now=now, current_replicas=view.replicas, recommend=rr,
                                 behavior=self._behavior, state=self._state))
        self._state = d.state
        return d.desired
