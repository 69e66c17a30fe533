"""Kubernetes Events (``events.k8s.io/v1``) for the objects a controller acts on, written off-thread.

Contract:

* ``EventRecorder.event(regarding, type_, reason, action, note, related=None)`` never blocks on the
  network and never raises for API trouble: it updates in-memory state and, when an API write is
  needed, queues it for one background writer thread. Invalid arguments (a ``type_`` other than
  Normal/Warning, a ``regarding`` without kind or name) raise ``ValueError``: they are bugs.
* Aggregation, after client-go's ``tools/events`` recorder. Occurrences are *isomorphic* when they
  share the regarding object (uid, apiVersion, kind, namespace, name — not its resourceVersion), the
  related object, reason, action, type, note and reporting controller. The first occurrence creates
  an Event. Further occurrences within ``series_window`` (6 min) of the previous one extend that
  Event's ``series`` (``count``, ``lastObservedTime``) instead of creating objects; a series that
  ended (no occurrence for a window, its count written) is forgotten. Writes per series
  are coalesced: at most one PATCH per ``heartbeat`` (30 s) carrying the latest count, so a hot loop
  costs one create plus one patch per 30 s, and the final count is written at most ``heartbeat``
  after the last occurrence. (client-go patches the second occurrence at once, then only every
  30 min and when the series ends; this keeps the series on the server fresher at a bounded cost.)
  A series patch answered 404 (the Event expired or was deleted) recreates the Event with its series.
  An occurrence after the window starts a new Event.
* Spam filter, after client-go's ``EventSourceObjectSpamFilter``: a token bucket per regarding object
  (``burst`` 25, refilled at ``qps`` = 1 per 5 min) gates every occurrence that would *create* an
  Event. Repeats of a live series are not charged: they cost no extra object and their writes are
  already bounded by the heartbeat. Filtered occurrences are counted in ``spam_filtered``. A bucket
  that has refilled to ``burst`` says nothing a new bucket would not, so it is dropped (swept when
  the buckets have doubled since the last sweep): the recorder's memory follows the objects that
  had Events in the last minutes, not every object it ever saw — a fleet whose objects are created
  and deleted does not fill it up (both maps are also capped at ``MAX_TRACKED``, client-go's LRU
  size).
* The create queue is bounded (``queue_size``); when it is full, or after ``stop()``, occurrences are
  dropped and counted in ``dropped``. Failed writes are logged and counted in ``write_failures``; a
  failed create is not retried (the next occurrence creates again), a series patch that failed with
  a retryable error is retried on the next heartbeat.
* **Fenced writes are dropped.** A write the REST client's write guard refuses (``FencedWrite``:
  this manager lost, or never had, its leader lease — e.g. a process thawed after a freeze) is
  not sent, not retried, and not kept: the occurrence is dropped and counted in ``fenced``, and
  logged once per recorder. So a backlog built up while the process was frozen is discarded on
  thaw instead of being flushed into a cluster another leader now owns.
* **The caller's context travels with the write.** ``event()`` captures the caller's
  ``contextvars`` context (``copy_context``), and the writer thread performs that Event's writes
  inside it (``Context.run``; a series write uses the context of its latest occurrence). So a
  write guard that reads a context variable — the sharded manager's, which fences each write by
  the shard of the reconcile that made it (``escaler.runtime.sharding``) — sees the reconcile's
  value, not the writer thread's empty one.
* ``flush(timeout)`` waits (real time) until every write that is due now has finished; ``stop()`` writes
  pending series counts, lets the writer finish, and joins it.
* Fields written: ``eventTime`` (MicroTime: RFC 3339, 6 fraction digits, ``Z``), ``reportingController``
  = component, ``reportingInstance`` = instance, ``action``, ``reason`` (both cut to 128 chars),
  ``note`` (cut to 1024 bytes), ``type``, ``regarding``/``related`` (ObjectReference). The Event lives
  in the regarding object's namespace (``default`` for cluster-scoped objects) and is named
  ``<regarding name>.<unix nanos, hex>`` as client-go names them.

``FakeRecorder`` records calls in ``events`` for unit tests of the layers above; it validates arguments
exactly as ``EventRecorder`` does.
"""

