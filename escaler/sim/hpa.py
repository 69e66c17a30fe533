"""The Kubernetes HPA (autoscaling/v2, default behavior), written from its public documentation.

A baseline for the simulator, not escaler's code. One Pods metric with an ``AverageValue``
target, read through a metrics adapter from Prometheus (the simulator's one Prometheus pipeline,
``escaler.sim.signals``: samples every ``prometheus_scrape_s``) as ``avg_over_time`` over
``metrics_window_s``:

* every ``sync_s`` (kube-controller-manager's ``--horizontal-pod-autoscaler-sync-period``, 15 s):
  ``ratio`` = mean per-pod value over the pods that report / target;
* no pod missing: within the tolerance (``|ratio - 1| <= 0.1``) keep the current count, else
  ``ceil(ratio x reporting pods)``;
* pods missing (created, not serving yet): recompute with each missing pod at 0 on a scale-up and
  at the target on a scale-down; keep the current count when the new ratio is within the
  tolerance or flips direction, or when the new count would move against the direction;
* stabilization (default behavior): scale-up window 0 s, scale-down window 300 s — the count is
  the highest recommendation of the last 300 s when it is below the current one;
* rate policies (default behavior): up by at most ``max(4 pods, 100 %)`` per 15 s, down by at
  most 100 % per 15 s; then ``[min, max]`` (the engine clamps).

Sources: kubernetes.io "Horizontal Pod Autoscaling" (algorithm details, default behavior) and
the replica calculator's handling of missing pods.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from escaler.sim.engine import View
from escaler.sim.signals import METRICS, PROMETHEUS_SCRAPE_S, per_replica

__all__ = ["HpaPolicy"]


@dataclass
class HpaPolicy:
    """See the module docstring."""

    metric: str
    target: float
    sync_s: float = 15.0
    tolerance: float = 0.1
    scale_down_window_s: float = 300.0
    metrics_window_s: float = 15.0
    prometheus_scrape_s: float = PROMETHEUS_SCRAPE_S
    name: str = "hpa"
    _history: deque[tuple[float, int]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"hpa target: must be > 0, got {self.target}")
        if self.metric not in METRICS:
            raise ValueError(f"hpa metric: must be one of {', '.join(METRICS)}, got {self.metric!r}")

    @property
    def period_s(self) -> float:
        return self.sync_s

    def decide(self, view: View) -> int:
        current = view.replicas
        values = per_replica(view.scrapes, view.now, self.metrics_window_s, self.metric,
                             cadence=self.prometheus_scrape_s)
        rec = self._recommend(current, list(values.values()))
        self._history.append((view.now, rec))
        while self._history and self._history[0][0] <= view.now - self.scale_down_window_s:
            self._history.popleft()
        stabilized = rec
        if rec < current:
            stabilized = min(current, max(r for _, r in self._history))
        up_limit = max(current + 4, current * 2)
        return max(0, min(stabilized, up_limit))

    def _recommend(self, current: int, values: list[float]) -> int:
        reporting = len(values)
        if reporting == 0:
            return current
        missing = max(0, current - reporting)
        total = sum(values)
        ratio = total / (self.target * reporting)
        if missing == 0:
            if abs(ratio - 1.0) <= self.tolerance:
                return current
            return math.ceil(ratio * reporting - 1e-9)
        up = ratio > 1.0
        fill = 0.0 if up else self.target
        pods = reporting + missing
        new_ratio = (total + fill * missing) / (self.target * pods)
        if abs(new_ratio - 1.0) <= self.tolerance or (up and new_ratio < 1.0) or (not up and new_ratio > 1.0):
            return current
        n = math.ceil(new_ratio * pods - 1e-9)
        if (new_ratio < 1.0 and n > current) or (new_ratio > 1.0 and n < current):
            return current
        return n
