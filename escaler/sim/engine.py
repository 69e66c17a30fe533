"""The discrete-event loop: a trace, a replica profile and a policy in, one run's record out.

Contract of ``simulate(arrivals, policy, options)``:

* Simulated time only: the trace's arrivals in time order and a heap of ``(time, after,
  sequence, kind, payload)`` events, popped in order (``after`` is the time of the moment that
  scheduled the event and the sequence number the order events were scheduled in: ties are broken
  in the order events were scheduled; an arrival comes before any other event at its time), so a
  run is a pure function of its inputs: same trace, profile, policy and options → the same
  ``Run``; the one random draw, each new replica's start-up, comes from
  ``random.Random(options.seed)``, so the n-th replica a run creates draws the same start-up under
  every policy. Nothing sleeps and nothing reads a clock.
* Speed: a replica that only decodes schedules one event per sequence it finishes, not one per
  iteration (``escaler.sim.serving``: coalesced decode runs, of iterations shorter than half the
  scrape interval and half the policy period; ``COALESCE`` False turns them off). The ``Run`` is the
  same to the last bit: the iterations end at the same floats and every event that reads what an
  iteration changed is handled before or after it as with one event per iteration (two replicas'
  iterations ending at the very same instant may come in either order, which can only reorder one
  scrape's TTFTs or TPOTs).
* Events: a request arrives (``Fleet.arrive``); a replica starts serving; a replica ends an
  iteration; a **scrape** every ``scrape_interval_s`` (what a Prometheus scraping the servers
  would hold: per-replica gauges and, over the last interval, the requests that arrived, the
  TTFT of every first token produced in it, the TPOT of every request finished in it and the
  increase of the token counters; ``window``
  reads them back over any span); a **policy tick** every ``policy.period_s``
  (the policy sees the scrapes so far and the fleet's size, returns a replica count, clamped to
  ``[min_replicas, max_replicas]``, and the fleet is scaled to it). Time starts with
  ``initial_replicas`` serving (warm, as a running service is).
* **Standby** (``escaler.sim.serving``, Standby): a policy with a ``standby`` attribute (an int,
  0 when absent) keeps that many replicas loaded and asleep for the whole run, warm at the start
  as the initial fleet is; a scale-up wakes them first (``options.wake_s``) and each asleep second
  costs ``options.standby_cost`` of a replica-second. A policy whose ``wake_delay_s`` attribute is
  a number (None when absent) also has the router wake a sleeper between its ticks when an arriving
  request would queue longer than that (``escaler.sim.serving``, data-path wake); each such wake is
  a scale event of the run (counted in ``Run.wakes``) and the next tick sees the woken replica in
  the fleet's size.
* The run ends when every request of the trace has finished; ticks and scrapes stop then. A fleet
  that can never serve (``max_replicas`` 0) ends at ``horizon_s`` past the last arrival with the
  unserved requests counted as unfinished.
* ``Run`` holds every request's record, every scrape, every scale event (time, from, to), the
  replica-seconds paid (each replica from its creation to its removal or the end; standby at its
  price) and the priced spans behind them (``lifetimes``: start, stop, price per second), the
  standby seconds asleep.
* ``progress(done, total)`` (optional) is called every 1 % of the requests finished.
* ``budget`` (optional, ``MissBudget``): the run stops at the first scrape after more than
  ``budget.misses`` finished requests missed (``budget.missed(record)``), with ``Run.stopped``
  True and the rest unfinished: its attainment is then below the goal the budget was computed from
  whatever the rest would do, which is all a sweep asks of an overloaded candidate (a fixed fleet of
  one under a day of traffic otherwise simulates a queue growing for hours).
"""

from __future__ import annotations

import heapq
import itertools
import math
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from escaler.sim.model import ReplicaProfile
from escaler.sim.serving import ITERATION, READY, Fleet, Gauge, Replica, RequestRecord
from escaler.sim.trace import Arrival

__all__ = ["COALESCE", "MissBudget", "Policy", "Run", "Scrape", "SimOptions", "View", "percentile",
           "simulate", "window"]