from __future__ import annotations

import contextvars
import copy
import hashlib
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from escaler.clock import Clock, RealClock
from escaler.errors import FencedWrite, StatusError, is_not_found, is_retryable
from escaler.kube.discovery import ResourceMapping
from escaler.kube.dynamic import DynamicClient, resource_path
from escaler.kube.rest import RestClient
from escaler.packed import JsonPacker

__all__ = [
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_QUEUE_SIZE",
    "EVENTS_MAPPING",
    "MAX_NOTE_BYTES",
    "SERIES_HEARTBEAT_SECONDS",
    "SERIES_WINDOW_SECONDS",
    "EventRecorder",
    "EventType",
    "FakeRecorder",
    "RecordedEvent",
    "Recorder",
    "micro_time",
    "object_reference",
]

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]

# client-go EventSourceObjectSpamFilter: 25 events at once per object, then one per 5 minutes.
DEFAULT_BURST = 25
DEFAULT_QPS = 1.0 / 300.0
# client-go's maxQueuedEvents.
DEFAULT_QUEUE_SIZE = 1000
# An isomorphic occurrence this soon after the previous one extends the series (client-go finishTime).
SERIES_WINDOW_SECONDS = 360.0
# Minimum seconds between two writes of one series.
SERIES_HEARTBEAT_SECONDS = 30.0
# Series and spam buckets remembered (LRU), as client-go's maxLruCacheEntries.
MAX_TRACKED = 4096
# events.k8s.io/v1 validation limits.
MAX_NOTE_BYTES = 1024
MAX_REASON_CHARS = 128
MAX_ACTION_CHARS = 128
MAX_REPORTING_CHARS = 128
# Longest object name; an Event's name is the regarding name plus "." and 16 hex digits.
_MAX_NAME = 253
_NAME_SUFFIX = 17
# The spam buckets are swept for full ones when there are at least this many (see _sweep_buckets).
_SWEEP_FLOOR = 256
# Real seconds between flush()'s re-checks of the writer's progress.
_FLUSH_POLL_SECONDS = 0.05
# Seconds stop() waits for the writer by default.
DEFAULT_STOP_TIMEOUT = 5.0

EVENTS_MAPPING = ResourceMapping("events.k8s.io", "v1", "events", "Event", True, frozenset())
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_REF_FIELDS = ("apiVersion", "kind", "namespace", "name", "uid", "resourceVersion")


def micro_time(t: datetime) -> str:
    """A ``metav1.MicroTime``: ``2026-01-01T00:00:00.000000Z``."""
    if t.tzinfo is None:
        raise ValueError("micro_time: datetime must be timezone-aware")
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def object_reference(obj: dict[str, Any]) -> dict[str, str]:
    """An ObjectReference for an object dict (with ``metadata``) or an ObjectReference-shaped dict."""
    md = obj.get("metadata")
    if isinstance(md, dict):
        src = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), **{
            k: md.get(k) for k in ("namespace", "name", "uid", "resourceVersion")}}
    else:
        src = {k: obj.get(k) for k in _REF_FIELDS}
    ref = {k: str(v) for k, v in src.items() if v}
    if not ref.get("kind") or not ref.get("name"):
        raise ValueError(f"event regarding/related object needs kind and name, got {ref}")
    return ref


