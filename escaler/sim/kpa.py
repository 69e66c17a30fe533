"""The Knative Pod Autoscaler (KPA), written from its public documentation and defaults.

A baseline for the simulator, not escaler's code. Concurrency-based, every ``tick_s`` (2 s):

* observed concurrency = every request in the system (running, queued in a replica, buffered
  while nothing serves — the activator's), averaged over the **stable window** (60 s) and over the
  **panic window** (10 % of it, 6 s);
* ``desired_stable = ceil(stable / target)``, ``desired_panic = ceil(panic / target)``, each
  bounded by the rates: at most ``max_scale_up_rate`` (1000) x ready pods, at least ready pods /
  ``max_scale_down_rate`` (2);
* **panic mode** starts when ``desired_panic / ready >= panic_threshold`` (200 %) and ends once a
  whole stable window has passed without that; in panic the count only rises (the highest panic
  count seen in this panic), out of it the stable count is used;
* **scale-down delay** (``scale_down_delay_s``, Knative's ``scale-down-delay``, 0 by default): a
  lower count is applied only once it has held for the whole delay — the count is the highest
  wanted over the last ``scale_down_delay_s``; the knob an LLM operator sets so a replica that
  took minutes to load is not dropped in a lull;
* ``target`` is the per-replica concurrency target (Knative: ``containerConcurrency`` x target
  utilization, 100 x 70 % by default; an LLM server wants its batch-sized value).

Sources: knative.dev "Configuring the autoscaler" / "Configuring scale bounds" (stable window
60 s, panic window 10 %, panic threshold 200 %, max scale up rate 1000, max scale down rate 2,
scale-down-delay 0s).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from escaler.sim.engine import View
from escaler.sim.signals import fleet_concurrency

__all__ = ["KpaPolicy"]


@dataclass
class KpaPolicy:
    """See the module docstring."""

    target: float
    tick_s: float = 2.0
    stable_window_s: float = 60.0
    panic_window_pct: float = 10.0
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    scale_down_delay_s: float = 0.0
    name: str = "kpa"
    _panic_since: float | None = None
    _last_panic_signal: float = -math.inf
    _panic_pods: int = 0
    _wanted: deque[tuple[float, int]] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"kpa target: must be > 0, got {self.target}")
        if not self.scale_down_delay_s >= 0:
            raise ValueError(f"kpa scale-down-delay: must be >= 0, got {self.scale_down_delay_s}")

    @property
    def period_s(self) -> float:
        return self.tick_s

    def decide(self, view: View) -> int:
        want = self._decide(view)
        if self.scale_down_delay_s <= 0:
            return want
        self._wanted.append((view.now, want))
        while self._wanted and self._wanted[0][0] <= view.now - self.scale_down_delay_s:
            self._wanted.popleft()
        return max(w for _, w in self._wanted)

    def _decide(self, view: View) -> int:
        stable = fleet_concurrency(view.scrapes, view.now, self.stable_window_s)
        panic = fleet_concurrency(view.scrapes, view.now, self.stable_window_s * self.panic_window_pct / 100)
        if stable is None or panic is None:
            return view.replicas
        ready = max(view.serving, 1)
        lo = math.floor(ready / self.max_scale_down_rate)
        hi = math.ceil(ready * self.max_scale_up_rate)
        want_stable = min(max(math.ceil(stable / self.target - 1e-9), lo), hi)
        want_panic = min(max(math.ceil(panic / self.target - 1e-9), lo), hi)
        if want_panic / ready >= self.panic_threshold:
            self._last_panic_signal = view.now
            if self._panic_since is None:
                self._panic_since = view.now
                self._panic_pods = view.replicas
        elif self._panic_since is not None and view.now - self._last_panic_signal >= self.stable_window_s:
            self._panic_since = None
        if self._panic_since is not None:
            self._panic_pods = max(self._panic_pods, want_panic)
            return self._panic_pods
        return want_stable
