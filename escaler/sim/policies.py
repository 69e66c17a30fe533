"""escaler's own policies in the simulator: the code the manager runs, fed from the scrapes.

Contract — each policy is the decision path of a reconciler with its I/O replaced by the
simulated fleet, never a re-implementation:

* ``ApaPolicy`` is an ElasticScaler MetricsTrigger with ``scalingAlgorithm: apa`` and one
  ExternalServer metric ``sum(<metric>)`` over the serving replicas with a ``Value`` target
  (``target`` per replica). Every ``poll_s`` (the manager's ``--metrics-trigger-poll-interval``,
  30 s) it reads the query as Prometheus holds it (the newest scrape at its ``prometheus_scrape_s``
  cadence), adds the sample to the same ``MetricWindows`` the reconciler keeps (window, panic window
  and outlier filter from ``annotations``, docs/reference/annotations.md defaults when absent), then runs
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
* ``FlowPolicy`` is flow sizing (``escaler.scaling.flow.decide_flow``) fed as a deployment feeds
  it from Prometheus: ``rate(prompt_tokens_total[1m])`` and ``rate(generation_tokens_total[1m])``
  summed over the fleet, the prompts prefilled per second over the same range (the TTFT
  histogram's count), ``sum(num_requests_waiting)`` plus the requests no replica holds yet, and
  the queueing delay (the TTFT percentile by ``histogram_quantile``, less the mean prompt's
  prefill time), each up to the newest sample Prometheus holds at the poll. Its capacity is the
  profile's (``flow_capacity``): prefill at ``prefill_tokens_per_s``, decode at a full batch.
  Besides those rates it reads the miss shares (the share of first tokens above the TTFT bucket
  at or over the objective, and of finished requests above the TPOT one: the larger, over the
  rate range and over ``miss_window_s``) and the burst rates (``burst_quantile`` of the token
  rates between consecutive Prometheus samples over ``burst_lookback_s``). Every decision is kept
  in ``trail`` with the reading it decided on and its steps in words (``<name>-decisions.jsonl`` in
  the report; the e2e replay test serves the same readings to the manager). With ``standby`` > 0
  (``flow-standby``) the same decisions run over a fleet that keeps that many replicas loaded and
  asleep (``escaler.sim.serving``, Standby): the count it orders is served by wakes first. With
  ``wake_delay_s`` set as well (``flow-standby-wake``) the router also wakes a sleeper between polls
  when an arriving request's predicted queueing delay is over it (``escaler.sim.serving``,
  data-path wake); the decisions are flow's, unchanged, and read the woken replicas in the fleet's
  count as any replica ordered before.
* Pipeline time is ``EPOCH + simulated seconds`` (the pipeline works in epoch seconds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from escaler.api.llmscaler import DEFAULT_SCALE_DOWN_STABILIZATION_SECONDS
from escaler.reconcilers.llmscaler.provider import CustomReading, custom_result
from escaler.scaling.algorithm import TARGET_VALUE, MetricValue, Recommendation
from escaler.scaling.annotations import parse_annotations
from escaler.scaling.flow import FlowCapacity, FlowConfig, FlowReading, FlowState, decide_flow
from escaler.scaling.metricdecision import WindowedValue, decide_metrics
from escaler.scaling.pipeline import Behavior, PipelineInput, PipelineState, decide
from escaler.scaling.slo import Direction, Objective, ReplicaBounds, load_objective, size_llm
from escaler.scaling.window import MetricWindows, WindowPolicy
from escaler.sim.engine import View, percentile
from escaler.sim.model import ReplicaProfile
from escaler.sim.signals import (
    METRICS,
    PROMETHEUS_SCRAPE_S,
    VLLM_TPOT_BUCKETS_S,
    VLLM_TTFT_BUCKETS_S,
    histogram_quantile,
    histogram_share_above,
    prometheus_view,
    prometheus_window,
    value_of,
)

__all__ = ["EPOCH", "ApaPolicy", "FlowPolicy", "SloPolicy", "flow_capacity"]

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
    _history: Sequence[Recommendation] = ()

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


def flow_capacity(profile: ReplicaProfile) -> FlowCapacity:
    """One replica's throughput under ``profile``: prefill rate, decode rate at a full batch."""
    b = profile.max_batch
    return FlowCapacity(profile.prefill_tokens_per_s, b / profile.decode_step_s(b))


