"""SignalTrigger: activity signals in memory, and the replica count they recommend
(docs/guide/elasticscaler.md#the-triggers).

Signals arrive pushed (``POST /signal/v1/namespaces/{ns}/elasticscalers/{name}`` on the
manager's API server, ``parse_signal_body`` + ``SignalStore.record``) or pulled (the reconciler
GETs ``signalTrigger.endpoint`` every ``pollIntervalSeconds``). Both bodies are
``{"active": bool}`` and/or ``{"replicas": n}``.

``recommend(...)`` is the rule, pure given the store's entry and the time:

* ``{"replicas": n}`` asks for n replicas; it stands until another signal replaces it or the
  scaler goes idle. It counts as activity when n > 0;
* ``{"active": true}`` is activity: from zero the scaler goes to ``activationReplicas``; above
  zero it holds the current count (load-based sizing is another trigger's job);
* with no activity for ``idleTimeoutSeconds`` the recommendation is ``minReplicas`` (0 allowed:
  scale to zero). The idle clock starts at the last activity, or — after a restart, when no
  signal was seen yet — when this process first saw the scaler, so a restart never scales a
  busy service to zero at once;
* ``{"active": false}`` is not activity; it does not reset the idle clock either.

Bounds, stabilization and guards apply afterwards as for every trigger (the pipeline's job).
The store is per process: a standby replica that takes over starts the idle clock afresh.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from escaler.clock import Clock
from escaler.runtime.apiserver import ApiError, ApiRequest, ApiResponse
from escaler.runtime.types import Request

__all__ = [
    "MAX_SIGNAL_BODY_BYTES",
    "SIGNAL_ROUTE",
    "Signal",
    "SignalAPI",
    "SignalEntry",
    "SignalRecommendation",
    "SignalStore",
    "parse_signal_body",
    "recommend",
]

# a push body larger than this is refused (413)
MAX_SIGNAL_BODY_BYTES = 4096


@dataclass(frozen=True)
class Signal:
    """One signal: activity and/or a replica count."""

    # True = activity; False = explicitly inactive; None = not said
    active: bool | None = None
    # an explicit replica request (>= 0); None = not said
    replicas: int | None = None

    @property
    def is_activity(self) -> bool:
        return self.active is True or (self.replicas is not None and self.replicas > 0)


def parse_signal_body(data: bytes | str | Mapping[str, Any]) -> Signal:
    """A push or pull body → ``Signal``; ``ValueError`` naming the field otherwise."""
    if isinstance(data, bytes | str):
        if len(data) > MAX_SIGNAL_BODY_BYTES:
            raise ValueError(f"body: larger than {MAX_SIGNAL_BODY_BYTES} bytes")
        try:
            body = json.loads(data or b"{}")
        except ValueError:
            raise ValueError("body: not valid JSON") from None
    else:
        body = data
    if not isinstance(body, Mapping):
        raise ValueError('body: must be a JSON object such as {"active": true} or {"replicas": 2}')
    active = body.get("active")
    replicas = body.get("replicas")
    if active is not None and not isinstance(active, bool):
        raise ValueError(f"active: must be true or false, got {active!r}")
    if replicas is not None:
        if isinstance(replicas, float) and math.isfinite(replicas) and replicas.is_integer():
            replicas = int(replicas)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise ValueError(f"replicas: must be an integer >= 0, got {replicas!r}")
    if active is None and replicas is None:
        raise ValueError('body: needs "active" (bool) or "replicas" (integer >= 0)')
    return Signal(active, replicas)


@dataclass(frozen=True)
class SignalEntry:
    """What this process knows about one scaler's signals."""

    # monotonic time this process first saw the scaler (starts the idle clock after a restart)
    first_seen: float
    # monotonic time of the last activity, if any
    last_activity: float | None = None
    # wall time of the last signal (for status messages), if any
    last_signal_time: datetime | None = None
    # the standing replica request, if any (cleared when idle)
    replicas: int | None = None
    # monotonic time of the last signal of any kind
    last_signal: float | None = None
    # how many signals were recorded
    count: int = 0
    # metadata.uid of the scaler the entry was recorded for; "" = not known (this process's own
    # reconcile recorded it, for the scaler its memory holds)
    uid: str = ""


@dataclass(frozen=True)
class SignalRecommendation:
    # the recommended count
    replicas: int
    # why, in words (condition messages, recentDecisions)
    reason: str
    # True when idle (no activity for idleTimeoutSeconds)
    idle: bool
    # seconds until the idle timeout expires (0 = already idle or no timer)
    idle_in: float


def recommend(entry: SignalEntry, now: float, *, current: int, min_replicas: int,
              idle_timeout: float, activation_replicas: int) -> SignalRecommendation:
    """The signal rule of the module docstring."""
    since = entry.last_activity if entry.last_activity is not None else entry.first_seen
    idle_for = max(0.0, now - since)
    if idle_for >= idle_timeout:
        why = ("no activity signal" if entry.last_activity is None else "no activity")
        return SignalRecommendation(min_replicas, f"idle: {why} for {idle_for:.0f}s "
                                    f"(idleTimeoutSeconds {idle_timeout:g}); scaling to minReplicas",
                                    True, 0.0)
    left = idle_timeout - idle_for
    if entry.replicas is not None:
        return SignalRecommendation(entry.replicas, f"signal requested {entry.replicas} replicas", False,
                                    left)
    if entry.last_activity is None:
        return SignalRecommendation(current, "no signal received yet; holding the current count", False, left)
    if current == 0:
        return SignalRecommendation(activation_replicas, "activity signal while at zero: activating to "
                                    f"activationReplicas {activation_replicas}", False, left)
    return SignalRecommendation(current, f"active (last activity {idle_for:.0f}s ago)", False, left)


