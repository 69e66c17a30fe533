"""The in-memory serving fleet: replicas that batch requests, and the router in front of them.

Contract of ``Fleet`` (driven by ``escaler.sim.engine``; it never reads a clock, every method is
given ``now`` and asks for future work through the ``schedule(t, kind, replica, after)`` callback,
``after`` the time of the moment that schedules it, by default the event being processed):

* ``scale_to(n, now)`` makes the fleet ``n`` replicas, as a Deployment's ``spec.replicas`` would:
  new replicas start now and serve after the profile's ``startup_s``, drawn per replica from the
  fleet's ``random.Random(seed)`` in creation order (they cost from now);
  removed ones are chosen like a ReplicaSet does — replicas not serving yet first (newest first),
  then serving ones with the fewest requests in flight (newest first on a tie). A removed serving
  replica is taken out of routing at once and finishes what it holds (its queue and its batch)
  before it goes away: graceful termination, no request is lost or retried. It costs until then.
* **Standby** (``set_standby(m, now)``, 0 by default): a pool of ``m`` replicas kept loaded and
  asleep (vLLM's sleep mode; a low-priority standby Deployment), each a ``Sleeper``. A new one
  cold-starts like any replica (drawn from the same ``random.Random``, full price until loaded) and
  is then asleep at ``standby_cost`` of a replica's price. ``scale_to`` takes a new replica from
  the pool first (the one asleep longest): it serves ``wake_s`` after the order (or when its own
  load ends, if it is still loading) and costs full price from the order; its prefix cache starts
  empty. A scale-down puts an idle victim to sleep when the pool is short or holds a replica still
  loading that would be asleep later than the victim (a victim with requests in flight drains and
  goes); the pool is then refilled to ``m`` with new cold starts and trimmed
  (those still loading first). ``set_standby(m, now, warm=True)`` makes the missing ones asleep at
  once without a draw, as a running service has them.
* **Data-path wake** (``wake_delay_s`` set; None, the default: sleepers wake only when ``scale_to``
  asks): the router wakes a sleeper itself, between scale-ups, when an arriving request would queue.
  The predicted queueing delay is the fleet's prefill backlog — the prompt tokens of every request
  in the system not prefilled yet (a prefix cache hit served counts as prefilled) — over the
  prefill rate of the replicas that serve within a wake: the serving ones plus those that will
  serve by ``now + wake_s`` (woken, or loading and nearly done). When it is over ``wake_delay_s``
  after the request is routed, a sleeper already asleep wakes — exactly what ``scale_to(size + 1)``
  does: it serves ``wake_s`` later, costs full price from now, is in ``size()`` (``spec.replicas``:
  the next scaling decision sees it as a replica, no second order for the same capacity), and a
  cold start refills the pool. A wake in flight counts as capacity, so a second one follows only if
  the backlog still exceeds the budget with it counted; never past ``max_replicas``, never a
  sleeper still loading (the poll may take that one). Each wake is recorded in ``wakes`` as a scale
  event ``(time, from, to)``, which the engine takes into the run's.
* ``arrive(request, now)`` routes a request to the serving, non-draining replica with the fewest
  requests (waiting + running; join-shortest-queue), lowest id on a tie. With no such replica the
  request waits in the fleet's own queue, handed out (JSQ, first come first served) when a
  replica starts serving.
* A replica batches as ``escaler.sim.model.ReplicaProfile`` says, with its own prefix cache (an LRU
  of block hashes). ``iteration_done(replica, now)`` ends its current iteration and starts the next
  one when it has work. Planning an iteration costs O(its prefill chunks + the requests it admits),
  not O(its batch): the decoding batch's context is kept as a running sum.
* Every request ends exactly once, in ``finished`` (``RequestRecord``: arrival, first token, done,
  replica), in the order the iterations that end them are processed; a request whose prefill
  completes enters ``first_tokens`` in the same order.
* ``gauges()`` is what a real server exports, per serving replica: ``num_requests_running``,
  ``num_requests_waiting``, KV-cache utilization; ``prompt_tokens_total`` and
  ``generation_tokens_total`` are the fleet's counters (prompt tokens prefilled — not those a prefix
  cache hit served —, tokens generated: a first token counts as generated), advanced at the end of
  each iteration; ``advance(t)`` first brings them to what the iterations ended before ``t`` give.

**Coalesced decode runs** (``coalesce_s`` > 0; an optimization: a run is the same as with one event
per iteration). An iteration with no prefill chunk only decodes, and so do the ones after it — the
same batch, each reading ``len(running)`` more KV tokens — until a sequence finishes or a request
routed to the replica can be admitted. Such a *run* is planned at once: the ends of its iterations
are computed as the step-by-step code computes them (the previous end plus ``decode_step_s(b,
kv)``, in the same order: the same floats), and only its last iteration — the one that finishes a
sequence, at most ``RUN_ITERATIONS`` on — is scheduled. The iterations before it change nothing
anyone reads but the token counters and the replica's step, which ``advance`` and the last
iteration bring up to date. A request routed to the replica cuts the run at the iteration under way
(which admits it, as it would have).

Events are ordered by time, then by the time of the moment that scheduled them (for a run's last
iteration: the end of the one before it), then in the order they were scheduled; arrivals first. A
run's iteration has to be ordered only against an arrival routed to its replica (the arrival comes
first at a tie), a scrape (it reads the counters) and, the last one, a policy tick: a scrape or a
tick is scheduled ``2 x coalesce_s`` or more ahead and a run's iterations are shorter than
``coalesce_s``, so at a tie the iteration was scheduled after it and comes after it, as step by
step. Iterations of two replicas ending at the very same instant may be handled in either order:
that can change only the order of the TTFTs or TPOTs within one scrape, which every reader takes as
a set (``escaler.sim.signals``).
"""