_SCRAPE, _TICK = "scrape", "tick"
# coalesce decode runs (module docstring); False schedules every iteration, as the equivalence test
# compares
COALESCE = True


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks; None if empty."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass(frozen=True, slots=True)
class Scrape:
    """What the metrics pipeline holds after one scrape."""

    t: float
    # spec.replicas and the replicas serving
    replicas: int
    serving: int
    gauges: tuple[Gauge, ...]
    # requests waiting for any replica to serve (none is serving yet)
    unrouted: int
    # over the last scrape interval: requests that arrived, and the TTFT of each first token
    arrivals: int
    ttfts: tuple[float, ...]
    # over the last scrape interval: the increase of the fleet's token counters
    prompt_tokens: int = 0
    generation_tokens: int = 0
    # the mean time per output token of each request that finished in the interval (more than one
    # token), as a per-request TPOT histogram observes it
    tpots: tuple[float, ...] = ()

    @property
    def running(self) -> int:
        return sum(g.running for g in self.gauges)

    @property
    def waiting(self) -> int:
        return sum(g.waiting for g in self.gauges) + self.unrouted


def window(scrapes: Sequence[Scrape], now: float, seconds: float) -> Sequence[Scrape]:
    """The scrapes taken in ``(now - seconds, now]`` (a suffix of ``scrapes``)."""
    i = len(scrapes)
    while i > 0 and scrapes[i - 1].t > now - seconds:
        i -= 1
    return scrapes[i:]


@dataclass(frozen=True)
class View:
    """What a policy sees at a tick."""

    now: float
    # the fleet's current spec.replicas and how many serve
    replicas: int
    serving: int
    scrapes: Sequence[Scrape]


class Policy(Protocol):
    """A scaling policy: ``decide`` every ``period_s`` seconds of simulated time."""

    @property
    def name(self) -> str: ...

    @property
    def period_s(self) -> float: ...

    def decide(self, view: View) -> int: ...


@dataclass(frozen=True)
class SimOptions:
    profile: ReplicaProfile = field(default_factory=ReplicaProfile)
    initial_replicas: int = 1
    min_replicas: int = 1
    max_replicas: int = 64
    # the servers are scraped every second (Knative's pipeline); a policy reading Prometheus looks at
    # the scrapes of its own interval (``escaler.sim.policies``)
    scrape_interval_s: float = 1.0
    # how long past the last arrival an unserviceable run may go on
    horizon_s: float = 3600.0
    # seed of the replicas' start-up draws (escaler.sim.model: cold start, node delay)
    seed: int = 0
    # a standby replica: seconds from the wake order to serving, and its price asleep (a share of a
    # serving replica's)
    wake_s: float = 10.0
    standby_cost: float = 0.2


@dataclass
class Run:
    policy: str
    requests: list[RequestRecord]
    unfinished: int
    scrapes: list[Scrape]
    # (time, from, to)
    scale_events: list[tuple[float, int, int]]
    replica_seconds: float
    end: float
    # every priced span (start, stop, price per second in replicas): what replica_seconds sums
    lifetimes: list[tuple[float, float, float]] = field(default_factory=list)
    # seconds standby replicas spent asleep (unpriced)
    standby_seconds: float = 0.0
    # stopped by a MissBudget before every request finished (its attainment is below the budget's goal)
    stopped: bool = False
    # requests that missed when it stopped (0 for a run that went to the end)
    misses_at_stop: int = 0
    # sleepers the router woke between the policy's ticks (data-path wake; also in scale_events)
    wakes: int = 0

    def __reduce__(self) -> tuple[Callable[..., Run], tuple[object, ...]]:
        # a run crosses to the report's process once per simulation (escaler.sim.parallel): a day
        # holds over a million request records, which pickle as objects at ~1 s per 350 k each way;
        # as columns they cross in a fraction of that and come back equal
        fields = tuple(getattr(self, f) for f in _RUN_FIELDS)
        return _unpack_run, (_pack_requests(self.requests), *fields)


_RUN_FIELDS = ("policy", "unfinished", "scrapes", "scale_events", "replica_seconds", "end", "lifetimes",
               "standby_seconds", "stopped", "misses_at_stop", "wakes")


