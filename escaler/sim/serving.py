"""The in-memory serving fleet: replicas that batch requests, and the router in front of them.

Contract of ``Fleet`` (driven by ``escaler.sim.engine``; it never reads a clock, every method is
given ``now`` and asks for future work through the ``schedule(t, kind, replica)`` callback):

* ``scale_to(n, now)`` makes the fleet ``n`` replicas, as a Deployment's ``spec.replicas`` would:
  new replicas start now and serve after the profile's ``cold_start_s`` (they cost from now);
  removed ones are chosen like a ReplicaSet does — replicas not serving yet first (newest first),
  then serving ones with the fewest requests in flight (newest first on a tie). A removed serving
  replica is taken out of routing at once and finishes what it holds (its queue and its batch)
  before it goes away: graceful termination, no request is lost or retried. It costs until then.
* ``arrive(request, now)`` routes a request to the serving, non-draining replica with the fewest
  requests (waiting + running; join-shortest-queue), lowest id on a tie. With no such replica the
  request waits in the fleet's own queue, handed out (JSQ, first come first served) when a
  replica starts serving.
* A replica batches as ``escaler.sim.model.ReplicaProfile`` says. ``iteration_done(replica, now)``
  ends its current iteration and starts the next one when it has work.
* Every request ends exactly once, in ``finished`` (``RequestRecord``: arrival, first token, done,
  replica).
* ``gauges()`` is what a real server exports, per serving replica: ``num_requests_running``,
  ``num_requests_waiting``, KV-cache utilization.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from escaler.sim.model import ReplicaProfile
from escaler.sim.trace import Arrival

__all__ = ["ITERATION", "READY", "Fleet", "Gauge", "Replica", "RequestRecord"]

# the event kinds a Fleet schedules
READY = "ready"
ITERATION = "iteration"

Schedule = Callable[[float, str, "Replica"], None]


@dataclass
class RequestRecord:
    """One request's life; times in simulated seconds."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    first_token: float | None = None
    done: float | None = None
    replica: int | None = None
    # tokens generated so far
    generated: int = 0

    @property
    def ttft(self) -> float:
        assert self.first_token is not None
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float:
        """Mean time per output token after the first (0 for a one-token answer)."""
        assert self.first_token is not None and self.done is not None
        return (self.done - self.first_token) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


@dataclass
class Replica:
    id: int
    created: float
    ready_at: float
    serving: bool = False
    draining: bool = False
    removed: float | None = None
    waiting: deque[RequestRecord] = field(default_factory=deque)
    running: list[RequestRecord] = field(default_factory=list)
    # admitted in the iteration under way (their first token comes at its end)
    admitted: list[RequestRecord] = field(default_factory=list)
    busy: bool = False
    kv_used: int = 0

    @property
    def in_flight(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.admitted)


@dataclass(frozen=True)
class Gauge:
    """A serving replica's exported gauges at one scrape."""

    replica: int
    running: int
    waiting: int
    kv_utilization: float


class Fleet:
    """See the module docstring."""

    def __init__(self, profile: ReplicaProfile, schedule: Schedule) -> None:
        self.profile = profile
        self._schedule = schedule
        self.replicas: list[Replica] = []  # every replica ever made, by id
        self.pending: deque[RequestRecord] = deque()
        self.finished: list[RequestRecord] = []
        self._next_id = 0

    # ------------------------------------------------------------------ scaling

    @property
    def active(self) -> list[Replica]:
        """Replicas counted in ``spec.replicas``: not removed, not draining."""
        return [r for r in self.replicas if r.removed is None and not r.draining]

    def size(self) -> int:
        return len(self.active)

    def serving_count(self) -> int:
        return sum(1 for r in self.active if r.serving)

    def scale_to(self, n: int, now: float) -> None:
        active = self.active
        for _ in range(n - len(active)):
            r = Replica(self._next_id, created=now, ready_at=now + self.profile.cold_start_s)
            self._next_id += 1
            self.replicas.append(r)
            self._schedule(r.ready_at, READY, r)
        if n < len(active):
            victims = sorted(active, key=lambda r: (r.serving, r.in_flight, -r.id))[: len(active) - n]
            for r in victims:
                if not r.serving:
                    r.removed = now
                else:
                    r.draining = True
                    self._maybe_gone(r, now)

    def ready(self, r: Replica, now: float) -> None:
        if r.removed is not None or r.draining:
            return
        r.serving = True
        while self.pending:
            self._route(self.pending.popleft(), now)

    # ------------------------------------------------------------------ requests

    def arrive(self, a: Arrival, now: float) -> None:
        self._route(RequestRecord(a.t, a.prompt_tokens, a.output_tokens), now)

    def _route(self, req: RequestRecord, now: float) -> None:
        best: Replica | None = None
        for r in self.replicas:
            if r.serving and not r.draining and r.removed is None and (
                    best is None or r.in_flight < best.in_flight):
                best = r
        if best is None:
            self.pending.append(req)
            return
        req.replica = best.id
        best.waiting.append(req)
        if not best.busy:
            self._start(best, now)

    def _start(self, r: Replica, now: float) -> None:
        """Admit what fits and schedule the end of the next iteration (when there is work)."""
        p = self.profile
        prefill = 0
        while r.waiting and len(r.running) + len(r.admitted) < p.max_batch:
            head = r.waiting[0]
            need = head.prompt_tokens + head.output_tokens
            if r.kv_used + need > p.kv_capacity_tokens and (r.running or r.admitted):
                break  # no room until something finishes (an oversized request runs alone)
            r.waiting.popleft()
            r.kv_used += need
            prefill += head.prompt_tokens
            r.admitted.append(head)
        batch = len(r.running) + len(r.admitted)
        if batch == 0:
            r.busy = False
            return
        r.busy = True
        self._schedule(now + p.decode_step_s(batch) + prefill / p.prefill_tokens_per_s, ITERATION, r)

    def iteration_done(self, r: Replica, now: float) -> None:
        still: list[RequestRecord] = []
        for req in r.running + r.admitted:
            if req.first_token is None:
                req.first_token = now
            req.generated += 1
            if req.generated >= req.output_tokens:
                req.done = now
                r.kv_used -= req.prompt_tokens + req.output_tokens
                self.finished.append(req)
            else:
                still.append(req)
        r.running, r.admitted = still, []
        self._start(r, now)
        self._maybe_gone(r, now)

    def _maybe_gone(self, r: Replica, now: float) -> None:
        if r.draining and r.removed is None and r.in_flight == 0:
            r.removed = now

    # ------------------------------------------------------------------ observation

    def gauges(self) -> list[Gauge]:
        cap = self.profile.kv_capacity_tokens
        return [Gauge(r.id, len(r.running) + len(r.admitted), len(r.waiting), r.kv_used / cap)
                for r in self.replicas if r.serving and not r.draining and r.removed is None]

    def replica_seconds(self, until: float) -> float:
        return sum((r.removed if r.removed is not None else until) - r.created for r in self.replicas)