from __future__ import annotations

import heapq
import itertools
import operator
import random
from bisect import bisect_left, insort
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Protocol

from escaler.sim.model import ReplicaProfile
from escaler.sim.trace import Arrival

__all__ = ["ITERATION", "READY", "RUN_ITERATIONS", "Fleet", "Gauge", "Replica", "RequestRecord", "Sleeper"]

# the event kinds a Fleet schedules
READY = "ready"
ITERATION = "iteration"
# the most iterations one coalesced run plans ahead: a request routed to the replica wastes at most
# these many planned ends, and a run that would go on longer ends in an iteration that plans the next
RUN_ITERATIONS = 128


class Schedule(Protocol):
    """``schedule(t, kind, replica, after)`` → the event's id: an event at ``t`` scheduled by the
    moment at ``after`` (a run's iteration before it; None: the event being processed)."""

    def __call__(self, t: float, kind: str, replica: Replica, after: float | None = None, /) -> int:
        ...


@dataclass(slots=True)
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
    # prompt tokens prefilled so far, a prefix cache hit included (chunked prefill spreads a prompt
    # over iterations)
    prefilled: int = 0
    # the trace's hashes of the prompt's blocks (escaler.sim.model: prefix cache), and the prompt
    # tokens a prefix cache hit served (never prefilled)
    hash_ids: tuple[int, ...] = ()
    cached: int = 0

    @property
    def ttft(self) -> float:
        assert self.first_token is not None
        return self.first_token - self.arrival

    @property
    def tpot(self) -> float:
        """Mean time per output token after the first (0 for a one-token answer)."""
        assert self.first_token is not None and self.done is not None
        return (self.done - self.first_token) / (self.output_tokens - 1) if self.output_tokens > 1 else 0.0


