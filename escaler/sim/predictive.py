"""The predictive policy: escaler's reactive ``apa`` plus a seasonal forecast floor (issue 16).

Contract of ``PredictivePolicy(reactive, season_s, slots, horizon_s)``:

* Each tick runs the reactive policy first — ``reactive`` is an ``ApaPolicy``, the ElasticScaler
  MetricsTrigger's own decision path (``escaler.sim.policies``), unchanged — and then the
  forecaster ``escaler.scaling.predict`` on the same reading: the metric's sum as Prometheus holds
  it at the poll (``sum(<metric>)`` at its ``prometheus_scrape_s`` cadence) is ``observe``d into the
  seasonal profile, and ``forecast`` gives the highest load the profile learned for
  ``[now, now + horizon_s]`` (``horizon_s``: the replica's cold start plus a poll, the time a
  replica ordered now takes to serve at the next decision).
* The count is ``max(reactive, ceil(forecast / target))`` (the reactive policy's own per-replica
  target), clamped to ``[min_replicas, max_replicas]``: a floor applied after the reactive pipeline
  (stabilization and limits), before the clamp — the forecast can only add replicas, never remove
  what the reactive policy asks for. Without history (the first season) it is the reactive policy.
* The season is in simulated seconds: a trace replayed with ``--speedup k`` has a day of
  ``86,400 / k`` seconds (``season_for``).
* ``floors`` counts the ticks where the forecast raised the count (reported, for the docs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from escaler.scaling.predict import (
    SeasonalConfig,
    SeasonalState,
    forecast,
    forecast_replicas,
    observe,
)
from escaler.sim.engine import View
from escaler.sim.policies import EPOCH, ApaPolicy
from escaler.sim.signals import prometheus_view, value_of

__all__ = ["DAY_S", "DEFAULT_SLOTS", "PredictivePolicy", "season_for"]

DAY_S = 86_400.0
# places in a season: a day in 30-minute slots
DEFAULT_SLOTS = 48


def season_for(speedup: float) -> float:
    """A day of the trace in simulated seconds when it is replayed ``speedup`` times faster."""
    if not math.isfinite(speedup) or not speedup > 0:
        raise ValueError(f"predictive speedup: must be a finite number > 0, got {speedup!r}")
    return DAY_S / speedup


@dataclass
class PredictivePolicy:
    """See the module docstring."""

    reactive: ApaPolicy
    season_s: float
    slots: int
    horizon_s: float
    name: str = "predictive"
    # ticks where the forecast floor was above the reactive count
    floors: int = 0
    _config: SeasonalConfig = field(init=False)
    _state: SeasonalState = field(init=False)

    def __post_init__(self) -> None:
        self._config = SeasonalConfig(self.season_s, self.slots)
        self._state = SeasonalState.empty(self.slots)
        if not math.isfinite(self.horizon_s) or self.horizon_s < 0:
            raise ValueError(f"predictive horizon: must be a finite number >= 0, got {self.horizon_s!r}")

    @property
    def period_s(self) -> float:
        return self.reactive.period_s

    @property
    def state(self) -> SeasonalState:
        return self._state

    def decide(self, view: View) -> int:
        reactive = self.reactive.decide(view)
        now = EPOCH + view.now
        scrape = prometheus_view(view.scrapes, view.now, self.reactive.prometheus_scrape_s)
        if scrape is not None:
            load = sum(value_of(g, self.reactive.metric) for g in scrape.gauges)
            self._state = observe(self._config, self._state, now, load)
        floor = forecast_replicas(forecast(self._config, self._state, now, self.horizon_s),
                                  self.reactive.target)
        if floor > reactive:
            self.floors += 1
        return min(max(reactive, floor, self.reactive.min_replicas), self.reactive.max_replicas)
