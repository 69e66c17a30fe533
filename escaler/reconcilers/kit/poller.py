"""The MetricsTrigger poller: every scaler re-evaluated once per interval, spread over it
(docs/guide/elasticscaler.md#the-triggers).

Metrics change without any Kubernetes event, so MetricsTrigger scalers (with an algorithm; the
HPA path needs none) are re-enqueued every ``--metrics-trigger-poll-interval`` (default 30 s;
0 disables polling). To avoid a burst of N collections at once, each scaler gets a fixed
*phase* in ``[0, interval)``, derived from a stable hash of its namespace/name, and is enqueued
at ``k x interval + phase`` on the manager's clock — so N scalers are spread evenly over the
interval on average, and one scaler is polled at the same offset every cycle, whichever
replica leads.

Contract:

* ``phase(request)`` is deterministic across processes (SHA-256, not Python's salted ``hash``).
* ``start(stop)`` (a leader-only runnable) loops: every ``tick`` seconds of the clock it takes the
  scalers whose next due time comes before the next pass and enqueues each through
  ``add_after(request, delay)`` so that it lands exactly at its due time, then schedules the
  following cycle. Due times are kept in a heap: a pass costs O(k log N) for the k scalers due in
  it, not O(N) (at 10,000 scalers and 1 s ticks, a full scan per pass cost more CPU than the
  polls it scheduled; docs/performance.md).
* **Relisting.** The scaler list (``list_scalers()``, read from the informer cache, O(N)) is taken
  on the first pass and then at most every ``relist`` seconds (default
  ``DEFAULT_RELIST_SECONDS``, never more than the interval; 0 = every pass). A scaler that
  disappears from the list is forgotten; a new one is scheduled at its next phase. Between two
  relists a new scaler is not polled -- it was reconciled when it was created (its add event) --
  and a deleted one may be enqueued once more (its reconcile finds it gone). The queue collapses
  an enqueue that meets a pending one, so a scaler already queued for an event is not reconciled
  twice.
* **Shortcut.** With ``start_poll`` (the reconciler's ``poll``), each due scaler is first offered
  to it: True means it started the poll itself (a metrics collection whose completion enqueues
  the scaler, so a poll costs one reconcile instead of two), up to one tick before the due time;
  False (or an exception) enqueues the scaler as above.
* **Per-scaler intervals** (``spec.pollIntervalSeconds`` of an ElasticScaler or LLMScaler;
  docs/design.md#beyond-the-seeds). ``interval_of(request)`` (read at each relist, from the
  same cache pass) gives a scaler's own interval, or None for the manager's; ``effective_interval``
  raises a spec value below ``min_interval`` (``--min-poll-interval``) to it — the manager's own
  ``interval`` is never raised. A scaler's phase is its hash fraction of *its* interval, so the
  scalers sharing an interval are spread over it as before, and it is re-pushed one of its own
  intervals after each due time, on the same single heap and thread (no timer per scaler). A
  relist that sees a scaler's interval change reschedules it at its next phase of the new one.
* ``poll_time(request, at, interval)`` is the time a reading taken at ``at`` decides as: the due
  time of the poll it belongs to (``same_poll``'s rule: started up to a tick early, or at most half
  an interval late), else ``at`` (a first reading off the grid). A policy with intervals of its own
  (flow sizing's down delay, its headroom intervals) then sees polls exactly one interval apart,
  as the simulator does, however long a busy worker or outbound executor delayed the read.
* ``interval == 0`` → ``start`` returns once ``stop`` is set without doing anything (a per-scaler
  interval does not turn polling on).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import math
import threading
from collections.abc import Callable, Iterable

from escaler.clock import Clock
from escaler.runtime.types import Request
from escaler.scaling.conditions import EventValue

__all__ = ["DEFAULT_MIN_POLL_INTERVAL_SECONDS", "DEFAULT_POLL_TICK_SECONDS", "DEFAULT_RELIST_SECONDS",
           "EVENT_POLL_INTERVAL_CLAMPED", "MIN_GAP_FRACTION", "MetricsPoller", "clamp_note",
           "effective_interval", "phase", "poll_time", "same_poll"]

# how often the poller wakes to schedule the next slice of the interval (upper bound)
DEFAULT_POLL_TICK_SECONDS = 1.0
# how often the poller re-reads the scaler list from the cache (an O(N) pass)
DEFAULT_RELIST_SECONDS = 10.0
# a reading younger than this fraction of the poll interval is never read again (same_poll)
MIN_GAP_FRACTION = 0.5
# --min-poll-interval: the shortest per-scaler poll interval the manager honours (a spec value below
# it is raised to it and a Warning event says so)
DEFAULT_MIN_POLL_INTERVAL_SECONDS = 5.0
# the reason of the Warning event saying a spec interval was raised to --min-poll-interval
EVENT_POLL_INTERVAL_CLAMPED = "PollIntervalClamped"

_log = logging.getLogger(__name__)


def phase(request: Request, interval: float) -> float:
    """The scaler's fixed offset in ``[0, interval)``."""
    if interval <= 0:
        return 0.0
    digest = hashlib.sha256(f"{request.namespace}/{request.name}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return fraction * interval


def same_poll(request: Request, at: float, now: float, interval: float,
              early: float = DEFAULT_POLL_TICK_SECONDS) -> bool:
    """Whether a reading of ``request`` taken at ``at`` still serves a sync at ``now``: it is less
    than half an interval old (``MIN_GAP_FRACTION``: a first reading — a new object, a spec change —
    is not read again at a due time a moment later), or no due time of its poll (``k x interval +
    phase``) falls in ``(at + e, now + e]``, ``e = min(early, interval / 4)``. A poll started up to
    ``e`` before its due time (the poller's shortcut) belongs to that due time, and one that ran late
    belongs to the due time it was for: a reading up to half an interval late never makes the next
    due poll reuse it (the former 80 %-of-the-interval rule skipped a whole poll when one reading came
    more than a fifth of the interval late). ``interval <= 0`` (polling off) → False; ``now`` before
    ``at`` → True."""
    if interval <= 0:
        return False
    if now - at < interval * MIN_GAP_FRACTION:
        return True
    return _poll_index(request, now, interval, early) == _poll_index(request, at, interval, early)


def _poll_index(request: Request, t: float, interval: float, early: float) -> int:
    """``k`` of the last due time ``k x interval + phase`` at or before ``t + e``, ``e = min(early,
    interval / 4)``: the poll a reading started at ``t`` belongs to (``interval`` > 0)."""
    return math.floor((t + min(early, interval / 4) - phase(request, interval)) / interval)


def poll_time(request: Request, at: float, interval: float,
              early: float = DEFAULT_POLL_TICK_SECONDS) -> float:
    """The due time (``k x interval + phase``) of the poll a reading taken at ``at`` belongs to: the
    last one up to ``e = min(early, interval / 4)`` after ``at`` (the poller's shortcut starts a poll
    up to a tick early), when ``at`` is at most ``interval x MIN_GAP_FRACTION`` after it (a poll that
    ran late); else ``at`` itself (a first reading off the grid: a new object, a spec change).
    ``interval <= 0`` (polling off) → ``at``."""
    if interval <= 0:
        return at
    due = _poll_index(request, at, interval, early) * interval + phase(request, interval)
    return due if at - due <= interval * MIN_GAP_FRACTION else at


def clamp_note(spec_seconds: float | None, default: float, floor: float, path: str) -> str | None:
    """The Warning event's note when ``spec_seconds`` is raised to ``floor``; None when it is not."""
    if spec_seconds is None or default <= 0 or spec_seconds >= floor:
        return None
    return (f"{path} {spec_seconds:g} is below the manager's --min-poll-interval {floor:g}s: polled every "
            f"{floor:g}s")


def clamp_events(spec_seconds: float | None, default: float, floor: float, reported: str | None,
                 path: str = "spec.pollIntervalSeconds") -> tuple[str | None, list[EventValue]]:
    """``path`` (a poll interval) raised to ``floor``: the note to remember, and the Warning event to
    emit (only when the note differs from the one ``reported`` last; ElasticScaler and LLMScaler,
    a SignalTrigger's pull interval)."""
    note = clamp_note(spec_seconds, default, floor, path)
    if note is None or note == reported:
        return note, []
    return note, [EventValue("Warning", EVENT_POLL_INTERVAL_CLAMPED, note)]


def effective_interval(spec_seconds: float | None, default: float, floor: float) -> float:
    """The interval a scaler is polled at: its own ``spec_seconds`` raised to ``floor``, or the
    manager's ``default`` when it has none (or polling is off: ``default`` 0)."""
    if spec_seconds is None or default <= 0:
        return default
    return max(float(spec_seconds), floor)


class MetricsPoller:
    """Enqueues every listed scaler once per interval at its phase; see the module docstring."""

    def __init__(self, interval: float, list_scalers: Callable[[], Iterable[Request]],
                 add_after: Callable[[Request, float], None], clock: Clock,
                 tick: float = DEFAULT_POLL_TICK_SECONDS, relist: float = DEFAULT_RELIST_SECONDS,
                 start_poll: Callable[[Request], bool] | None = None,
                 interval_of: Callable[[Request], float | None] | None = None,
                 min_interval: float = DEFAULT_MIN_POLL_INTERVAL_SECONDS) -> None:
        if not math.isfinite(interval) or interval < 0:
            raise ValueError(f"MetricsPoller.interval: must be a finite number >= 0, got {interval!r}")
        if not math.isfinite(tick) or tick <= 0:
            raise ValueError(f"MetricsPoller.tick: must be a finite number > 0, got {tick!r}")
        if not math.isfinite(relist) or relist < 0:
            raise ValueError(f"MetricsPoller.relist: must be a finite number >= 0, got {relist!r}")
        if not math.isfinite(min_interval) or min_interval <= 0:
            raise ValueError(f"MetricsPoller.min_interval: must be a finite number > 0, got {min_interval!r}")
        # seconds between two polls of one scaler; 0 = disabled
        self.interval = interval
        # lists the MetricsTrigger scalers to poll (from the informer cache)
        self._list = list_scalers
        # the controller queue's add_after
        self._add_after = add_after
        # the shortcut that starts a due scaler's poll itself (True) or declines (False: enqueue it)
        self._start_poll = start_poll
        # a scaler's own interval (spec), None = the manager's; read at each relist
        self._interval_of = interval_of
        # the floor of a spec interval (--min-poll-interval); > 0
        self.min_interval = min_interval
        self._clock = clock
        # scheduling granularity: the loop wakes at most this long after a due time is in reach
        self.tick = min(tick, interval) if interval > 0 else tick
        # seconds between two reads of the scaler list; 0 = every pass
        self.relist = min(relist, interval) if interval > 0 else relist
        # guards _due, _heap and _next_relist
        self._mu = threading.Lock()
        # scaler → monotonic time of its next enqueue (always k x its interval + phase); authoritative
        self._due: dict[Request, float] = {}
        # scaler → its effective interval (> 0), for every key of _due
        self._every: dict[Request, float] = {}
        # (due, seq, scaler) for every entry of _due, plus stale ones (due differs or scaler
        # forgotten) skipped when popped; rebuilt when stale entries outnumber live ones
        self._heap: list[tuple[float, int, Request]] = []
        self._seq = itertools.count()
        # clock.monotonic() at or after which the next pass re-reads the list; -inf = first pass
        self._next_relist = -math.inf
        self.name = "elasticscaler-metrics-poller"

    def next_due(self, request: Request, now: float, interval: float | None = None) -> float:
        """The first time >= now at which ``request`` is due (its phase in the current cycle or the
        next) at ``interval`` (default: the manager's)."""
        every = self.interval if interval is None else interval
        p = phase(request, every)
        cycle = math.floor((now - p) / every) + 1
        return cycle * every + p

    def interval_for(self, request: Request) -> float:
        """The effective interval of ``request`` as of the last relist (the manager's when unknown)."""
        with self._mu:
            return self._every.get(request, self.interval)

    def _own_interval(self, request: Request) -> float:
        own = None
        if self._interval_of is not None:
            try:
                own = self._interval_of(request)
            except Exception:  # a malformed object polls at the manager's interval
                _log.debug("no poll interval for %s", request, exc_info=True)
        return effective_interval(own, self.interval, self.min_interval)

    def due_times(self) -> dict[Request, float]:
        with self._mu:
            return dict(self._due)

    def relist_now(self) -> None:
        """Read the scaler list on the next pass: the set to poll changed (a sharded manager gained
        or lost a shard), so waiting up to ``relist`` seconds would poll the wrong set."""
        with self._mu:
            self._next_relist = -math.inf

    def poll_once(self) -> list[tuple[Request, float]]:
        """One scheduling pass: enqueue (with add_after) the scalers due before the next pass."""
        if self.interval <= 0:
            return []
        now = self._clock.monotonic()
        current = set(self._list()) if now >= self._next_relist else None
        with self._mu:
            if current is not None:
                self._sync(current, now)
                _log.debug("poller relisted %d scalers", len(current))
            scheduled = self._take_due(now, now + self.tick)
        for req, delay in scheduled:
            if not self._started(req):
                self._add_after(req, delay)
        return scheduled

    def _started(self, req: Request) -> bool:
        """The shortcut started this poll (up to one tick before its due time)."""
        if self._start_poll is None:
            return False
        try:
            return self._start_poll(req)
        except Exception:  # the shortcut is an optimisation: the reconcile does it properly
            _log.debug("poll shortcut failed for %s; enqueueing it", req, exc_info=True)
            return False

    def _sync(self, current: set[Request], now: float) -> None:
        """Forget scalers no longer listed, schedule new ones at their next phase (holds _mu)."""
        self._next_relist = now + self.relist
        for gone in set(self._due) - current:
            del self._due[gone]
            del self._every[gone]
        for req in current:
            every = self._own_interval(req)
            if req not in self._due or self._every.get(req) != every:
                self._every[req] = every
                self._push(req, self.next_due(req, now, every))
        if len(self._heap) > 2 * len(self._due) + 64:
            self._heap = [(due, next(self._seq), req) for req, due in self._due.items()]
            heapq.heapify(self._heap)

    def _push(self, req: Request, due: float) -> None:
        self._due[req] = due
        heapq.heappush(self._heap, (due, next(self._seq), req))

    def _take_due(self, now: float, horizon: float) -> list[tuple[Request, float]]:
        """Pop every live entry due before ``horizon`` and re-push it one interval later (holds _mu)."""
        scheduled: list[tuple[Request, float]] = []
        heap = self._heap
        while heap and heap[0][0] < horizon:
            due, _, req = heapq.heappop(heap)
            if self._due.get(req) != due:
                continue  # forgotten, or superseded by a later push
            scheduled.append((req, max(0.0, due - now)))
            self._push(req, due + self._every.get(req, self.interval))
        return scheduled

    def start(self, stop: threading.Event) -> None:
        if self.interval <= 0:
            _log.info("metrics trigger polling disabled (interval 0)")
            stop.wait()
            return
        _log.info("polling MetricsTrigger scalers every %gs, spread over the interval", self.interval)
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception:
                _log.exception("metrics poller pass failed")
            if self._clock.sleep(self.tick, stop):
                return