@dataclass(slots=True)
class Replica:
    id: int
    created: float
    ready_at: float
    serving: bool = False
    draining: bool = False
    removed: float | None = None
    waiting: deque[RequestRecord] = field(default_factory=deque)
    # decoding sequences as a heap of (the iteration that gives the last token, admission order,
    # request): an iteration pops only the ones it finishes, not every sequence of the batch
    running: list[tuple[int, int, RequestRecord]] = field(default_factory=list)
    # iterations completed
    step: int = 0
    # admitted, prompt not fully prefilled yet (first come, first served)
    admitted: list[RequestRecord] = field(default_factory=list)
    # the iteration under way: the prefill chunk of each prompt in it
    chunks: list[tuple[RequestRecord, int]] = field(default_factory=list)
    busy: bool = False
    kv_used: int = 0
    # the decoding sequences' context: at step s they read kv_context + len(running) x s KV tokens
    # (a sequence ending at step e adds prompt + output - e when it starts decoding)
    kv_context: int = 0
    # the prefix cache: block hashes, least recently used first (at most the profile's blocks)
    prefix: OrderedDict[int, None] = field(default_factory=OrderedDict)
    # requests routed to it and not finished: len(waiting) + len(admitted) + len(running)
    held: int = 0
    # its index in the fleet's serving replicas (Fleet._serving), -1 when it is not one of them
    slot: int = -1
    # the id of its scheduled ITERATION event (an event with another id was superseded: skip it)
    event: int = -1
    # the coalesced run under way (module docstring), else empty: the time it was planned, then the
    # end of each of its iterations; the last one is the scheduled event
    run: list[float] = field(default_factory=list)
    # ``step`` when the run was planned, and how many of its iterations the counters hold
    run_from: int = 0
    run_done: int = 0

    @property
    def in_flight(self) -> int:
        return self.held


@dataclass(slots=True)
class Sleeper:
    """A standby replica: created (full price) until ``asleep_at``, then asleep at the standby price
    until ``ended`` (woken into a serving replica, or trimmed)."""

    created: float
    asleep_at: float
    ended: float | None = None


@dataclass(frozen=True, slots=True)
class Gauge:
    """A serving replica's exported gauges at one scrape."""

    replica: int
    running: int
    waiting: int
    kv_utilization: float


_ID = operator.attrgetter("id")