def _pack_requests(requests: Sequence[RequestRecord]) -> tuple[object, ...]:
    """``requests`` as columns (None as NaN or -1); hash ids only for the requests that have them."""
    nan = math.nan
    return (array("d", [q.arrival for q in requests]),
            array("q", [q.prompt_tokens for q in requests]),
            array("q", [q.output_tokens for q in requests]),
            array("d", [nan if q.first_token is None else q.first_token for q in requests]),
            array("d", [nan if q.done is None else q.done for q in requests]),
            array("q", [-1 if q.replica is None else q.replica for q in requests]),
            array("q", [q.generated for q in requests]),
            array("q", [q.prefilled for q in requests]),
            array("q", [q.cached for q in requests]),
            {i: q.hash_ids for i, q in enumerate(requests) if q.hash_ids})


def _unpack_requests(columns: tuple[object, ...]) -> list[RequestRecord]:
    arrival, prompt, output, first, done, replica, generated, prefilled, cached, hashes = columns
    assert isinstance(hashes, dict)
    out = [RequestRecord(a, p, o, None if f != f else f, None if d != d else d, None if r < 0 else r, g, pf,
                         (), c)
           for a, p, o, f, d, r, g, pf, c in zip(arrival, prompt, output, first, done,  # type: ignore[call-overload]
                                                 replica, generated, prefilled, cached, strict=True)]
    for i, h in hashes.items():
        out[i].hash_ids = h
    return out


def _unpack_run(columns: tuple[object, ...], *fields: object) -> Run:
    return Run(requests=_unpack_requests(columns), **dict(zip(_RUN_FIELDS, fields, strict=True)))  # type: ignore[arg-type]


@dataclass(frozen=True)
class MissBudget:
    """Stop a run once more than ``misses`` finished requests have ``missed`` (module docstring)."""

    missed: Callable[[RequestRecord], bool]
    misses: int

    @classmethod
    def for_goal(cls, missed: Callable[[RequestRecord], bool], total: int, goal: float) -> MissBudget:
        """The budget of ``total`` requests at ``goal`` attainment: a run with more misses than this
        has fewer than ``goal x total`` requests within their objectives (unfinished ones miss)."""
        return cls(missed, total - math.ceil(goal * total - 1e-9))


