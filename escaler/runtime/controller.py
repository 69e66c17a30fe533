"""The controller: a rate-limited work queue of ``Request``s drained by N worker threads.

Contract (controller-runtime's ``internal/controller``):

* ``start(stop)`` starts the watch sources (registering their handlers on the informers), waits
  — bounded by ``cache_sync_timeout`` — for their caches to sync, launches
  ``max_concurrent_reconciles`` workers, and blocks until ``stop`` is set. A source that cannot
  sync raises ``TimeoutError`` (the manager turns that into a failed start).
* **One key, one worker.** The queue never hands a key to two workers at once, so a reconciler
  never runs concurrently for the same object; different keys run in parallel.
* **Outcomes** (see ``types.py``): success → ``forget``, result ``success``;
  ``Result(requeue_after=d>0)`` → ``forget`` + ``add_after(d)``, result ``requeue_after``;
  ``Result(requeue=True)`` → ``add_rate_limited``, result ``requeue``; an expected error →
  ``add_rate_limited``, errors +1, result ``error``; ``TerminalError`` → ``forget`` (not retried),
  errors +1 and terminal errors +1, result ``error``; any other exception is a *panic*: recovered,
  logged with its traceback, panics +1, then handled like an error. A worker never dies of a
  reconcile. Every reconcile's duration is observed in ``controller_runtime_reconcile_time_seconds``.
* **Log context.** Each reconcile gets a unique ``reconcile_id`` (a UUID). While it runs,
  ``current_reconcile()`` returns a ``ReconcileContext`` (controller, namespace, name,
  reconcile_id) held in a ``contextvars.ContextVar``; ``ReconcileContextFilter`` copies it onto
  every ``logging.LogRecord`` emitted meanwhile (attributes ``controller``, ``namespace``,
  ``object_name``, ``reconcile_id`` — ``name`` is taken by the logger's name), and the
  controller's own log lines carry the same attributes via ``extra``.
* **Write fence.** If ``can_write`` is given (the manager's ``WriteFence``, or any ``is_set()``
  gate), a worker checks it before every reconcile; once it is closed (lease lost or lapsed), no
  new reconcile starts and the workers exit. A write refused on the wire by the fence mid-reconcile
  raises ``FencedWrite``, an expected error (no panic is counted).
* **Shards.** If ``shards`` is given (the manager's ``ShardedFence``, ``--total-shards`` > 1), the
  gate is per request instead: a request whose shard (``shards.shard_of``) this replica does not
  lead is forgotten and dropped when a worker pops it (the queue's ``done`` follows), and a
  led one is reconciled inside ``writing_for(shard)``, so every write it makes — and every Event it
  records — is fenced by that shard's lease (``escaler.runtime.sharding``). Workers never exit
  for a lost shard: the other shards go on. ``enqueue_shard(i)`` enqueues every primary object of
  shard ``i`` (listed by ``set_primary_lister``'s function) — what a gained shard needs.
* **Shutdown.** When ``stop`` is set the queue is shut down: no worker starts a new reconcile
  (items still queued are handed back with ``done`` unprocessed), in-flight reconciles run to
  completion, and ``start`` returns once every worker has exited. With ``shutdown_timeout``
  set, it returns after at most that many seconds *of the injected clock* instead, abandoning
  (and logging) a reconcile stuck past it — worker threads are daemons. The default (``None``)
  waits: under a manager, the manager bounds the wait and must see a stuck controller as still
  running, so it does not release the lease while a reconcile might still write. This is
  ``shutdown_with_drain`` made boundable, over ``Queue.shutdown``, since the queue's own drain
  waits without limit.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from escaler.clock import Clock, RealClock, wait_for
from escaler.errors import ConnectionFailure, FencedWrite, StatusError
from escaler.runtime.fence import WriteGate
from escaler.runtime.metrics import (
    RESULT_ERROR,
    RESULT_REQUEUE,
    RESULT_REQUEUE_AFTER,
    RESULT_SUCCESS,
    ControllerMetrics,
    MetricsRegistry,
)
from escaler.runtime.sharding import ShardGate, writing_for
from escaler.runtime.types import ReconcileError, Reconciler, Request, Result, TerminalError
from escaler.workqueue.queue import ShutDown
from escaler.workqueue.ratelimiting import RateLimitingQueue

__all__ = [
    "DEFAULT_CACHE_SYNC_TIMEOUT",
    "DEFAULT_MAX_CONCURRENT_RECONCILES",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "EXPECTED_ERRORS",
    "Controller",
    "ReconcileContext",
    "ReconcileContextFilter",
    "Source",
    "WorkQueue",
    "current_reconcile",
]

DEFAULT_MAX_CONCURRENT_RECONCILES = 1
# How long start() waits for its sources' caches (controller-runtime's CacheSyncTimeout).
DEFAULT_CACHE_SYNC_TIMEOUT = 120.0
# How long start() waits for in-flight reconciles after stop; None = until they finish.
DEFAULT_SHUTDOWN_TIMEOUT: float | None = None

# Exceptions that are a reconciler's ordinary "return err", not a bug (no panic, no traceback).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    ReconcileError, StatusError, ConnectionFailure, OSError, FencedWrite)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReconcileContext:
    """Who is being reconciled right now, on this thread."""

    controller: str
    namespace: str
    name: str
    reconcile_id: str


_CURRENT: contextvars.ContextVar[ReconcileContext | None] = contextvars.ContextVar(
    "escaler_reconcile", default=None
)


def current_reconcile() -> ReconcileContext | None:
    """The reconcile running on this thread, or ``None`` outside a reconcile."""
    return _CURRENT.get()


class ReconcileContextFilter(logging.Filter):
    """Adds ``controller``, ``namespace``, ``object_name`` and ``reconcile_id`` to log records
    emitted during a reconcile (attach to a handler; never filters anything out)."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _CURRENT.get()
        if ctx is not None:
            for attr, value in (("controller", ctx.controller), ("namespace", ctx.namespace),
                                ("object_name", ctx.name), ("reconcile_id", ctx.reconcile_id)):
                if not hasattr(record, attr):
                    setattr(record, attr, value)
        return True