class Fleet:
    """See the module docstring."""

    def __init__(self, profile: ReplicaProfile, schedule: Schedule, seed: int = 0,
                 coalesce_s: float = 0.0, *, wake_s: float = 10.0, standby_cost: float = 0.2,
                 wake_delay_s: float | None = None, max_replicas: int | None = None) -> None:
        if wake_delay_s is not None and not wake_delay_s >= 0:
            raise ValueError(f"wake_delay_s: must be >= 0 or None, got {wake_delay_s}")
        self.profile = profile
        self.wake_s = wake_s
        self.standby_cost = standby_cost
        # the data-path wake (module docstring): the queueing delay that wakes a sleeper, None: none
        self.wake_delay_s = wake_delay_s
        self.max_replicas = max_replicas
        # prompt tokens in the system not prefilled yet (the data-path wake's backlog)
        self.backlog_tokens = 0
        # the data-path wakes not yet taken by the engine, as scale events (time, from, to)
        self.wakes: list[tuple[float, int, int]] = []
        self.wake_count = 0
        self.sleepers: list[Sleeper] = []  # every standby replica ever made
        self._standby: list[Sleeper] = []  # those not ended, oldest first
        self.standby_target = 0
        self._schedule = schedule
        # decode runs of iterations shorter than this are coalesced (module docstring); 0: none
        self._coalesce_s = coalesce_s
        # the replicas with a coalesced run under way, by id
        self._runs: dict[int, Replica] = {}
        self._rng = random.Random(seed)  # each new replica's start-up draw, in creation order
        self._prefix_blocks = profile.prefix_cache_blocks
        # 1 / the context scale (0: no context term), the prefill rate: read every iteration
        self._inv_scale = 1.0 / profile.prefill_context_scale if profile.prefill_context_scale else 0.0
        self._prefill_rate = profile.prefill_tokens_per_s
        self.replicas: list[Replica] = []  # every replica ever made, by id
        self._active: list[Replica] = []  # not removed, not draining, by id
        self._serving: list[Replica] = []  # those of _active serving, by id: where requests go
        self._held: list[int] = []  # their ``held``, in that order (JSQ reads them at each arrival)
        self.pending: deque[RequestRecord] = deque()
        self.finished: list[RequestRecord] = []
        # requests whose prefill completed, in that order (the engine takes them at each scrape)
        self.first_tokens: list[RequestRecord] = []
        self._next_id = 0
        self._order = itertools.count()  # admission order into decoding, the heap's tie-break
        # counters a real server exports (vLLM's prompt_tokens_total and generation_tokens_total):
        # prompt tokens prefilled and tokens generated, counted at the end of their iteration
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    # ------------------------------------------------------------------ scaling

    @property
    def active(self) -> list[Replica]:
        """Replicas counted in ``spec.replicas``: not removed, not draining (by id)."""
        return self._active

    def size(self) -> int:
        return len(self._active)

    def serving_count(self) -> int:
        return len(self._serving)

    def scale_to(self, n: int, now: float) -> None:
        active = self._active
        for _ in range(n - len(active)):
            r = self._new_replica(now)
            self.replicas.append(r)
            active.append(r)
            self._schedule(r.ready_at, READY, r)
        if n < len(active):
            victims = sorted(active, key=lambda r: (r.serving, r.in_flight, -r.id))[: len(active) - n]
            gone = {r.id for r in victims}
            self._active = [r for r in active if r.id not in gone]
            self._set_serving([r for r in self._serving if r.id not in gone])
            for r in victims:
                if r.in_flight == 0 and self._sleeps(max(now, r.ready_at)):
                    # asleep at once if it served (sleep mode), else once its load ends
                    r.removed = now
                    self._add_sleeper(Sleeper(now, max(now, r.ready_at)))
                elif not r.serving:
                    r.removed = now
                else:
                    r.draining = True
                    self._maybe_gone(r, now)
        self._refill(now)

    def set_standby(self, m: int, now: float, warm: bool = False) -> None:
        """Keep ``m`` standby replicas (module docstring); ``warm``: the missing ones asleep now."""
        self.standby_target = max(0, m)
        if warm:
            while len(self._standby) < self.standby_target:
                self._add_sleeper(Sleeper(now, now))
        self._refill(now)

    @property
    def standby(self) -> int:
        return len(self._standby)

    def _new_replica(self, now: float) -> Replica:
        rid = self._next_id
        self._next_id += 1
        if not self._standby:
            return Replica(rid, created=now, ready_at=now + self.profile.startup_s(self._rng))
        s = min(self._standby, key=lambda x: x.asleep_at)
        self._standby.remove(s)
        s.ended = now
        return Replica(rid, created=now, ready_at=now + self.wake_s if s.asleep_at <= now else s.asleep_at)

    def _sleeps(self, asleep_at: float) -> bool:
        """Whether a victim asleep at ``asleep_at`` joins the pool: it is short, or it holds one
        still loading that would be asleep later (then trimmed by ``_refill``)."""
        if not self.standby_target:
            return False
        return len(self._standby) < self.standby_target or any(s.asleep_at > asleep_at for s in self._standby)

    def _add_sleeper(self, s: Sleeper) -> None:
        self.sleepers.append(s)
        self._standby.append(s)

    def _refill(self, now: float) -> None:
        while len(self._standby) < self.standby_target:
            self._add_sleeper(Sleeper(now, now + self.profile.startup_s(self._rng)))
        while len(self._standby) > self.standby_target:
            s = max(self._standby, key=lambda x: x.asleep_at)  # still loading first
            self._standby.remove(s)
            s.ended = now

    def _set_serving(self, serving: list[Replica]) -> None:
        for r in self._serving:
            r.slot = -1
        for i, r in enumerate(serving):
            r.slot = i
        self._serving = serving
        self._held = [r.held for r in serving]

    def ready(self, r: Replica, now: float) -> None:
        if r.removed is not None or r.draining:
            return
        r.serving = True
        serving = list(self._serving)
        insort(serving, r, key=_ID)
        self._set_serving(serving)
        while self.pending:
            self._route(self.pending.popleft(), now)

    # ------------------------------------------------------------------ requests

    def arrive(self, a: Arrival, now: float) -> None:
        self._route(RequestRecord(a.t, a.prompt_tokens, a.output_tokens, hash_ids=a.hash_ids), now)
        self.backlog_tokens += a.prompt_tokens
        if self.wake_delay_s is not None and self._standby:
            self._maybe_wake(now)

    def _maybe_wake(self, now: float) -> None:
        """Wake a sleeper when the predicted queueing delay is over ``wake_delay_s`` (module
        docstring, data-path wake)."""
        assert self.wake_delay_s is not None
        budget = self.wake_delay_s * self._prefill_rate
        if self.backlog_tokens <= budget * len(self._serving):  # the cheap test first
            return
        soon = now + self.wake_s
        capacity = len(self._serving) + sum(1 for r in self._active if not r.serving and r.ready_at <= soon)
        if self.backlog_tokens <= budget * capacity:
            return
        n = len(self._active)
        if self.max_replicas is not None and n >= self.max_replicas:
            return
        if not any(s.asleep_at <= now for s in self._standby):
            return
        self.scale_to(n + 1, now)  # takes the sleeper asleep longest, refills the pool
        self.wakes.append((now, n, n + 1))
        self.wake_count += 1

    def _route(self, req: RequestRecord, now: float) -> None:
        if not self._serving:
            self.pending.append(req)
            return
        held = self._held
        i = held.index(min(held))  # the first of the fewest: the lowest id on a tie
        held[i] += 1
        best = self._serving[i]
        best.held += 1
        req.replica = best.id
        best.waiting.append(req)
        if not best.busy:
            self._start(best, now)
        elif best.run and len(best.waiting) == 1:  # not behind a request that cannot be admitted
            self._cut_run(best, now)

    def _start(self, r: Replica, now: float) -> None:
        """Plan the next iteration (``escaler.sim.model``: decodes first, then prefill chunks within
        the token budget) and schedule its end, when there is work."""
        p = self.profile
        chunks: list[tuple[RequestRecord, int]] = []
        # the iteration's prefill: tokens, and sum of tokens x the context each attends to on average
        prefill, attended = 0, 0.0
        if r.admitted or r.waiting:
            budget = p.max_batched_tokens - len(r.running) if p.max_batched_tokens else None

            def take(req: RequestRecord) -> None:
                """Put the next chunk of ``req``'s prompt into this iteration, within the budget."""
                nonlocal prefill, attended, budget
                left = req.prompt_tokens - req.prefilled
                chunk = left if budget is None else min(left, budget)
                chunks.append((req, chunk))
                prefill += chunk
                attended += chunk * (req.prefilled + chunk * 0.5)
                budget = None if budget is None else budget - chunk

            for req in r.admitted:  # prompts part-way through their prefill go first
                if budget is not None and budget <= 0:
                    break
                take(req)
            while (r.waiting and len(r.running) + len(r.admitted) < p.max_batch
                   and (budget is None or budget > 0)):
                head = r.waiting[0]
                need = head.prompt_tokens + head.output_tokens
                if r.kv_used + need > p.kv_capacity_tokens and (r.running or r.admitted):
                    break  # no room until something finishes (an oversized request runs alone)
                r.waiting.popleft()
                r.kv_used += need
                r.admitted.append(head)
                if head.hash_ids and self._prefix_blocks:
                    head.cached = head.prefilled = self._prefix_hit(r, head)
                    self.backlog_tokens -= head.cached
                take(head)
        batch = len(r.running) + len(chunks)
        r.chunks = chunks
        if batch == 0:
            r.busy = False
            return
        r.busy = True
        kv = r.kv_context + len(r.running) * r.step
        if not chunks and self._coalesce_s and self._plan_run(r, now, kv):
            return
        r.event = self._schedule(now + p.decode_step_s(batch, kv)
                                 + (prefill + attended * self._inv_scale) / self._prefill_rate, ITERATION, r)

    def _plan_run(self, r: Replica, now: float, kv: int) -> bool:
        """Plan a coalesced run from the decode-only iteration starting now (module docstring):
        its iterations up to the one that finishes the first sequence, at most ``RUN_ITERATIONS``.
        False (nothing planned) when that is one iteration or one is not shorter than
        ``coalesce_s``."""
        n = min(r.running[0][0] - r.step, RUN_ITERATIONS)
        ends = [now]
        if n < 2 or not self._decode_ends(ends, kv, len(r.running), n):
            return False
        self._begin_run(r, ends)
        return True

    def _decode_ends(self, ends: list[float], kv: int, b: int, n: int) -> bool:
        """Append to ``ends`` the ends of ``n`` decode-only iterations of ``b`` sequences after its
        last one, the first reading ``kv`` KV tokens, ``b`` more each; False (nothing appended) when
        the last, the longest, is not shorter than ``coalesce_s``."""
        p = self.profile
        # decode_step_s(b, kv) term by term, as the step-by-step iteration computes it
        base = p.decode_base_s + p.decode_per_seq_s * b
        per_kv = p.decode_per_kv_token_s
        if not base + per_kv * (kv + b * (n - 1)) < self._coalesce_s:
            return False
        # each end is the one before + (base + per_kv x kv_i): the step-by-step sums (a float holds
        # each kv_i exactly, and converts to the same double)
        t, k, fb = ends[-1], float(kv), float(b)
        for _ in range(n):
            t = t + (base + per_kv * k)
            ends.append(t)
            k += fb
        return True

    def _begin_run(self, r: Replica, ends: list[float]) -> None:
        r.run = ends
        r.run_from = r.step
        r.run_done = 0
        self._runs[r.id] = r
        r.event = self._schedule(ends[-1], ITERATION, r, ends[-2])

    def _cut_run(self, r: Replica, now: float) -> None:
        """A request that ``r`` can admit was routed to it at ``now``: its run ends with the iteration
        under way (an iteration ending at ``now`` is under way: the arrival comes first)."""
        ends = r.run
        k = bisect_left(ends, now, r.run_done + 1)
        if k < len(ends) - 1:
            del ends[k + 1:]
            r.event = self._schedule(ends[k], ITERATION, r, ends[k - 1])

    def advance(self, t: float) -> None:
        """Bring the token counters to the iterations of every coalesced run that end before ``t``
        (one ending at ``t`` comes after: module docstring)."""
        gen = 0
        for r in self._runs.values():
            done = bisect_left(r.run, t, r.run_done + 1) - 1
            gen += len(r.running) * (done - r.run_done)
            r.run_done = done
        self.generation_tokens_total += gen

    def _end_run(self, r: Replica) -> None:
        """``r``'s run reaches its last iteration: account for the ones before it."""
        last = len(r.run) - 2
        self.generation_tokens_total += len(r.running) * (last - r.run_done)
        r.step = r.run_from + last
        r.run = []
        del self._runs[r.id]

    def _prefix_hit(self, r: Replica, req: RequestRecord) -> int:
        """The prompt tokens ``r``'s prefix cache serves ``req``: its leading blocks found (each
        touched, most recent now), at most all but the prompt's last token."""
        lru = r.prefix
        hits = 0
        for h in req.hash_ids:
            if h not in lru:
                break
            lru.move_to_end(h)
            hits += 1
        return min(hits * self.profile.prefix_block_tokens, req.prompt_tokens - 1)

    def _prefix_store(self, r: Replica, req: RequestRecord) -> None:
        """Enter ``req``'s blocks, prefilled now, in ``r``'s prefix cache; evict the least recent."""
        lru = r.prefix
        for h in req.hash_ids:
            lru[h] = None
            lru.move_to_end(h)
        while len(lru) > self._prefix_blocks:
            lru.popitem(last=False)

    def iteration_done(self, r: Replica, now: float) -> None:
        """End ``r``'s iteration: every running sequence gets a token, every chunk is prefilled and
        a prompt whose prefill completes gets its first token; then plan the next iteration."""
        if r.run:
            self._end_run(r)
        running = r.running
        self.generation_tokens_total += len(running)
        r.step += 1
        step = r.step
        while running and running[0][0] <= step:
            end, _, done = heapq.heappop(running)
            r.kv_context -= done.prompt_tokens + done.output_tokens - end
            self._finish(r, done, now)
        if r.chunks:
            self._prefilled(r, now)
        self._start(r, now)
        if r.draining:
            self._maybe_gone(r, now)

    def _prefilled(self, r: Replica, now: float) -> None:
        """The chunks of ``r``'s iteration ending now are prefilled."""
        prefilling: list[RequestRecord] = []
        for req, chunk in r.chunks:
            req.prefilled += chunk
            self.prompt_tokens_total += chunk
            self.backlog_tokens -= chunk
            if req.prefilled < req.prompt_tokens:
                prefilling.append(req)
                continue
            req.first_token = now
            req.generated = 1
            self.generation_tokens_total += 1
            self.first_tokens.append(req)
            if req.hash_ids and self._prefix_blocks:
                self._prefix_store(r, req)
            if req.output_tokens <= 1:
                self._finish(r, req, now)
            else:  # one token per iteration from here: the last one output_tokens - 1 iterations on
                end = r.step + req.output_tokens - 1
                r.kv_context += req.prompt_tokens + req.output_tokens - end
                heapq.heappush(r.running, (end, next(self._order), req))
        # admitted prompts that got no chunk this iteration (the budget ran out) keep their place; the
        # chunks went to the first admitted ones (``_start``)
        r.admitted = prefilling + r.admitted[len(r.chunks):]
        r.chunks = []

    def _finish(self, r: Replica, req: RequestRecord, now: float) -> None:
        req.generated = req.output_tokens
        req.done = now
        r.kv_used -= req.prompt_tokens + req.output_tokens
        r.held -= 1
        if r.slot >= 0:
            self._held[r.slot] -= 1
        self.finished.append(req)

    def _maybe_gone(self, r: Replica, now: float) -> None:
        if r.draining and r.removed is None and r.in_flight == 0:
            r.removed = now

    # ------------------------------------------------------------------ observation

    def gauges(self) -> list[Gauge]:
        cap = self.profile.kv_capacity_tokens
        return [Gauge(r.id, len(r.running) + len(r.admitted), len(r.waiting), r.kv_used / cap)
                for r in self._serving]

    def replica_seconds(self, until: float) -> float:
        """The price paid until ``until``, in replica-seconds (a standby second at ``standby_cost``)."""
        return sum(w * (stop - start) for start, stop, w in self.lifetimes(until))

    def lifetimes(self, until: float) -> list[tuple[float, float, float]]:
        """Every priced span: (start, stop, price per second in replicas) — each replica from its
        creation to its removal (or ``until``) at 1, each standby replica's load at 1 and its sleep
        at ``standby_cost``."""
        out = [(r.created, r.removed if r.removed is not None else until, 1.0) for r in self.replicas]
        for s in self.sleepers:
            end = s.ended if s.ended is not None else until
            out.append((s.created, min(s.asleep_at, end), 1.0))
            if end > s.asleep_at:
                out.append((s.asleep_at, end, self.standby_cost))
        return out

    def standby_seconds(self, until: float) -> float:
        """Seconds standby replicas spent asleep until ``until`` (unpriced)."""
        return sum(max(0.0, (s.ended if s.ended is not None else until) - s.asleep_at) for s in self.sleepers)
