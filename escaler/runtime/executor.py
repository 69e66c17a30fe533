"""A bounded background executor for outbound I/O, keyed by object and bounded per group.

Reconcile workers must never wait on a server a tenant names (a Prometheus, a signal endpoint):
eight scalers pointing at a server that trickles one byte every 0.3 s would hold all eight
workers and stall every other tenant's scaling. A reconcile that needs a read *submits* it here
and returns; the job runs on this executor's own threads, its result is kept, and the object's
key is enqueued on the controller's queue so the next reconcile consumes it (controller-runtime's
``source.Channel``: completions are generic events). The reconcile path stays level-based.

Contract of ``KeyedExecutor``:

* **Fixed pool.** ``workers`` daemon threads, started by ``start(queue)`` (the controller ``Source``
  protocol: it starts with the controller, on the elected leader, and ``stop()`` ends it). Jobs
  submitted before ``start`` wait for it.
* **One job per key.** ``submit(key, group, tag, fn, wake)`` queues ``fn`` unless a job for ``key``
  is already queued or running (``Submitted.PENDING``: nothing new is queued). A new submit drops
  a finished result of ``key`` that was not taken.
* **Per-group bound.** At most ``per_group`` jobs of one group (a namespace) run at once; the rest
  wait in that group's FIFO. Groups with work take turns (round-robin), so one namespace's slow
  endpoints hold at most ``per_group`` threads and cannot starve another namespace's jobs.
* **Spare threads for quick groups.** When no group within its bound has a job waiting, a group
  at its bound may borrow an idle thread — only while at least ``per_group`` other threads stay
  idle (``reserve``: another namespace's jobs still start at once, up to their bound), and only
  while the group is *quick*: the moving average of its last jobs' durations is at most
  ``QUICK_JOB_SECONDS``, at least ``per_group`` of its jobs have finished, and none of its running
  jobs has run longer than that. A namespace of 3,000 scalers against a Prometheus answering in
  50 ms needs 100 queries/s at a 30 s poll, which 4 threads cannot give (80/s) while 12 sit idle;
  a namespace whose endpoint turns slow stops borrowing as soon as one of its jobs passes
  ``QUICK_JOB_SECONDS``, so it holds at most ``workers - reserve`` threads for one deadline and
  then its bound. Borrowing never delays a job that fits its group's bound.
* **Growing when the threads are too few.** The pool starts with ``workers`` threads and adds
  one, up to ``max_workers`` (default ``GROW_FACTOR`` x ``workers``), when a job that fits its
  group's bound has waited ``GROW_AFTER_SECONDS`` for a thread while none is idle — at most one
  new thread per ``GROW_AFTER_SECONDS``, checked at each submit and each job start (O(1)). A
  thread is busy for as long as the server takes to answer, whatever CPU is free: 16 threads
  against answers of ~50 ms run at most ~320 collections/s, fewer than the 333/s that 10,000
  scalers polled every 30 s need, so the queue of waiting collections grew through every
  interval (issue 30, docs/performance.md). The per-group bound, borrowing and the reserve are
  unchanged (a slow namespace at its bound makes nothing grow: its waiting jobs do not fit
  their bound); a grown thread stays until ``stop`` (the pool never shrinks below what a backlog
  needed, and never grows past ``max_workers``).
* **Queue bound.** With the default ``queue_per_group=None`` a group's FIFO is bounded only by one
  job per key (a scaler in the informer cache queues at most one collection). A fleet beyond what
  the threads can poll each interval then degrades evenly: every scaler is collected in FIFO
  turn, each interval a little late. A number bounds the FIFO; beyond it ``Submitted.FULL`` and
  nothing is queued — under a sustained overload the poller's fixed phases make the same scalers
  meet the full queue every interval, so a finite bound starves those scalers (measured in the
  3,000-scaler churn, issue 15: 103 of 3,000 never queried over 75 s at ``1024``).
* **Completion.** ``finished(key)`` says a result waits untaken (``wakes`` is True: completions
  are enqueued). A job's return value (or the ``Exception`` it raised) is kept as a
  ``Finished`` with the ``tag`` it was submitted with, until ``take(key)`` pops it; then ``wake``
  is added to the queue given to ``start``. ``discard(key)`` forgets a key: a queued job is
  dropped, a running job's result will be dropped, a finished one is dropped. The consumer
  compares ``Finished.tag`` with what it expects (e.g. the object's uid and generation), so a
  recreated object never consumes its predecessor's result.
* **Tenant.** A job runs inside ``escaler.tenant.for_tenant(<its group>)``: shared pools it draws
  on (the host-name lookups of ``escaler.signals.fetch``) bound each namespace's share.
* **No deadlines here.** A thread cannot be killed: a job bounds its own I/O (the fetchers have a
  total deadline). The bounds above make a slow job cost a thread of its own group, not a worker.
* Metrics (``ExecutorMetrics``, on the manager's registry): ``escaler_outbound_jobs_queued``,
  ``escaler_outbound_jobs_in_flight`` and ``escaler_outbound_threads`` (gauges),
  ``escaler_outbound_jobs_total{result}`` (``ok`` | ``error`` | ``full``),
  ``escaler_outbound_jobs_borrowed_total`` (jobs started on a spare thread beyond their group's
  bound) and ``escaler_outbound_job_duration_seconds``, all
  labelled by ``executor``. Every bookkeeping step is O(1) in the number of queued jobs (the gauges
  come from counters: at 10,000 scalers a count over the jobs per submit and per completion cost
  more CPU than the jobs' own locking).

``InlineExecutor`` runs each job inside ``submit`` and never wakes anyone: the submitter
``take``s the result at once, exactly as if the read were synchronous (unit tests, simulation).

Thread-safe.
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import LRUCache
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from escaler.clock import Clock, RealClock
from escaler.tenant import for_tenant

__all__ = [
    "DEFAULT_OUTBOUND_PER_GROUP",
    "DEFAULT_OUTBOUND_QUEUE_PER_GROUP",
    "DEFAULT_OUTBOUND_WORKERS",
    "QUICK_JOB_SECONDS",
    "Executor",
    "ExecutorMetrics",
    "ExecutorSource",
    "Finished",
    "InlineExecutor",
    "KeyedExecutor",
    "Submitted",
    "executor_metrics",
]

# threads of the outbound executor (--outbound-workers)
DEFAULT_OUTBOUND_WORKERS = 16
# jobs of one namespace running at once (--outbound-per-namespace)
DEFAULT_OUTBOUND_PER_GROUP = 4
# jobs of one namespace waiting beyond that: None = bounded by one job per key (see the docstring)
DEFAULT_OUTBOUND_QUEUE_PER_GROUP: int | None = None
# the pool may grow to this many times its initial threads (KeyedExecutor.max_workers' default)
GROW_FACTOR = 4
# a job that fits its group's bound and has waited this long for a thread, none idle, adds one;
# and at most one thread is added per this many seconds
GROW_AFTER_SECONDS = 1.0
# a group whose jobs take at most this long on average (and none running longer) may borrow spare
# threads beyond its bound: a Prometheus query answers in milliseconds; a trickling server does not
QUICK_JOB_SECONDS = 0.25
# weight of the newest job duration in a group's moving average
_EWMA_WEIGHT = 0.2
# how many groups' (namespaces') speed records are kept (least recently used dropped)
_SPEED_RECORDS = 4096
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_log = logging.getLogger(__name__)


class Submitted(enum.Enum):
    """What ``submit`` did."""

    # the job was queued (or, inline, has run: take() has its result)
    QUEUED = "queued"
    # a job for this key is already queued or running: nothing new was queued
    PENDING = "pending"
    # the group's queue is full: nothing was queued
    FULL = "full"


@dataclass(frozen=True)
class Finished:
    """A finished job: its value, or the exception it raised, and the tag it was submitted with."""

    tag: Hashable
    value: Any = None
    error: Exception | None = None
    # monotonic times (the executor's clock) of the submit and of the end of the job
    submitted_at: float = 0.0
    finished_at: float = 0.0


class Enqueuer(Protocol):
    def add(self, item: Any) -> None: ...


class Executor(Protocol):
    """What a reconciler needs from an executor (``KeyedExecutor`` or ``InlineExecutor``)."""

    def submit(self, key: Hashable, group: str, tag: Hashable, fn: Callable[[], Any],
               wake: Any) -> Submitted: ...

    def take(self, key: Hashable) -> Finished | None: ...

    def pending(self, key: Hashable) -> bool: ...

    def finished(self, key: Hashable) -> bool: ...

    def discard(self, key: Hashable) -> None: ...

    @property
    def wakes(self) -> bool: ...


class ExecutorSource(Executor, Protocol):
    """An executor that is also a controller ``Source``: started with the controller's queue (where
    completions are announced), stopped with it."""

    def start(self, queue: Any) -> None: ...

    def wait_for_sync(self, timeout: float) -> bool: ...

    def stop(self) -> None: ...


class ExecutorMetrics:
    """The executor collectors of one registry (see ``executor_metrics``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.queued = Gauge("escaler_outbound_jobs_queued", "Outbound I/O jobs waiting for a thread",
                            ["executor"], registry=registry)
        self.in_flight = Gauge("escaler_outbound_jobs_in_flight", "Outbound I/O jobs running",
                               ["executor"], registry=registry)
        self.threads = Gauge("escaler_outbound_threads",
                             "Worker threads of the outbound executor (grows from --outbound-workers when "
                             "jobs wait with none idle)", ["executor"], registry=registry)
        self.total = Counter("escaler_outbound_jobs_total",
                             "Outbound I/O jobs by result (ok, error; full: refused, its group's queue full)",
                             ["executor", "result"], registry=registry)
        self.borrowed = Counter("escaler_outbound_jobs_borrowed",
                                "Outbound I/O jobs started on a spare thread beyond their group's bound",
                                ["executor"], registry=registry)
        self.duration = Histogram("escaler_outbound_job_duration_seconds",
                                  "Time from the start of an outbound I/O job to its end",
                                  ["executor"], buckets=DURATION_BUCKETS, registry=registry)


# one ExecutorMetrics per registry: a second executor on one manager shares the collectors
_metrics_of: weakref.WeakKeyDictionary[CollectorRegistry, ExecutorMetrics] = weakref.WeakKeyDictionary()
_metrics_mu = threading.Lock()


def executor_metrics(registry: CollectorRegistry) -> ExecutorMetrics:
    """The executor collectors registered on ``registry`` (made on first use)."""
    with _metrics_mu:
        found = _metrics_of.get(registry)
        if found is None:
            found = _metrics_of[registry] = ExecutorMetrics(registry)
        return found


@dataclass
class _Job:
    group: str
    tag: Hashable
    fn: Callable[[], Any]
    wake: Any
    submitted_at: float
    # True once a worker took it off its group's queue
    running: bool = False
    # True once discard() was called while it ran: its result is dropped
    dropped: bool = False


@dataclass
class _Speed:
    """How quick a group's jobs have been: a moving average of their durations and how many."""

    average: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        self.average = seconds if self.count == 0 else (
            _EWMA_WEIGHT * seconds + (1 - _EWMA_WEIGHT) * self.average)
        self.count += 1


@dataclass
class _Group:
    # keys waiting, oldest first
    queue: deque[Hashable] = field(default_factory=deque)
    # key -> start time of each running job (<= per_group of them, more while the group borrows
    # spare threads; the start times show a job that has run too long)
    started: dict[Hashable, float] = field(default_factory=dict)
    # True while the group's name is in KeyedExecutor._ready (at most once)
    ready: bool = False

    @property
    def running(self) -> int:
        """Jobs of this group running now."""
        return len(self.started)


class KeyedExecutor:
    """See the module docstring."""

    def __init__(self, name: str, *, workers: int = DEFAULT_OUTBOUND_WORKERS,
                 per_group: int = DEFAULT_OUTBOUND_PER_GROUP,
                 queue_per_group: int | None = DEFAULT_OUTBOUND_QUEUE_PER_GROUP,
                 clock: Clock | None = None, metrics: ExecutorMetrics | None = None,
                 max_workers: int | None = None) -> None:
        for field_name, value in (("workers", workers), ("per_group", per_group),
                                  ("queue_per_group", queue_per_group), ("max_workers", max_workers)):
            if field_name in ("queue_per_group", "max_workers") and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"KeyedExecutor.{field_name}: must be an integer >= 1, got {value!r}")
        if max_workers is not None and max_workers < workers:
            raise ValueError(f"KeyedExecutor.max_workers: must be >= workers ({workers}), got {max_workers}")
        if not name:
            raise ValueError("KeyedExecutor.name: must not be empty")
        # fixed configuration
        self.name = name
        self.workers = workers
        # the most threads the pool grows to (see "Growing" in the module docstring)
        self.max_workers = max_workers if max_workers is not None else GROW_FACTOR * workers
        self.per_group = per_group
        self.queue_per_group = queue_per_group
        # threads a borrowing group must leave idle for the other groups
        self.reserve = per_group
        self._clock: Clock = clock or RealClock()
        # None = no metrics (standalone use)
        self._metrics = metrics
        # guards every field below; notified when a group becomes ready or on stop
        self._cond = threading.Condition()
        # key → its queued or running job (one per key)
        self._jobs: dict[Hashable, _Job] = {}
        # key → its finished job, until taken, discarded, or replaced by a new submit
        self._done: dict[Hashable, Finished] = {}
        # group → its queue and running count; a group with neither is removed
        self._groups: dict[str, _Group] = {}
        # groups with a queued job and room to run one, in turn order (each at most once)
        self._ready: deque[str] = deque()
        # group → how quick its jobs have been (outlives the group's _Group, which goes when idle)
        self._speed: LRUCache[str, _Speed] = LRUCache(maxsize=_SPEED_RECORDS)
        # jobs running now, and workers waiting for a job (O(1) gauges and spare-thread checks)
        self._running = 0
        self._idle = 0
        # where completions are announced; None before start() and after stop()
        self._queue: Enqueuer | None = None
        # the worker threads while started (workers, plus those grown since, <= max_workers)
        self._threads: list[threading.Thread] = []
        # clock.monotonic() of the last thread added beyond ``workers``; -inf = none yet
        self._grown_at = -math.inf
        # set by stop(): workers exit after their current job
        self._stopping = False
        # bumped by every start(): a worker of an earlier start exits instead of serving this one
        self._generation = 0

    # ------------------------------------------------------------------ Source protocol

    def start(self, queue: Enqueuer) -> None:
        with self._cond:
            self._queue = queue
            if self._threads:
                return
            self._stopping = False
            self._generation += 1
            self._threads = [self._thread(i) for i in range(self.workers)]
            started = list(self._threads)
        for t in started:
            t.start()

    def _thread(self, i: int) -> threading.Thread:
        return threading.Thread(target=self._worker, args=(self._generation,), name=f"{self.name}-{i}",
                                daemon=True)

    def threads(self) -> int:
        """Worker threads of the pool now (0 when stopped)."""
        with self._cond:
            return len(self._threads)

    def wait_for_sync(self, timeout: float) -> bool:
        return True  # nothing to list

    def stop(self) -> None:
        """Workers exit after their current job; queued jobs and kept results are dropped."""
        with self._cond:
            self._stopping = True
            self._queue = None
            self._threads = []
            self._grown_at = -math.inf
            self._jobs = {k: j for k, j in self._jobs.items() if j.running}
            self._done.clear()
            self._ready.clear()
            for g in self._groups.values():
                g.queue.clear()
                g.ready = False
            self._cond.notify_all()
        self._gauges()

    # ------------------------------------------------------------------ Executor

    def submit(self, key: Hashable, group: str, tag: Hashable, fn: Callable[[], Any],
               wake: Any) -> Submitted:
        with self._cond:
            if key in self._jobs:
                return Submitted.PENDING
            g = self._groups.setdefault(group, _Group())
            if self.queue_per_group is not None and len(g.queue) >= self.queue_per_group:
                full = True
            else:
                full = False
                self._done.pop(key, None)
                self._jobs[key] = _Job(group, tag, fn, wake, self._clock.monotonic())
                g.queue.append(key)
                self._make_ready(group, g)
                if not g.ready and self._idle > self.reserve:
                    self._cond.notify()  # a spare thread may take it (``_borrow``)
            grown = None if full else self._grow()
        if grown is not None:
            grown.start()
        if full:
            if self._metrics is not None:
                self._metrics.total.labels(self.name, "full").inc()
            return Submitted.FULL
        self._gauges()
        return Submitted.QUEUED

    def take(self, key: Hashable) -> Finished | None:
        with self._cond:
            return self._done.pop(key, None)

    def pending(self, key: Hashable) -> bool:
        with self._cond:
            return key in self._jobs

    def finished(self, key: Hashable) -> bool:
        """A result of ``key`` waits to be taken."""
        with self._cond:
            return key in self._done

    @property
    def wakes(self) -> bool:
        """Completions enqueue their ``wake`` item (on the queue given to ``start``)."""
        return True

    def discard(self, key: Hashable) -> None:
        with self._cond:
            self._done.pop(key, None)
            job = self._jobs.get(key)
            if job is None:
                return
            if job.running:
                job.dropped = True
                return
            del self._jobs[key]
            g = self._groups[job.group]
            g.queue.remove(key)
            if not g.queue and g.ready:
                g.ready = False
                self._ready.remove(job.group)
            self._tidy(job.group, g)
        self._gauges()

    # ------------------------------------------------------------------ introspection

    def queued(self) -> int:
        """Jobs waiting for a thread."""
        with self._cond:
            return len(self._jobs) - self._running

    def in_flight(self) -> int:
        """Jobs running now."""
        with self._cond:
            return self._running

    # ------------------------------------------------------------------ workers

    def _worker(self, generation: int) -> None:
        while True:
            with self._cond:
                picked = self._pick(generation)
                if picked is None:
                    return
                grown = self._grow()
            if grown is not None:
                grown.start()
            self._gauges()
            self._run(*picked)

    def _pick(self, generation: int) -> tuple[Hashable, _Job] | None:
        """The next job this worker runs (lock held; waits for one), or None when it must exit."""
        while not self._stopping and generation == self._generation:
            picked = self._next() if self._ready else self._borrow()
            if picked is not None:
                if self._idle > self.reserve and len(self._jobs) > self._running:
                    self._cond.notify()  # more waits: the next idle worker looks for a spare thread
                return picked
            self._idle += 1
            try:
                self._cond.wait()
            finally:
                self._idle -= 1
        return None

    def _next(self) -> tuple[Hashable, _Job]:
        """The next job in turn (lock held, ``_ready`` not empty): its group's oldest."""
        name = self._ready.popleft()
        g = self._groups[name]
        g.ready = False
        key = g.queue.popleft()
        job = self._begin(key, g)
        self._make_ready(name, g)  # the group's next job takes its turn after the other groups'
        return key, job

    def _grow(self) -> threading.Thread | None:
        """One more worker (not started: the caller starts it outside the lock), when a job that fits
        its group's bound has waited ``GROW_AFTER_SECONDS`` with no thread idle, the pool is below
        ``max_workers`` and none was added in the last ``GROW_AFTER_SECONDS`` (lock held)."""
        if (not self._ready or self._idle > 0 or self._stopping or not self._threads
                or len(self._threads) >= self.max_workers):
            return None
        now = self._clock.monotonic()
        if now - self._grown_at < GROW_AFTER_SECONDS:
            return None
        head = self._groups[self._ready[0]].queue[0]  # the next job in turn
        if now - self._jobs[head].submitted_at < GROW_AFTER_SECONDS:
            return None
        self._grown_at = now
        t = self._thread(len(self._threads))
        self._threads.append(t)
        _log.info("outbound executor %s: a job waited %.1fs for a thread; %d threads now (at most %d)",
                  self.name, now - self._jobs[head].submitted_at, len(self._threads), self.max_workers)
        return t

    def _borrow(self) -> tuple[Hashable, _Job] | None:
        """A job of a quick group at its bound, on a spare thread (lock held, ``_ready`` empty):
        the quick group with the fewest running jobs, while ``reserve`` other threads stay idle."""
        if len(self._threads) - self._running - 1 < self.reserve:
            return None
        now = self._clock.monotonic()
        best: tuple[int, str] | None = None
        # every group with a queue is at its bound here (else it would be ready): at most
        # workers / per_group of them, so this scan is short
        for name, g in self._groups.items():
            if g.queue and self._quick(name, g, now) and (best is None or g.running < best[0]):
                best = (g.running, name)
        if best is None:
            return None
        g = self._groups[best[1]]
        key = g.queue.popleft()
        if self._metrics is not None:
            self._metrics.borrowed.labels(self.name).inc()
        return key, self._begin(key, g)

    def _quick(self, name: str, g: _Group, now: float) -> bool:
        speed = self._speed.get(name)
        if speed is None or speed.count < self.per_group or speed.average > QUICK_JOB_SECONDS:
            return False
        oldest = min(g.started.values(), default=math.inf)
        return now - oldest <= QUICK_JOB_SECONDS

    def _begin(self, key: Hashable, g: _Group) -> _Job:
        job = self._jobs[key]
        job.running = True
        g.started[key] = self._clock.monotonic()
        self._running += 1
        return job

    def _run(self, key: Hashable, job: _Job) -> None:
        started = self._clock.monotonic()
        value: Any = None
        error: Exception | None = None
        try:
            # shared pools the job draws on (host-name lookups) bound each namespace's share
            with for_tenant(job.group or None):
                value = job.fn()
        except Exception as err:  # a job's failure is its result, never the worker's end
            _log.debug("outbound job %r failed: %s", key, err)
            error = err
        finished = self._clock.monotonic()
        if self._metrics is not None:
            self._metrics.total.labels(self.name, "ok" if error is None else "error").inc()
            self._metrics.duration.labels(self.name).observe(max(0.0, finished - started))
        with self._cond:
            g = self._groups[job.group]
            g.started.pop(key, None)
            self._running -= 1
            speed = self._speed.get(job.group)
            if speed is None:
                speed = self._speed[job.group] = _Speed()
            speed.observe(max(0.0, finished - started))
            if self._jobs.get(key) is job:
                del self._jobs[key]
            keep = not job.dropped and not self._stopping
            if keep:
                self._done[key] = Finished(job.tag, value, error, job.submitted_at, finished)
            self._make_ready(job.group, g)
            self._tidy(job.group, g)
            queue = self._queue
        self._gauges()
        if keep and queue is not None:
            queue.add(job.wake)

    # ------------------------------------------------------------------ helpers (lock held)

    def _make_ready(self, name: str, g: _Group) -> None:
        if g.queue and g.running < self.per_group and not g.ready and not self._stopping:
            g.ready = True
            self._ready.append(name)
            self._cond.notify()

    def _tidy(self, name: str, g: _Group) -> None:
        if not g.queue and g.running == 0:
            if g.ready:
                self._ready.remove(name)
            del self._groups[name]

    def _gauges(self) -> None:
        if self._metrics is None:
            return
        with self._cond:
            running = self._running
            waiting = len(self._jobs) - running
            threads = len(self._threads)
        self._metrics.queued.labels(self.name).set(waiting)
        self._metrics.in_flight.labels(self.name).set(running)
        self._metrics.threads.labels(self.name).set(threads)