class WorkQueue(Protocol):
    """The queue operations a controller uses (``RateLimitingQueue[Request]`` satisfies it)."""

    def add(self, item: Request) -> None: ...

    def get(self) -> Request: ...

    def done(self, item: Request) -> None: ...

    def add_after(self, item: Request, delay_seconds: float) -> None: ...

    def add_rate_limited(self, item: Request) -> None: ...

    def forget(self, item: Request) -> None: ...

    def num_requeues(self, item: Request) -> int: ...

    def shutdown(self) -> None: ...

    def __len__(self) -> int: ...


class Source(Protocol):
    """A watch feeding the controller's queue (see ``source.Kind``)."""

    def start(self, queue: Any) -> None: ...

    def wait_for_sync(self, timeout: float) -> bool: ...

    def stop(self) -> None: ...


class Controller:
    """Reconciles ``Request``s from its queue with ``max_concurrent_reconciles`` workers."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        queue: WorkQueue | None = None,
        max_concurrent_reconciles: int = DEFAULT_MAX_CONCURRENT_RECONCILES,
        clock: Clock | None = None,
        metrics: ControllerMetrics | None = None,
        log: logging.Logger | None = None,
        can_write: WriteGate | None = None,
        shutdown_timeout: float | None = DEFAULT_SHUTDOWN_TIMEOUT,
        cache_sync_timeout: float = DEFAULT_CACHE_SYNC_TIMEOUT,
        shards: ShardGate | None = None,
    ) -> None:
        if not name:
            raise ValueError("Controller.name: must not be empty")
        if not isinstance(max_concurrent_reconciles, int) or max_concurrent_reconciles < 1:
            raise ValueError(
                "Controller.max_concurrent_reconciles: must be an integer >= 1, "
                f"got {max_concurrent_reconciles!r}"
            )
        if shutdown_timeout is not None and shutdown_timeout < 0:
            raise ValueError(f"Controller.shutdown_timeout: must be >= 0, got {shutdown_timeout}")
        if cache_sync_timeout <= 0:
            raise ValueError(f"Controller.cache_sync_timeout: must be > 0, got {cache_sync_timeout}")
        # identity and collaborators; fixed after construction
        self.name = name
        self.reconciler = reconciler
        self._clock: Clock = clock or RealClock()
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.shutdown_timeout = shutdown_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self._log = log or _log
        # None = always allowed to write; else reconciles start only while it is set
        self._can_write = can_write
        # None = not sharded; else a request runs only while its shard is led (replaces can_write)
        self._shards = shards
        # lists the primary objects' requests (from the cache) for enqueue_shard; None = unknown
        self._primary_lister: Callable[[], Iterable[Request]] | None = None
        # per-controller metrics; a private registry when none is given (standalone use)
        self.metrics = metrics or MetricsRegistry().controller(name)
        self.metrics.set_max_concurrent_reconciles(max_concurrent_reconciles)
        # the work queue; owned by this controller (shut down when it stops)
        self.queue: WorkQueue = queue if queue is not None else _default_queue(name, self._clock)
        # guards _sources and _started
        self._mu = threading.Lock()
        # watches; started in start(), or at once when added while running
        self._sources: list[Source] = []
        # True once start() was called (a controller starts once)
        self._started = False
        # True from the workers' launch until start() returns
        self._running = False
        # guards _live_workers; notified by each worker as it exits, so start() can await them on
        # the injected clock (Thread.join would measure the shutdown timeout in wall time)
        self._workers_exited = threading.Condition()
        # workers launched and not yet exited; an abandoned (stuck) worker stays counted
        self._live_workers = 0

    # ------------------------------------------------------------------ wiring

    def watch(self, source: Source) -> None:
        """Add a watch; started with the controller, or at once if it is already running."""
        with self._mu:
            self._sources.append(source)
            running = self._running
        if running:
            source.start(self.queue)

    def enqueue(self, request: Request) -> None:
        """Ask for ``request`` to be reconciled (collapses with a pending one)."""
        self.queue.add(request)

    def set_primary_lister(self, lister: Callable[[], Iterable[Request]]) -> None:
        """The requests of every primary object (the builder's ``for_`` cache), for ``enqueue_shard``."""
        self._primary_lister = lister

    def enqueue_shard(self, shard: int) -> int:
        """Enqueue every primary object of ``shard`` (a shard was just gained); returns how many."""
        if self._shards is None or self._primary_lister is None:
            return 0
        gate = self._shards
        requests = [r for r in self._primary_lister() if gate.shard_of(r.namespace, r.name) == shard]
        for r in requests:
            self.queue.add(r)
        self._log.info("controller %s: shard %d gained, %d object(s) enqueued", self.name, shard,
                       len(requests), extra={"controller": self.name})
        return len(requests)

    # ------------------------------------------------------------------ lifecycle

    def start(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set; see the module docstring."""
        with self._mu:
            if self._started:
                raise RuntimeError(f"controller {self.name}: already started")
            self._started = True
            sources = list(self._sources)
        extra = {"controller": self.name}
        self._log.info("starting controller %s", self.name, extra=extra)
        # the worker threads; all launched together once the caches synced
        workers: list[threading.Thread] = []
        try:
            for src in sources:
                src.start(self.queue)
            # one deadline for all sources, on the clock the informers wait with
            deadline = self._clock.monotonic() + self.cache_sync_timeout
            for src in sources:
                if stop.is_set():
                    break
                if not src.wait_for_sync(max(0.0, deadline - self._clock.monotonic())):
                    raise TimeoutError(
                        f"controller {self.name}: timed out after {self.cache_sync_timeout:g}s "
                        f"waiting for the cache of {src!r} to sync"
                    )
            with self._mu:
                self._running = True
                late = self._sources[len(sources):]
            for src in late:
                src.start(self.queue)
            workers.extend(
                threading.Thread(target=self._worker, args=(stop,), name=f"{self.name}-worker-{i}",
                                 daemon=True)
                for i in range(self.max_concurrent_reconciles)
            )
            self._log.info("starting %d workers for controller %s", len(workers), self.name, extra=extra)
            for w in workers:
                with self._workers_exited:
                    self._live_workers += 1
                try:
                    w.start()
                except BaseException:
                    with self._workers_exited:
                        self._live_workers -= 1
                    raise
            stop.wait()
            self._log.info("stopping controller %s: waiting for in-flight reconciles", self.name, extra=extra)
        finally:
            # Wake idle workers; busy ones finish their reconcile, then hand queued items back.
            self.queue.shutdown()
            with self._mu:
                all_sources = list(self._sources)
            for src in all_sources:
                src.stop()
        with self._workers_exited:
            wait_for(self._clock, self._workers_exited, lambda: self._live_workers == 0,
                     self.shutdown_timeout)
            stuck = self._live_workers
        with self._mu:
            self._running = False
        if stuck:
            self._log.error("controller %s: %d reconcile(s) still running after %gs; abandoned",
                            self.name, stuck, self.shutdown_timeout or 0.0, extra=extra)
        else:
            self._log.info("controller %s stopped", self.name, extra=extra)

    # ------------------------------------------------------------------ workers

    def _worker(self, stop: threading.Event) -> None:
        try:
            while True:
                try:
                    if not self._process_next(stop):
                        return
                except Exception:  # a bug in the loop itself: log and keep the worker alive
                    self._log.exception("controller %s: worker error", self.name,
                                        extra={"controller": self.name})
        finally:
            with self._workers_exited:
                self._live_workers -= 1
                self._workers_exited.notify_all()

    def _process_next(self, stop: threading.Event) -> bool:
        """Handle one item; False when the worker should exit."""
        try:
            req = self.queue.get()
        except ShutDown:
            return False
        try:
            if stop.is_set():
                return False
            shard: int | None = None
            if self._shards is not None:
                shard = self._shards.shard_of(req.namespace, req.name)
                if not self._shards.leads(shard):
                    self.queue.forget(req)  # another replica's (or nobody's yet): not ours to run
                    return True
            elif self._can_write is not None and not self._can_write.is_set():
                self._log.info("controller %s: no longer allowed to write; worker exiting", self.name,
                               extra={"controller": self.name})
                return False
            self.metrics.worker_busy(+1)
            try:
                with writing_for(shard):
                    self._reconcile_handler(req)
            finally:
                self.metrics.worker_busy(-1)
            return True
        finally:
            self.queue.done(req)

    def _reconcile_handler(self, req: Request) -> None:
        ctx = ReconcileContext(self.name, req.namespace, req.name, str(uuid.uuid4()))
        extra = {"controller": ctx.controller, "namespace": ctx.namespace, "object_name": ctx.name,
                 "reconcile_id": ctx.reconcile_id}
        token = _CURRENT.set(ctx)
        started = self._clock.monotonic()
        try:
            try:
                result = self.reconciler.reconcile(req)
                if not isinstance(result, Result):
                    raise TypeError(
                        f"{type(self.reconciler).__name__}.reconcile returned "
                        f"{type(result).__name__}, not Result"
                    )
            except TerminalError as exc:
                self._observe(RESULT_ERROR, started)
                self.metrics.error(terminal=True)
                self.queue.forget(req)
                self._log.error("reconciler error (terminal, not retried) for %s: %s", req, exc, extra=extra)
                return
            except EXPECTED_ERRORS as exc:
                self._observe(RESULT_ERROR, started)
                self.metrics.error()
                self.queue.add_rate_limited(req)
                self._log.error("reconciler error for %s: %s", req, exc, extra=extra)
                return
            except Exception:
                self._observe(RESULT_ERROR, started)
                self.metrics.panic()
                self.metrics.error()
                self.queue.add_rate_limited(req)
                self._log.exception("observed a panic in reconciler for %s (recovered; requeued)", req,
                                    extra=extra)
                return
            if result.requeue_after > 0:
                self.queue.forget(req)
                self.queue.add_after(req, result.requeue_after)
                self._observe(RESULT_REQUEUE_AFTER, started)
            elif result.requeue:
                self.queue.add_rate_limited(req)
                self._observe(RESULT_REQUEUE, started)
            else:
                self.queue.forget(req)
                self._observe(RESULT_SUCCESS, started)
        finally:
            _CURRENT.reset(token)

    def _observe(self, result: str, started: float) -> None:
        self.metrics.reconcile_finished(result, self._clock.monotonic() - started)


def _default_queue(name: str, clock: Clock) -> RateLimitingQueue[Request]:
    # A standalone controller's queue: default rate limiter on the controller's clock, no metrics.
    q: RateLimitingQueue[Request] = RateLimitingQueue(name=name, clock=clock)
    return q

