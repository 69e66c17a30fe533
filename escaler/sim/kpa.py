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
* ``target`` is the per-replica concurrency target (Knative: ``containerConcurrency`` x target
  utilization, 100 x 70 % by default; an LLM server wants its batch-sized value).

Sources: knative.dev "Configuring the autoscaler" / "Configuring scale bounds" (stable window
60 s, panic window 10 %, panic threshold 200 %, max scale up rate 1000, max scale down rate 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    name: str = "kpa"
    _panic_since: float | None = None
    _last_panic_signal: float = -math.inf
    _panic_pods: int = 0

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"kpa target: must be > 0, got {self.target}")

    @property
    def period_s(self) -> float:
        return self.tick_s

    def decide(self, view: View) -> int:
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