@dataclass
class FlowPolicy:
    """See the module docstring."""

    config: FlowConfig
    ttft_target_s: float = 2.0
    ttft_percentile: float = 90.0
    rate_window_s: float = 60.0
    poll_s: float = 30.0
    prometheus_scrape_s: float = PROMETHEUS_SCRAPE_S
    ttft_buckets_s: tuple[float, ...] = VLLM_TTFT_BUCKETS_S
    tpot_target_s: float = 0.1
    # the long range the miss share is also read over (noise in a short one alone would only ratchet
    # the headroom up)
    miss_window_s: float = 900.0
    # the lookback of the burst floor (the runner sets the down delay: a burst is remembered as
    # long as a replica is kept after its need); 0 = none
    burst_lookback_s: float = 300.0
    # the percentile (0-100) of the short-range rates the floor takes (quantile_over_time)
    burst_quantile: float = 100.0
    name: str = "flow"
    # replicas kept loaded and asleep beside the fleet (the engine reads it; 0: no standby tier)
    standby: int = 0
    # the predicted queueing delay (s) at which the router wakes a sleeper between polls (the engine
    # reads it; None: sleepers wake only when a poll orders replicas)
    wake_delay_s: float | None = None
    # the last decision's steps in words, and every decision (time, from, to, signals, steps)
    last_steps: tuple[str, ...] = ()
    trail: list[dict[str, object]] = field(default_factory=list)
    _state: FlowState = field(default_factory=FlowState)

    def _burst(self, view: View) -> tuple[float | None, float | None]:
        """The largest token rates between two consecutive Prometheus samples over the burst
        lookback (``max_over_time(rate(..[<scrape>])[<lookback>:])``); (None, None) with none."""
        if not self.burst_lookback_s:
            return None, None
        cadence = self.prometheus_scrape_s
        span = prometheus_window(view.scrapes, view.now, self.burst_lookback_s, cadence)
        sums: dict[int, list[int]] = {}
        for s in span:
            k = sums.setdefault(math.ceil(s.t / cadence - 1e-9), [0, 0])
            k[0] += s.prompt_tokens
            k[1] += s.generation_tokens
        if not sums:
            return None, None
        q = self.burst_quantile
        prompt = percentile([p / cadence for p, _ in sums.values()], q)
        generation = percentile([g / cadence for _, g in sums.values()], q)
        return prompt, generation

    def _miss_share(self, view: View, seconds: float) -> float | None:
        """The larger share over its objective over ``seconds``: first tokens' TTFT, finished
        requests' TPOT."""
        span = prometheus_window(view.scrapes, view.now, seconds, self.prometheus_scrape_s)
        ttft = histogram_share_above(self.ttft_target_s, [t for s in span for t in s.ttfts],
                                     self.ttft_buckets_s)
        tpot = histogram_share_above(self.tpot_target_s, [t for s in span for t in s.tpots],
                                     VLLM_TPOT_BUCKETS_S)
        shares = [x for x in (ttft, tpot) if x is not None]
        return max(shares) if shares else None

    @property
    def period_s(self) -> float:
        return self.poll_s

    def _reading(self, view: View) -> FlowReading:
        """What the queries answer at the poll (the module docstring)."""
        w = self.rate_window_s
        span = prometheus_window(view.scrapes, view.now, w, self.prometheus_scrape_s)
        scrape = prometheus_view(view.scrapes, view.now, self.prometheus_scrape_s)
        if not span or scrape is None or view.now < w:
            # no full rate range yet (a deployment's Prometheus has the history; the run's start
            # has none): the token rates are missing and the decision holds
            return FlowReading(view.now, view.replicas, None, None)
        # the newest scrape (due at a multiple of the cadence) may not be taken yet at the poll: the
        # first range covers only the scrapes since the start
        w = min(w, span[-1].t)
        ttfts = [t for s in span for t in s.ttfts]
        prompt = sum(s.prompt_tokens for s in span) / w
        rps = len(ttfts) / w
        delay = None
        observed = histogram_quantile(self.ttft_percentile / 100, ttfts, self.ttft_buckets_s)
        if observed is not None and rps > 0:
            delay = max(0.0, observed - prompt / rps / self.config.capacity.prefill_tokens_per_s)
        burst_prompt, burst_generation = self._burst(view)
        return FlowReading(
            view.now, view.replicas, prompt_tokens_per_s=prompt,
            generation_tokens_per_s=sum(s.generation_tokens for s in span) / w, requests_per_s=rps,
            waiting=float(scrape.waiting), queue_delay_s=delay,
            burst_prompt_tokens_per_s=burst_prompt, burst_generation_tokens_per_s=burst_generation,
            miss_share=self._miss_share(view, self.rate_window_s),
            long_miss_share=self._miss_share(view, self.miss_window_s))

    def decide(self, view: View) -> int:
        reading = self._reading(view)
        d = decide_flow(reading, self.config, self._state)
        self.last_steps = d.steps
        # the reading too: what the queries answered, so a replay can serve the same answers
        self.trail.append({"t": view.now, "from": view.replicas, "to": d.replicas, "held": d.held,
                           "reading": asdict(reading), "signals": d.signals, "steps": list(d.steps)})
        self._state = d.state
        return d.replicas
