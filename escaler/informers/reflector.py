"""The reflector: keep a sink in step with the API server by list + watch (client-go's Reflector).

Contract of ``Reflector.run(stop)`` (blocks until ``stop`` is set):

* **List.** Pages of at most ``page_size`` (``limit``/``continue``) from resourceVersion ``""`` (a
  consistent read), each item transformed (``transform``, the informer's: what it will cache) and
  frozen as it arrives, so a relist of large objects peaks at one page of them, not the whole list.
  With an ``ItemwiseLister`` (``escaler.kube``'s) each item is transformed as it is decoded, so a
  page's untransformed objects never live all at once (only its JSON text, once); with any other
  ``ListerWatcher``, page by page. A page is also bounded by bytes: after a page of ``n`` items and
  ``b`` body bytes (``ListResult.body_bytes``, when the lister knows it), the next ``limit`` is
  ``page_bytes * n // b`` (at least 1, at most ``page_size``), so a list of large objects is fetched
  in pages of about ``page_bytes``. With an ``ItemwiseLister``, the first page of the first list asks
  for at most ``FIRST_PAGE_SIZE`` items (the size of the objects is not known yet: a restart must not fetch
  ``page_size`` large objects in one page); a later list starts with the limit the previous one
  ended with. A 410 on a continuation (the continue
  token expired) restarts the list from the first page, up to ``MAX_LIST_RESTARTS`` times. The
  complete list goes to ``sink.replace(items, rv)`` in one call; ``rv`` becomes the last synced
  resourceVersion.
* **Watch.** From the last synced resourceVersion with bookmarks and a server-side
  ``timeoutSeconds`` drawn uniformly from ``[MIN_WATCH_TIMEOUT, 2 * MIN_WATCH_TIMEOUT)`` per
  watch (client-go spreads watch reconnections over 5 to 10 min so they do not synchronise).
  ADDED/MODIFIED/DELETED go to ``sink.add/update/delete`` and advance the resourceVersion;
  BOOKMARK only advances it. Events are applied in stream order, on the ``run`` thread.
* **A dead connection** is noticed by the ``ListerWatcher``'s client-side read timeout (well under
  the watch's length: the server sends a bookmark about every minute, so a silent stream is a dead
  one; ``escaler.kube.dynamic`` waits at most 110 s) and raises ``ConnectionFailure``. A watch
  that fails after staying open ``HEALTHY_WATCH_SECONDS`` was healthy: it is re-opened from the last
  resourceVersion after the *initial* backoff delay, not one grown by older failures.
* **A watch that ends normally** is re-opened from the last resourceVersion, without a relist.
  One that ended within ``SHORT_WATCH_SECONDS`` without any event counts as a failure (a server
  or proxy that closes at once must not cause a hot loop).
* **410 Gone / Expired** (raised on open, or an ERROR event mid-stream): relist at once and
  ``sink.replace`` — the sink is what turns the difference into updates and
  ``DeletedFinalStateUnknown`` tombstones. A second 410 with no event in between backs off.
* **A 429 with a Retry-After** (API Priority and Fairness, or a restarted API server whose storage
  is "(re)initializing") is retried after exactly that delay, without growing the backoff, up to
  ``MAX_THROTTLED_RETRIES`` in a row (client-go's REST client does the same before its reflector
  sees the error): a backoff grown to 30 s by an outage must not delay the recovery by 30 s more.
* **Everything else** — 429 without Retry-After (or past that limit), 5xx, ``ConnectionFailure``,
  other 4xx such as 403 (a missing RBAC permission may be granted later), unexpected exceptions —
  is logged and retried after ``Backoff`` (0.8 s x2 up to 30 s, jittered). A server's Retry-After
  is honoured when longer.
  A failed list is retried as a list; a failed watch is re-opened from the last
  resourceVersion. The backoff resets once a watch delivers an event or stays open
  ``DEFAULT_BACKOFF_RESET_AFTER`` seconds.
* **A sink that raises** on one event is logged and the event skipped: a poison object must
  not wedge the watch.
* **Stopping** sets ``stop``: a helper thread closes the open watch stream, and backoff sleeps
  (``clock.sleep(d, stop)``) return at once. A list request in flight is not interruptible; it
  is bounded by the client-side request timeout of the ``ListerWatcher``.
* **Resync.** With ``resync_period > 0`` a second thread calls ``sink.resync()`` every
  ``resync_period`` seconds of the injected clock.

Limitations: the resourceVersion is treated as opaque (never compared); the helper thread that
closes the stream on stop exits only once ``stop`` is set, so ``run`` should be left by
setting ``stop`` (it is a daemon thread either way).
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from escaler.clock import Clock, RealClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.informers.backoff import DEFAULT_BACKOFF_RESET_AFTER, Backoff
from escaler.informers.frozen import freeze
from escaler.informers.interfaces import (
    ADDED,
    BOOKMARK,
    DELETED,
    ERROR,
    MODIFIED,
    ItemwiseLister,
    ListerWatcher,
    ListResult,
    WatchEvent,
    WatchStream,
)
from escaler.informers.transform import Transform, identity

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "DEFAULT_PAGE_SIZE",
    "FIRST_PAGE_SIZE",
    "HEALTHY_WATCH_SECONDS",
    "MAX_LIST_RESTARTS",
    "MIN_WATCH_TIMEOUT",
    "SHORT_WATCH_SECONDS",
    "Reflector",
    "ReflectorSink",
    "is_expired",
]

log = logging.getLogger("escaler.informers")

# client-go minWatchTimeout: each watch asks the server for timeoutSeconds in [5 min, 10 min).
MIN_WATCH_TIMEOUT = 300.0
# items per list page (client-go pager default)
DEFAULT_PAGE_SIZE = 500
# bytes of response body a list page aims at once the size of its objects is known: a page's JSON
# text lives whole while its items are decoded
DEFAULT_PAGE_BYTES = 4 * 1024 * 1024
# items asked for by the first page of the first list (objects of unknown size): 16 large clones of
# ~200 KiB are ~3 MiB, 16 pods one small request more before pages of page_size
FIRST_PAGE_SIZE = 16
# a watch ending sooner than this with no event is treated as a failure (client-go: 1 s)
SHORT_WATCH_SECONDS = 1.0
# how many times an expired continue token restarts the list before it counts as a failure
MAX_LIST_RESTARTS = 3
# how long run() waits for its resync thread when stopping
THREAD_JOIN_TIMEOUT = 5.0
# a watch open this long before it failed was healthy (it outlived a bookmark interval): the failure
# restarts the backoff from its initial delay
HEALTHY_WATCH_SECONDS = 60.0
# how many 429s with a Retry-After in a row are retried after exactly that delay, leaving the backoff
# as it was (client-go's REST client retries a 429 by its Retry-After up to 10 times)
MAX_THROTTLED_RETRIES = 10


class ReflectorSink(Protocol):
    """Where a reflector writes: an ``Indexer`` is one; ``SharedInformer``'s adds notifications.

    A sink used with ``resync_period > 0`` must also have ``resync() -> None``.
    """

    def add(self, obj: Mapping[str, Any]) -> object: ...

    def update(self, obj: Mapping[str, Any]) -> object: ...

    def delete(self, obj: Mapping[str, Any]) -> object: ...

    def replace(self, objs: list[dict[str, Any]], resource_version: str) -> object: ...


class _ShortWatch(Exception):
    """The server closed a watch at once without sending anything."""


def is_expired(err: BaseException) -> bool:
    """410 Gone / reason Expired: the resourceVersion is too old; relist (client-go isExpiredError)."""
    return isinstance(err, StatusError) and (err.code == 410 or err.reason in ("Expired", "Gone"))


def _resource_version(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        rv = meta.get("resourceVersion")
        if isinstance(rv, str):
            return rv
    return ""


class Reflector:
    """List and watch one resource into a sink; see the module docstring."""

    def __init__(
        self,
        lw: ListerWatcher,
        sink: ReflectorSink,
        *,
        name: str,
        clock: Clock | None = None,
        resync_period: float = 0.0,
        page_size: int = DEFAULT_PAGE_SIZE,
        page_bytes: int = DEFAULT_PAGE_BYTES,
        rng: random.Random | None = None,
        backoff: Backoff | None = None,
        transform: Transform = identity,
    ) -> None:
        if not math.isfinite(resync_period) or resync_period < 0:
            raise ValueError(f"Reflector.resync_period: must be a finite number >= 0, got {resync_period!r}")
        if resync_period > 0 and not callable(getattr(sink, "resync", None)):
            raise TypeError("Reflector.sink: resync_period > 0 needs a sink with a resync() method")
        if page_size < 0:
            raise ValueError(f"Reflector.page_size: must be >= 0 (0 = no pagination), got {page_size!r}")
        if page_bytes < 1:
            raise ValueError(f"Reflector.page_bytes: must be >= 1, got {page_bytes!r}")
        # the API, the destination, and a name for logs; fixed
        self._lw = lw
        self._sink = sink
        self._name = name
        # time source for backoff sleeps, resync ticks and watch durations
        self._clock: Clock = clock or RealClock()
        # seconds between sink.resync() calls; 0 disables the resync thread
        self._resync_period = resync_period
        # list page size; 0 means one unpaginated list request
        self._page_size = page_size
        # body bytes a list page aims at (see the module docstring); fixed
        self._page_bytes = page_bytes
        # limit of the first page of the next list (0 = no pagination): FIRST_PAGE_SIZE with a lister
        # that reports page sizes, page_size with another; then what the previous list ended with;
        # touched only by the run() thread
        self._first_limit = min(page_size, FIRST_PAGE_SIZE) if isinstance(lw, ItemwiseLister) else page_size
        # applied to each listed item as its page arrives (idempotent: the sink applies it again); fixed
        self._transform = transform
        # draws the watch timeouts and (unless a Backoff is injected) the backoff jitter
        self._rng = rng or random.Random()
        # failure backoff; touched only by the run() thread
        self._backoff = backoff or Backoff(clock=self._clock, rng=self._rng)
        # guards _rv, _stream and _running (read from other threads)
        self._lock = threading.Lock()
        # resourceVersion of the last list or applied event; "" before the first list
        self._rv = ""
        # the watch stream being read, so the stop path can close it; None between watches
        self._stream: WatchStream | None = None
        # True from run() entry; a reflector runs once
        self._running = False
        # consecutive 410s with no event in between; touched only by the run() thread
        self._gone_streak = 0
        # consecutive 429s retried by their Retry-After; touched only by the run() thread
        self._throttled = 0

    @property
    def name(self) -> str:
        return self._name

    def last_sync_resource_version(self) -> str:
        """The resourceVersion of the last list or event applied to the sink ("" before any)."""
        with self._lock:
            return self._rv

    def next_watch_timeout(self) -> int:
        """A fresh server-side timeoutSeconds in [MIN_WATCH_TIMEOUT, 2 * MIN_WATCH_TIMEOUT)."""
        return int(MIN_WATCH_TIMEOUT * (1.0 + self._rng.random()))

    # ---- the loop -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """List and watch until ``stop`` is set. Runs once per Reflector."""
        with self._lock:
            if self._running:
                raise RuntimeError(f"reflector {self._name}: run() may be called only once")
            self._running = True
        threading.Thread(target=self._close_on_stop, args=(stop,), daemon=True,
                         name=f"reflector-stop-{self._name}").start()
        resync: threading.Thread | None = None
        if self._resync_period > 0:
            resync = threading.Thread(target=self._resync_loop, args=(stop,), daemon=True,
                                      name=f"reflector-resync-{self._name}")
            resync.start()
        try:
            self._loop(stop)
        finally:
            if resync is not None and stop.is_set():
                resync.join(THREAD_JOIN_TIMEOUT)
            log.debug("reflector %s: stopped", self._name)

    def _loop(self, stop: threading.Event) -> None:
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    self._list(stop)
                    need_list = False
                    continue
                self._watch(stop)
                continue
            except Exception as err:  # every failure is classified below
                failure = err
            if stop.is_set():
                return
            if is_expired(failure):
                need_list = True
                self._gone_streak += 1
                log.info("reflector %s: resourceVersion %r expired (%s); relisting",
                         self._name, self.last_sync_resource_version(), failure)
                if self._gone_streak == 1:
                    continue
                delay = self._backoff.next_delay()
            else:
                delay = self._delay_for(failure)
                self._log_failure(failure, "list" if need_list else "watch", delay)
            if self._clock.sleep(delay, stop):
                return

    def _delay_for(self, err: Exception) -> float:
        retry_after = err.retry_after_seconds if isinstance(err, StatusError) else None
        if (isinstance(err, StatusError) and err.code == 429 and retry_after is not None
                and self._throttled < MAX_THROTTLED_RETRIES):
            # the server says when (a restarting API server: "storage is (re)initializing"): a
            # backoff grown by an outage must not add its 30 s to the recovery
            self._throttled += 1
            return retry_after
        self._throttled = 0
        delay = self._backoff.next_delay()
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay

    def _log_failure(self, err: Exception, what: str, delay: float) -> None:
        if isinstance(err, StatusError):
            hint = ""
            if err.code in (401, 403):
                hint = f" (check the RBAC permissions to list and watch for {self._name})"
            log.warning("reflector %s: %s failed: %s%s; retrying in %.2fs",
                        self._name, what, err, hint, delay)
        elif isinstance(err, ConnectionFailure | _ShortWatch):
            log.warning("reflector %s: %s failed: %s; retrying in %.2fs", self._name, what, err, delay)
        else:
            log.error("reflector %s: unexpected error during %s; retrying in %.2fs", self._name, what, delay,
                      exc_info=err)

    # ---- list ---------------------------------------------------------------------------

    def _list(self, stop: threading.Event) -> None:
        restarts = 0
        while True:
            items: list[dict[str, Any]] = []  # frozen
            continue_: str | None = None
            limit = self._first_limit or None
            try:
                while True:
                    page = self._list_page(limit, continue_)
                    items.extend(page.items)
                    limit = self._next_limit(page, limit)
                    if not page.continue_token:
                        break
                    if stop.is_set():
                        return
                    continue_ = page.continue_token
            except StatusError as err:
                self._first_limit = limit or 0
                if continue_ is None or not is_expired(err) or restarts >= MAX_LIST_RESTARTS:
                    raise
                restarts += 1
                log.info("reflector %s: continue token expired after %d items; restarting the list",
                         self._name, len(items))
                continue
            break
        self._first_limit = limit or 0
        self._sink.replace(items, page.resource_version)
        with self._lock:
            self._rv = page.resource_version
        log.debug("reflector %s: listed %d items at resourceVersion %s",
                  self._name, len(items), page.resource_version)

    def _list_page(self, limit: int | None, continue_: str | None) -> ListResult:
        """One page, its items transformed and frozen (item by item with an ``ItemwiseLister``): the
        decoded objects become garbage at once, so a big list peaks at one transformed, frozen copy
        plus one page, not two full copies (sinks transform and freeze anyway; both are idempotent)."""
        transform = self._transform

        def each(item: dict[str, Any]) -> dict[str, Any]:
            return freeze(transform(item))

        if isinstance(self._lw, ItemwiseLister):
            return self._lw.list_each(resource_version="", limit=limit, continue_=continue_, each=each)
        page = self._lw.list(resource_version="", limit=limit, continue_=continue_)
        return ListResult([each(item) for item in page.items], page.resource_version, page.continue_token,
                          page.body_bytes)

    def _next_limit(self, page: ListResult, limit: int | None) -> int | None:
        """The limit of the page after ``page``: about ``page_bytes`` of objects of its average size
        (``page_size`` when the lister does not know the size)."""
        if limit is None:
            return None
        if page.body_bytes <= 0 or not page.items:
            return self._page_size
        return max(1, min(self._page_size, self._page_bytes * len(page.items) // page.body_bytes))

    # ---- watch --------------------------------------------------------------------------

    def _watch(self, stop: threading.Event) -> None:
        rv = self.last_sync_resource_version()
        stream = self._lw.watch(resource_version=rv, timeout_seconds=self.next_watch_timeout(),
                                allow_bookmarks=True)
        with self._lock:
            self._stream = stream
        started = self._clock.monotonic()
        events = 0
        try:
            if stop.is_set():  # stop raced with the open: _close_on_stop may have missed it
                return
            for event in stream:
                if stop.is_set():
                    return
                if event.type == ERROR:
                    raise StatusError.from_status(event.object)
                self._apply(event)
                events += 1
                if events == 1:
                    self._backoff.reset()
                    self._gone_streak = 0
        except ConnectionFailure:
            if self._clock.monotonic() - started >= HEALTHY_WATCH_SECONDS:
                self._backoff.reset()  # a connection that died after a healthy while: reopen soon
            raise
        finally:
            with self._lock:
                self._stream = None
            stream.close()
        if stop.is_set():
            return
        elapsed = self._clock.monotonic() - started
        if elapsed >= DEFAULT_BACKOFF_RESET_AFTER:
            self._backoff.reset()
        if events == 0 and elapsed < SHORT_WATCH_SECONDS:
            raise _ShortWatch(f"watch from resourceVersion {rv!r} closed after {elapsed:.3f}s with no events")
        log.debug("reflector %s: watch ended after %d events; rewatching from %s",
                  self._name, events, self.last_sync_resource_version())

    def _apply(self, event: WatchEvent) -> None:
        obj = event.object
        try:
            if event.type == ADDED:
                self._sink.add(obj)
            elif event.type == MODIFIED:
                self._sink.update(obj)
            elif event.type == DELETED:
                self._sink.delete(obj)
            elif event.type != BOOKMARK:
                log.warning("reflector %s: ignoring watch event of unknown type %r", self._name, event.type)
                return
        except Exception:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            log.exception("reflector %s: could not apply %s of %s; skipping it",
                          self._name, event.type, meta.get("name") if isinstance(meta, Mapping) else "?")
        rv = _resource_version(obj)
        if rv:
            with self._lock:
                self._rv = rv

    # ---- helper threads -----------------------------------------------------------------

    def _close_on_stop(self, stop: threading.Event) -> None:
        stop.wait()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def _resync_loop(self, stop: threading.Event) -> None:
        resync = getattr(self._sink, "resync")  # noqa: B009 - checked in __init__
        while not self._clock.sleep(self._resync_period, stop):
            try:
                resync()
            except Exception:
                log.exception("reflector %s: resync failed", self._name)