class SignalStore:
    """Thread-safe per-scaler signal state; written by the push API and the puller."""

    def __init__(self) -> None:
        # guards _entries
        self._mu = threading.Lock()
        # scaler → its entry; removed when the scaler is deleted
        self._entries: dict[Request, SignalEntry] = {}

    def seen(self, scaler: Request, now: float) -> SignalEntry:
        """The entry of ``scaler``, created (idle clock starting ``now``) on first use."""
        with self._mu:
            entry = self._entries.get(scaler)
            if entry is None:
                entry = self._entries[scaler] = SignalEntry(first_seen=now)
            return entry

    def record(self, scaler: Request, signal: Signal, now: float, wall: datetime,
               uid: str = "") -> SignalEntry:
        """Apply one signal (for the scaler object ``uid``, when known); returns the new entry. A signal
        for another object than the entry's (the scaler was deleted and recreated) starts afresh."""
        with self._mu:
            entry = self._entries.get(scaler)
            if entry is None or (uid and entry.uid and entry.uid != uid):
                entry = SignalEntry(first_seen=now)
            if uid:
                entry = replace(entry, uid=uid)
            entry = replace(entry, last_signal=now, last_signal_time=wall, count=entry.count + 1)
            if signal.replicas is not None:
                entry = replace(entry, replicas=signal.replicas)
            if signal.is_activity:
                entry = replace(entry, last_activity=now)
            self._entries[scaler] = entry
            return entry

    def expire(self, scaler: Request) -> None:
        """Drop a standing replica request (the scaler went idle)."""
        with self._mu:
            entry = self._entries.get(scaler)
            if entry is not None and entry.replicas is not None:
                self._entries[scaler] = replace(entry, replicas=None)

    def forget(self, scaler: Request) -> None:
        with self._mu:
            self._entries.pop(scaler, None)

    def forget_stale(self, scaler: Request, uid: str, previous_uid: str) -> None:
        """Drop the entry of ``scaler`` unless it belongs to the object ``uid``: an entry recorded for
        another uid, or one recorded without a uid while ``previous_uid`` was the scaler, is stale."""
        with self._mu:
            entry = self._entries.get(scaler)
            if entry is not None and (entry.uid or previous_uid) != uid:
                del self._entries[scaler]

    def get(self, scaler: Request) -> SignalEntry | None:
        with self._mu:
            return self._entries.get(scaler)


# ------------------------------------------------------------------ the push API


SIGNAL_ROUTE = "/signal/v1/namespaces/{namespace}/elasticscalers/{name}"


class SignalAPI:
    """``POST /signal/v1/namespaces/{ns}/elasticscalers/{name}``: record a signal, enqueue the scaler.

    Answers ``202`` with ``{"accepted": true, "scaler": "ns/name", "signal": {...}, "signals": n}``;
    ``404`` when no such ElasticScaler is in the cache; ``409`` when it is not a SignalTrigger
    scaler; ``400`` for a body that is not ``{"active": bool}`` / ``{"replicas": n}``.
    Authentication (TokenReview) and authorization (``update`` on ``elasticscalers/signal``) are
    the API server's, before this runs.
    """

    def __init__(self, store: SignalStore, get_scaler: Callable[[Request], Mapping[str, Any] | None],
                 enqueue: Callable[[Request], None], clock: Clock) -> None:
        # shared with the reconciler; fixed
        self._store = store
        # reads the scaler from the informer cache
        self._get = get_scaler
        # the controller queue's add
        self._enqueue = enqueue
        self._clock = clock

    def handle(self, request: ApiRequest) -> ApiResponse:
        req = Request(request.params["namespace"], request.params["name"])
        obj = self._get(req)
        if obj is None:
            raise ApiError(404, f"elasticscalers.elasticscaler.io {req.namespace}/{req.name} not found")
        spec = obj.get("spec")
        trigger = spec.get("trigger") if isinstance(spec, Mapping) else None
        kind = trigger.get("type") if isinstance(trigger, Mapping) else None
        if kind != "SignalTrigger":
            raise ApiError(409, f"ElasticScaler {req.namespace}/{req.name} has trigger.type {kind}, not "
                                "SignalTrigger: it does not take signals")
        try:
            signal = parse_signal_body(request.body if request.body is not None else b"")
        except ValueError as err:
            raise ApiError(400, str(err)) from None
        meta = obj.get("metadata")
        uid = str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""
        entry = self._store.record(req, signal, self._clock.monotonic(), self._clock.now(), uid=uid)
        self._enqueue(req)
        body: dict[str, Any] = {"accepted": True, "scaler": f"{req.namespace}/{req.name}",
                                "signal": {k: v for k, v in (("active", signal.active),
                                                             ("replicas", signal.replicas)) if v is not None},
                                "signals": entry.count}
        return ApiResponse(202, body)
