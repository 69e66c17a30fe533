"""Fixed fleets: the reference every autoscaler must beat, and the fleet a run starts with.

Contract:

* ``FixedPolicy(n)`` asks for ``n`` replicas at every tick (``name`` ``fixed-<n>``).
* ``cheapest_fixed(arrivals, options, slo, goal)`` → ``FixedResult``: the smallest ``n`` in
  ``[max(1, min_replicas), max_replicas]`` whose run (``n`` warm replicas from the start, never
  changed) reaches ``goal`` attainment, found by bisection (attainment grows with ``n``: more
  replicas never serve a request later in this model), and its run; a candidate below the goal
  stops as soon as its misses exceed what the goal allows (``engine.MissBudget``: its ``tried``
  value is then the most it could reach, and ``stopped`` names it); ``n`` is None (``run`` the
  run at ``max_replicas``) when even the largest fleet misses the goal — a report then says the
  goal is out of reach for a fixed fleet.
* ``steady_state_fleet(arrivals, options, slo, goal, window_s)`` — the fleet a run starts with
  (``INITIAL_WINDOW_S`` = the first 5 minutes): the cheapest fixed fleet that meets ``goal`` over
  the requests arriving in ``[0, window_s)``, as a service already running at that load would
  have; ``max_replicas`` when none does. Every policy of an experiment starts from it (warm), so
  no policy is scored on a cold start the trace's own history would not have had.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from escaler.sim.engine import MissBudget, Run, SimOptions, View, simulate
from escaler.sim.report import SloTargets, meets, summarize
from escaler.sim.trace import Arrival

__all__ = ["INITIAL_WINDOW_S", "FixedPolicy", "FixedResult", "cheapest_fixed", "steady_state_fleet"]

# the start of the trace the initial fleet is sized for
INITIAL_WINDOW_S = 300.0
# a fixed fleet never changes; its ticks only cost events
_FIXED_PERIOD_S = 3600.0

Progress = Callable[[str], Callable[[int, int], None] | None]


@dataclass(frozen=True)
class FixedPolicy:
    n: int

    @property
    def name(self) -> str:
        return f"fixed-{self.n}"

    @property
    def period_s(self) -> float:
        return _FIXED_PERIOD_S

    def decide(self, view: View) -> int:
        return self.n


@dataclass(frozen=True)
class FixedResult:
    # the cheapest fleet meeting the goal; None when none up to max_replicas does
    n: int | None
    run: Run
    # every fleet size tried → its attainment (for a size in ``stopped``, the most it could reach)
    tried: dict[int, float]
    # sizes whose run stopped once its misses proved it below the goal (engine MissBudget)
    stopped: frozenset[int] = frozenset()


def _attainment(run: Run, slo: SloTargets) -> float:
    return float(summarize(run, slo)["attainment"] or 0.0)


def cheapest_fixed(arrivals: Sequence[Arrival], options: SimOptions, slo: SloTargets, goal: float,
                   progress: Progress | None = None) -> FixedResult:
    """See the module docstring."""
    lo = max(1, options.min_replicas)
    hi = options.max_replicas
    if hi < lo:
        raise ValueError(f"cheapest_fixed: max_replicas {hi} is below {lo}")
    # only the run a result can return is kept (the smallest hit so far, or the largest fleet's):
    # a day-scale run holds millions of request records, a sweep tries a dozen fleets
    kept: dict[int, Run] = {}
    tried: dict[int, float] = {}
    stopped: set[int] = set()

    total = len(arrivals)
    budget = MissBudget.for_goal(lambda q: not meets(q, slo), total, goal)

    def ok(n: int) -> bool:
        cb = progress(f"fixed-{n}") if progress is not None else None
        # a fleet below the goal stops once its misses prove it (the largest, reported when none
        # meets the goal, runs to the end)
        run = simulate(arrivals, FixedPolicy(n), replace(options, initial_replicas=n), cb,
                       budget if n < hi else None)
        tried[n] = (total - run.misses_at_stop) / total if run.stopped else _attainment(run, slo)
        if run.stopped:
            stopped.add(n)
        if tried[n] >= goal or n >= hi:
            kept.clear()
            kept[n] = run
        return tried[n] >= goal

    # gallop up from lo (cheap runs first), then bisect between the last miss and the first hit
    miss, n = lo - 1, lo
    while not ok(n):
        miss = n
        if n >= hi:
            return FixedResult(None, kept[hi], tried, frozenset(stopped))
        n = min(hi, max(n + 1, 2 * n))
    hit = n
    while hit - miss > 1:
        mid = (hit + miss) // 2
        if ok(mid):
            hit = mid
        else:
            miss = mid
    return FixedResult(hit, kept[hit], tried, frozenset(stopped))


def steady_state_fleet(arrivals: Sequence[Arrival], options: SimOptions, slo: SloTargets, goal: float,
                       window_s: float = INITIAL_WINDOW_S) -> int:
    """See the module docstring."""
    if not window_s > 0:
        raise ValueError(f"steady_state_fleet: window_s must be > 0, got {window_s}")
    head = [a for a in arrivals if a.t < window_s]
    if not head:
        return max(1, options.min_replicas)
    found = cheapest_fixed(head, options, slo, goal)
    return found.n if found.n is not None else options.max_replicas