class InlineExecutor:
    """Runs each job inside ``submit``; the submitter ``take``s its result at once (see the module
    docstring). Also a ``Source`` (start/stop do nothing), so it wires like ``KeyedExecutor``."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or RealClock()
        # guards _done
        self._mu = threading.Lock()
        # key → its finished job, until taken
        self._done: dict[Hashable, Finished] = {}

    def start(self, queue: Enqueuer) -> None:
        return None

    def wait_for_sync(self, timeout: float) -> bool:
        return True

    def stop(self) -> None:
        return None

    def submit(self, key: Hashable, group: str, tag: Hashable, fn: Callable[[], Any],
               wake: Any) -> Submitted:
        at = self._clock.monotonic()
        value: Any = None
        error: Exception | None = None
        try:
            value = fn()
        except Exception as err:
            error = err
        with self._mu:
            self._done[key] = Finished(tag, value, error, at, self._clock.monotonic())
        return Submitted.QUEUED

    def take(self, key: Hashable) -> Finished | None:
        with self._mu:
            return self._done.pop(key, None)

    def pending(self, key: Hashable) -> bool:
        return False

    def finished(self, key: Hashable) -> bool:
        with self._mu:
            return key in self._done

    @property
    def wakes(self) -> bool:
        """Never: the submitter takes the result itself."""
        return False

    def discard(self, key: Hashable) -> None:
        with self._mu:
            self._done.pop(key, None)