def _truncate_bytes(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


@dataclass(frozen=True)
class RecordedEvent:
    # ObjectReference of the regarding object
    regarding: dict[str, str]
    # "Normal" | "Warning"
    type: str
    reason: str
    action: str
    # as recorded (after truncation to MAX_NOTE_BYTES)
    note: str
    # ObjectReference of the related object, if any
    related: dict[str, str] | None = None


def _validate(
    regarding: dict[str, Any], type_: str, reason: str, action: str, note: str,
    related: dict[str, Any] | None,
) -> RecordedEvent:
    if type_ not in ("Normal", "Warning"):
        raise ValueError(f"event type must be 'Normal' or 'Warning', got {type_!r}")
    if not reason or not action:
        raise ValueError(f"event reason ({reason!r}) and action ({action!r}) must not be empty")
    return RecordedEvent(
        regarding=object_reference(regarding),
        type=type_,
        reason=reason[:MAX_REASON_CHARS],
        action=action[:MAX_ACTION_CHARS],
        note=_truncate_bytes(note, MAX_NOTE_BYTES),
        related=object_reference(related) if related is not None else None,
    )


class Recorder(Protocol):
    """What reconcilers use to emit Events."""

    def event(self, regarding: dict[str, Any], type_: EventType, reason: str, action: str, note: str,
              related: dict[str, Any] | None = None) -> None: ...


class FakeRecorder:
    """Records ``event`` calls in ``events``; for unit tests."""

    def __init__(self) -> None:
        # every accepted call, in call order; guarded by _lock
        self.events: list[RecordedEvent] = []
        # guards events
        self._lock = threading.Lock()

    def event(self, regarding: dict[str, Any], type_: EventType, reason: str, action: str, note: str,
              related: dict[str, Any] | None = None) -> None:
        ev = _validate(regarding, type_, reason, action, note, related)
        with self._lock:
            self.events.append(ev)

    def reasons(self) -> list[str]:
        with self._lock:
            return [e.reason for e in self.events]

    def flush(self, timeout: float = 0.0) -> bool:
        return True

    def stop(self, timeout: float = 0.0) -> None:
        return None


# a series' or a bucket's key: the digest of what makes occurrences isomorphic (``_digest``)
_Key = bytes


def _digest(*parts: object) -> _Key:
    """16 bytes naming ``parts`` (strings and tuples of strings): BLAKE2b of their JSON. A live series
    or bucket keeps these instead of the tuple of its strings (the regarding object's five, the
    related object's four, the note: ~500 bytes; issue 30, memory per scaler); two different keys
    share a digest with probability 2^-128 a pair."""
    text = json.dumps(parts, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


# zlib's preset dictionary for the bodies (escaler.packed): a typical scaler Event, its most repeated
# parts last; a body unlike it only packs less. The packed bodies live in this process only.
EVENT_ZDICT = json.dumps({
    "related": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "default", "name": "web"},
    "apiVersion": "events.k8s.io/v1", "kind": "Event",
    "metadata": {"name": "web.1880f2a9c4e1b7d4", "namespace": "default"},
    "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "escaler",
    "reportingInstance": "escaler-7d9f8b6c4-x2k9p", "action": "Scale", "reason": "SuccessfulRescale",
    "note": "New size: 4; reason: evaluated 1 of 1 metrics; recommends 4 replicas", "type": "Normal",
    "regarding": {"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler", "namespace": "default",
                  "name": "web", "uid": "00000000-0000-0000-0000-000000000000", "resourceVersion": "1"},
}, separators=(",", ":")).encode()
_PACKER = JsonPacker(EVENT_ZDICT)


def _pack(body: dict[str, Any]) -> bytes | dict[str, Any]:
    """An Event body kept as compact JSON deflated against ``EVENT_ZDICT`` (~150 bytes instead of a
    tree of four dicts and their strings, ~1.2 KB, or its ~600 bytes of text: a surge keeps up to
    ``MAX_TRACKED`` live series, one per scaler that scaled; issue 30, memory per scaler); a body
    JSON cannot encode stays a dict."""
    try:
        return _PACKER.pack(body)
    except (TypeError, ValueError):
        return body


def _unpack(body: bytes | dict[str, Any]) -> dict[str, Any]:
    """A fresh dict of the packed body (the caller may change it)."""
    if isinstance(body, bytes):
        out: dict[str, Any] = _PACKER.unpack(body)
        return out
    return copy.deepcopy(body)


@dataclass(eq=False, slots=True)
class _Series:
    # namespace and name of the Event object in the API; fixed
    namespace: str
    name: str
    # the body the Event was created with (no series), packed (``_pack``); used to create it, and to
    # recreate it after a 404
    body: bytes | dict[str, Any]
    # occurrences observed so far (>= 1)
    count: int
    # clock.now() of the latest occurrence (series.lastObservedTime)
    last_observed: datetime
    # clock.monotonic() of the latest occurrence; the series ends SERIES_WINDOW after it
    last_observed_mono: float
    # clock.monotonic() when the latest write for it was started; the next one waits a heartbeat
    last_write_mono: float
    # the caller's context at the latest occurrence; the writes run inside it (see the docstring)
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    # True once the create succeeded; series patches are only sent after it
    created: bool = False


@dataclass(frozen=True)
class _Job:
    # "create" the Event, or write its "series"
    kind: Literal["create", "series"]
    key: _Key
    series: _Series
    # snapshot of count / lastObservedTime for a series write
    count: int
    last_observed: datetime


@dataclass(slots=True)
class _Bucket:
    # tokens available (<= burst); one is spent per created Event
    tokens: float
    # clock.monotonic() of the last refill
    last: float


class EventRecorder:
    """Aggregating, rate-limited, asynchronous Event writer; see the module docstring."""

    def __init__(
        self,
        client: DynamicClient | RestClient,
        *,
        component: str,
        instance: str,
        clock: Clock | None = None,
        burst: int = DEFAULT_BURST,
        qps: float = DEFAULT_QPS,
        queue_size: int = DEFAULT_QUEUE_SIZE,
        heartbeat: float = SERIES_HEARTBEAT_SECONDS,
        series_window: float = SERIES_WINDOW_SECONDS,
    ) -> None:
        for what, value in (("component", component), ("instance", instance)):
            if not value or len(value) > MAX_REPORTING_CHARS:
                raise ValueError(f"EventRecorder: {what} must be 1..{MAX_REPORTING_CHARS} characters, "
                                 f"got {value!r}")
        if burst < 1:
            raise ValueError(f"EventRecorder: burst must be >= 1, got {burst}")
        if qps <= 0:
            raise ValueError(f"EventRecorder: qps must be > 0, got {qps}")
        if queue_size < 1:
            raise ValueError(f"EventRecorder: queue_size must be >= 1, got {queue_size}")
        if heartbeat <= 0 or series_window <= heartbeat:
            raise ValueError(f"EventRecorder: need 0 < heartbeat ({heartbeat}) < series_window "
                             f"({series_window})")
        # writes the Events
        self._rest: RestClient = client.rest if isinstance(client, DynamicClient) else client
        # reportingController / reportingInstance of every Event
        self._component = component
        self._instance = instance
        # timestamps, the series window, heartbeats and token refills
        self._clock: Clock = clock or RealClock()
        self._burst = burst
        self._qps = qps
        self._queue_size = queue_size
        self._heartbeat = heartbeat
        self._window = series_window
        # guards every field below; the writer waits on it (through the clock); never held during I/O
        self._cond = threading.Condition()
        # live series by isomorphism key, least recently observed first (a plain dict: an
        # occurrence re-inserts its key at the end); at most MAX_TRACKED
        self._series: dict[_Key, _Series] = {}
        # keys whose count is newer than what was last written; subset of _series' keys
        self._dirty: set[_Key] = set()
        # creates waiting for the writer; len <= queue_size
        self._ops: deque[_Job] = deque()
        # jobs taken by the writer and not finished (0 or 1)
        self._inflight = 0
        # spam-filter token buckets per regarding object, least recently used first; at most MAX_TRACKED
        self._buckets: dict[_Key, _Bucket] = {}
        # sweep the buckets for full ones once they are more than this many
        self._sweep_at = _SWEEP_FLOOR
        # last unix-nanos stamp used in an Event name; names stay unique when the clock stands still
        self._last_stamp = 0
        # occurrences dropped because the queue was full or the recorder stopped
        self._dropped = 0
        # occurrences refused by the spam filter
        self._spam_filtered = 0
        # API writes that failed
        self._write_failures = 0
        # writes refused by the write fence (dropped: never sent, never retried)
        self._fenced = 0
        # set by stop(); the writer drains, writes pending counts, and exits
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"event-recorder-{component}", daemon=True)
        self._thread.start()

    # -- counters -------------------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        with self._cond:
            return self._dropped

    @property
    def spam_filtered(self) -> int:
        with self._cond:
            return self._spam_filtered

    @property
    def write_failures(self) -> int:
        with self._cond:
            return self._write_failures

    @property
    def fenced(self) -> int:
        with self._cond:
            return self._fenced

    # -- recording ------------------------------------------------------------------------------

    def event(self, regarding: dict[str, Any], type_: EventType, reason: str, action: str, note: str,
              related: dict[str, Any] | None = None) -> None:
        ev = _validate(regarding, type_, reason, action, note, related)
        ref = ev.regarding
        obj_parts = tuple(ref.get(k, "") for k in ("apiVersion", "kind", "namespace", "name", "uid"))
        rel = ev.related or {}
        rel_parts = tuple(rel.get(k, "") for k in ("kind", "namespace", "name", "uid"))
        obj_key = _digest(obj_parts)
        key = _digest(obj_parts, rel_parts, ev.reason, ev.action, ev.type, ev.note)
        now_mono = self._clock.monotonic()
        now = self._clock.now()
        with self._cond:
            if self._stopping:
                self._dropped += 1
                return
            s = self._series.get(key)
            if s is not None and now_mono - s.last_observed_mono <= self._window:
                s.count += 1
                s.last_observed = now
                s.last_observed_mono = now_mono
                s.context = contextvars.copy_context()
                self._series[key] = self._series.pop(key)  # now the most recently observed
                self._dirty.add(key)
                self._cond.notify_all()
                return
            if len(self._ops) >= self._queue_size:
                self._dropped += 1
                return
            if not self._allow(obj_key, now_mono):
                self._spam_filtered += 1
                return
            if s is not None:  # an ended series: forget it, start a new Event
                del self._series[key]
                self._dirty.discard(key)
            self._purge(now_mono)
            s = self._new_series(ev, now, now_mono)
            self._series[key] = s
            self._ops.append(_Job("create", key, s, 1, now))
            self._cond.notify_all()

    def _allow(self, obj_key: _Key, now_mono: float) -> bool:
        b = self._buckets.pop(obj_key, None)
        if b is None:
            if len(self._buckets) >= self._sweep_at:
                self._sweep_buckets(now_mono)
            if len(self._buckets) >= MAX_TRACKED:  # the least recently used goes (client-go's LRU)
                del self._buckets[next(iter(self._buckets))]
            b = _Bucket(float(self._burst), now_mono)
        self._buckets[obj_key] = b  # at the end: the most recently used
        b.tokens = min(float(self._burst), b.tokens + (now_mono - b.last) * self._qps)
        b.last = now_mono
        if b.tokens < 1.0:
            return False
        b.tokens -= 1.0
        return True

    def _sweep_buckets(self, now_mono: float) -> None:
        """Drop the buckets that have refilled to ``burst`` (as good as absent); amortised O(1) per
        new bucket, since the next sweep waits until the survivors have doubled."""
        burst = float(self._burst)
        for k, b in list(self._buckets.items()):
            if b.tokens + (now_mono - b.last) * self._qps >= burst:
                del self._buckets[k]
        self._sweep_at = max(_SWEEP_FLOOR, 2 * len(self._buckets))

    def tracked(self) -> tuple[int, int]:
        """(series, spam buckets) held now (for tests and debugging)."""
        with self._cond:
            return len(self._series), len(self._buckets)

    def _purge(self, now_mono: float) -> None:
        while self._series:
            key, s = next(iter(self._series.items()))
            ended = now_mono - s.last_observed_mono > self._window and key not in self._dirty
            if not ended and len(self._series) < MAX_TRACKED:
                return
            del self._series[key]
            self._dirty.discard(key)

    def _new_series(self, ev: RecordedEvent, now: datetime, now_mono: float) -> _Series:
        stamp = max((now - _EPOCH) // timedelta(microseconds=1) * 1000, self._last_stamp + 1)
        self._last_stamp = stamp
        ns = ev.regarding.get("namespace") or "default"
        name = f"{ev.regarding['name'][: _MAX_NAME - _NAME_SUFFIX]}.{stamp:x}"
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "eventTime": micro_time(now),
            "reportingController": self._component,
            "reportingInstance": self._instance,
            "action": ev.action,
            "reason": ev.reason,
            "note": ev.note,
            "type": ev.type,
            "regarding": dict(ev.regarding),
        }
        if ev.related is not None:
            body["related"] = dict(ev.related)
        return _Series(ns, name, _pack(body), 1, now, now_mono, now_mono)

    # -- writer ---------------------------------------------------------------------------------

    def flush(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> bool:
        """Wait up to ``timeout`` real seconds for every write due now; False if some are left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._ops or self._inflight or self._due_series(self._clock.monotonic()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                # nudge the writer: with a fake clock it may have parked just before a step
                self._cond.notify_all()
                self._cond.wait(min(left, _FLUSH_POLL_SECONDS))
            return True

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> None:
        """Stop accepting events, write what is queued and pending series counts, join the writer."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("event recorder %s: writer still busy after %.1fs; abandoning it",
                        self._component, timeout)

    def _due_series(self, now_mono: float) -> bool:
        return any(self._series[k].created and self._series[k].last_write_mono + self._heartbeat <= now_mono
                   for k in self._dirty if k in self._series)

    def _run(self) -> None:
        while True:
            with self._cond:
                job = self._next_job()
                if job is None:
                    return
            try:
                job.series.context.run(self._perform, job)
            except Exception:  # the writer must survive anything; callers never see it
                log.exception("event recorder %s: unexpected error writing %s", self._component,
                              job.series.name)
                with self._cond:
                    self._write_failures += 1
            finally:
                with self._cond:
                    self._inflight -= 1
                    self._cond.notify_all()

    def _next_job(self) -> _Job | None:
        """Take the next write (lock held), waiting on the clock until one is due."""
        while True:
            if self._ops:
                self._inflight += 1
                return self._ops.popleft()
            now_mono = self._clock.monotonic()
            next_due: float | None = None
            for key in list(self._dirty):
                s = self._series.get(key)
                if s is None:
                    self._dirty.discard(key)
                    continue
                if not s.created:
                    continue
                due = s.last_write_mono + self._heartbeat
                if due <= now_mono or self._stopping:
                    self._dirty.discard(key)
                    s.last_write_mono = now_mono
                    self._inflight += 1
                    return _Job("series", key, s, s.count, s.last_observed)
                next_due = due if next_due is None else min(next_due, due)
            if self._stopping:
                return None
            self._clock.wait(self._cond, None if next_due is None else next_due - now_mono)

    def _perform(self, job: _Job) -> None:
        s = job.series
        path = resource_path(EVENTS_MAPPING, s.namespace)
        if job.kind == "create":
            try:
                self._rest.request("POST", path, body=_unpack(s.body))
            except Exception as exc:
                if isinstance(exc, StatusError) and exc.code == 409:
                    pass  # it exists (an earlier attempt got through): the series can proceed
                else:
                    self._failed(f"creating Event {s.namespace}/{s.name}", exc)
                    with self._cond:
                        if self._series.get(job.key) is s:
                            del self._series[job.key]
                            self._dirty.discard(job.key)
                    return
            with self._cond:
                s.created = True
                self._cond.notify_all()
            return

        series = {"count": job.count, "lastObservedTime": micro_time(job.last_observed)}
        try:
            try:
                self._rest.request("PATCH", resource_path(EVENTS_MAPPING, s.namespace, s.name),
                                   body={"series": series}, content_type="application/merge-patch+json")
            except StatusError as exc:
                if not is_not_found(exc):
                    raise
                # the Event expired (default TTL 1 h) or was deleted: recreate it with its series
                body = _unpack(s.body)
                body["series"] = series
                self._rest.request("POST", path, body=body)
        except Exception as exc:
            self._failed(f"updating series of Event {s.namespace}/{s.name}", exc)
            if is_retryable(exc):
                with self._cond:
                    if self._series.get(job.key) is s and not self._stopping:
                        self._dirty.add(job.key)

    def _failed(self, what: str, exc: BaseException) -> None:
        if isinstance(exc, FencedWrite):
            with self._cond:
                self._fenced += 1
                first = self._fenced == 1
            if first:
                log.warning("event recorder %s: %s: %s; dropping this and every later fenced Event "
                            "write", self._component, what, exc)
            return
        log.warning("event recorder %s: %s: %s", self._component, what, exc)
        with self._cond:
            self._write_failures += 1