def simulate(arrivals: Sequence[Arrival], policy: Policy, options: SimOptions,
             progress: Callable[[int, int], None] | None = None, budget: MissBudget | None = None) -> Run:
    """Run ``policy`` over ``arrivals``; see the module docstring."""
    if not arrivals:
        raise ValueError("the trace holds no requests")
    if not 0 <= options.min_replicas <= options.max_replicas:
        raise ValueError(f"min_replicas {options.min_replicas} / max_replicas {options.max_replicas}: "
                         "want 0 <= min <= max")
    if not policy.period_s > 0 or not options.scrape_interval_s > 0:
        raise ValueError("the policy period and the scrape interval must be positive")
    heap: list[tuple[float, float, int, str, object]] = []
    seq = itertools.count()
    push = heapq.heappush
    now = 0.0

    def schedule(t: float, kind: str, payload: object, after: float | None = None) -> int:
        n = next(seq)
        push(heap, (t, now if after is None else after, n, kind, payload))
        return n

    coalesce = min(options.scrape_interval_s, policy.period_s) / 2 if COALESCE else 0.0
    fleet = Fleet(options.profile, schedule, options.seed, coalesce, wake_s=options.wake_s,
                  standby_cost=options.standby_cost, wake_delay_s=getattr(policy, "wake_delay_s", None),
                  max_replicas=options.max_replicas)
    wakes = fleet.wakes
    start = min(max(options.initial_replicas, options.min_replicas), options.max_replicas)
    fleet.scale_to(start, 0.0)
    fleet.set_standby(int(getattr(policy, "standby", 0) or 0), 0.0, warm=True)
    for r in fleet.replicas:  # a running service starts warm
        r.ready_at = 0.0
    heap.clear()
    for r in fleet.replicas:
        fleet.ready(r, 0.0)
    # the arrivals in time order, the trace's order on a tie (they come before any other event)
    times = [a.t for a in arrivals]
    order: Sequence[int] = range(len(arrivals))
    if any(b < a for a, b in itertools.pairwise(times)):
        order = sorted(order, key=times.__getitem__)
    schedule(options.scrape_interval_s, _SCRAPE, None, -math.inf)
    schedule(policy.period_s, _TICK, None, -math.inf)

    total = len(arrivals)
    step = max(1, total // 100)
    scrapes: list[Scrape] = []
    events: list[tuple[float, int, int]] = []
    last_arrival = arrivals[-1].t
    deadline = last_arrival + options.horizon_s
    window_arrivals = 0
    counted = (0, 0)  # the token counters at the previous scrape
    seen_done = 0
    missed, stopped = 0, False
    finished = fleet.finished
    reported = 0
    next_arrival = 0
    arrival_at = times[order[0]]
    pop = heapq.heappop
    while True:
        if next_arrival < total and (not heap or arrival_at <= heap[0][0]):
            now = arrival_at
            if now > deadline:
                now = deadline
                break
            fleet.arrive(arrivals[order[next_arrival]], now)
            if wakes:  # the router woke a sleeper: a scale event between ticks
                events.extend(wakes)
                wakes.clear()
            window_arrivals += 1
            next_arrival += 1
            if next_arrival < total:
                arrival_at = times[order[next_arrival]]
            continue
        if not heap:
            break
        t, _, n, kind, payload = pop(heap)
        if kind is ITERATION:
            assert isinstance(payload, Replica)
            if n != payload.event:  # superseded: its run was cut
                continue
            if t > deadline:
                now = deadline
                break
            now = t
            before = len(finished)
            fleet.iteration_done(payload, now)
            if len(finished) != before:
                if progress is not None and len(finished) // step > before // step:
                    reported = len(finished)
                    progress(reported, total)
                if len(finished) >= total:
                    break
            continue
        if t > deadline:
            now = deadline
            break
        now = t
        if kind is READY:
            assert isinstance(payload, Replica)
            fleet.ready(payload, now)
            if len(finished) >= total:
                break
        elif kind is _SCRAPE:
            fleet.advance(now)
            firsts = fleet.first_tokens
            ttfts = tuple(q.ttft for q in firsts)
            firsts.clear()
            tpots = tuple(q.tpot for q in finished[seen_done:] if q.output_tokens > 1)
            if budget is not None:
                missed += sum(1 for q in finished[seen_done:] if budget.missed(q))
            seen_done = len(finished)
            scrapes.append(Scrape(now, fleet.size(), fleet.serving_count(), tuple(fleet.gauges()),
                                  len(fleet.pending), window_arrivals, ttfts,
                                  fleet.prompt_tokens_total - counted[0],
                                  fleet.generation_tokens_total - counted[1], tpots))
            counted = (fleet.prompt_tokens_total, fleet.generation_tokens_total)
            window_arrivals = 0
            if budget is not None and missed > budget.misses:
                stopped = True
                break
            if not _done(fleet, total):
                schedule(now + options.scrape_interval_s, _SCRAPE, None)
        elif kind is _TICK:
            current = fleet.size()
            want = policy.decide(View(now, current, fleet.serving_count(), scrapes))
            want = min(max(int(want), options.min_replicas), options.max_replicas)
            if want != current:
                events.append((now, current, want))
                fleet.scale_to(want, now)
            if not _done(fleet, total):
                schedule(now + policy.period_s, _TICK, None)
    if progress is not None and reported < total:
        progress(len(fleet.finished), total)
    end = now
    return Run(policy.name, sorted(fleet.finished, key=lambda q: (q.arrival, q.replica or 0)),
               total - len(fleet.finished), scrapes, events, fleet.replica_seconds(end), end,
               fleet.lifetimes(end), fleet.standby_seconds(end), stopped, missed if stopped else 0,
               fleet.wake_count)


def _done(fleet: Fleet, total: int) -> bool:
    return len(fleet.finished) >= total
