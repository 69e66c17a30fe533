"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's ``leaderelection``).

The Python client ships no lock, so this module is a port of client-go's ``LeaderElector`` over
a ``LeaseLock`` written here. The contract, and the reasoning it rests on:

* **Optimistic concurrency.** Every write is an update carrying the ``resourceVersion`` last read
  or written; a 409 Conflict means another candidate wrote first, and the attempt simply failed.
* **Expiry is judged on our own monotonic clock, never on the remote timestamps.** A candidate
  records *when it last saw the lease record change* (``observed_time``, monotonic); the lease is
  considered live until ``observed_time + leaseDurationSeconds``. Two replicas' wall clocks may
  disagree arbitrarily and nothing breaks. ``renewTime``/``acquireTime`` are written (MicroTime,
  RFC 3339 with 6 fraction digits) for humans and other implementations only.
* **Acquire**: try every ``retry_period`` jittered by up to ``JITTER_FACTOR`` (1.2) * the period
  (sliding: the wait starts after an attempt). An empty ``holderIdentity`` (a released lease) or
  an expired lease may be taken; ``leaseTransitions`` is incremented when the holder changes.
* **Renew**: once leading, renew every ``retry_period`` (the first renewal one period after
  acquiring; client-go's immediate one is a redundant write). A renewal round retries every
  ``retry_period`` until it succeeds; if ``renew_deadline`` passes without success, leadership is
  **lost**: ``on_stopped_leading`` runs and ``run`` returns. Because
  ``lease_duration > renew_deadline``, a leader gives up before any standby can consider its lease
  expired, so two leaders never write at once — given bounded request latency, which is why
  ``KubeLeaseClient`` puts a timeout on every call. ``leaseDurationSeconds`` is whole seconds:
  a fractional ``lease_duration`` is rounded up when written.
  Deliberately stricter than client-go: a renewal that finds the lease held by *another* live
  holder is lost at once instead of retrying until the deadline.
* **Release**: on cancel (``stop`` set) with ``release_on_cancel``, a leader writes
  ``holderIdentity: ""`` and ``leaseDurationSeconds: 1`` so a standby takes over at its next
  attempt rather than after a full lease duration. The caller must have stopped every writer
  *before* cancelling (the manager does).
* **Validation** (client-go's ``NewLeaderElector``): every duration > 0,
  ``lease_duration > renew_deadline``, ``renew_deadline > JITTER_FACTOR * retry_period``, and a
  non-empty identity; violations raise ``ValueError`` naming the field and the rule.

Callbacks run on the elector's thread and must return promptly. Unlike client-go,
``on_stopped_leading`` runs only if this candidate actually led.
"""

from __future__ import annotations

import copy
import enum
import logging
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from escaler.clock import Clock, RealClock
from escaler.errors import StatusError, is_not_found
from escaler.kube.discovery import ResourceMapping
from escaler.kube.dynamic import DynamicClient, resource_path
from escaler.kube.rest import RestClient

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "DEFAULT_RENEW_DEADLINE",
    "DEFAULT_RETRY_PERIOD",
    "JITTER_FACTOR",
    "InMemoryLeaseClient",
    "KubeLeaseClient",
    "LeaderElectionConfig",
    "LeaderElectionRecord",
    "LeaderElector",
    "LeaseClient",
    "LeaseLock",
    "format_micro_time",
    "parse_micro_time",
]

# SPEC §11 and client-go's defaults.
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
# client-go's leaderelection.JitterFactor: acquire attempts wait retry_period * [1, 2.2).
JITTER_FACTOR = 1.2
# What a release writes as leaseDurationSeconds (client-go's release()).
RELEASED_LEASE_DURATION_SECONDS = 1

LEASE_API_VERSION = "coordination.k8s.io/v1"
# Fixed: Leases need no discovery round trip (and must work while discovery is failing).
LEASE_MAPPING = ResourceMapping("coordination.k8s.io", "v1", "leases", "Lease", True, frozenset())

_log = logging.getLogger(__name__)


def format_micro_time(when: datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 in UTC with exactly 6 fraction digits."""
    if when.tzinfo is None:
        raise ValueError("format_micro_time: datetime must be timezone-aware")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: object) -> datetime | None:
    """Parse a MicroTime/Time string; ``None`` for absent or malformed values (they are informative only)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LeaderElectionRecord:
    """The election state kept in a Lease's spec (client-go's ``LeaderElectionRecord``)."""

    # who holds the lease; "" when released or never held
    holder_identity: str = ""
    # how long, from when a candidate observes this record, the holder's claim stays live
    lease_duration_seconds: int = 0
    # when the current holder acquired the lease (informative)
    acquire_time: datetime | None = None
    # when the holder last renewed (informative: expiry uses the observer's monotonic clock)
    renew_time: datetime | None = None
    # how many times the holder changed
    leader_transitions: int = 0

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.leader_transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = format_micro_time(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_micro_time(self.renew_time)
        return spec

    @classmethod
    def from_spec(cls, spec: object) -> LeaderElectionRecord:
        s = spec if isinstance(spec, dict) else {}
        duration = s.get("leaseDurationSeconds")
        transitions = s.get("leaseTransitions")
        return cls(
            holder_identity=str(s.get("holderIdentity") or ""),
            lease_duration_seconds=int(duration) if isinstance(duration, int | float) else 0,
            acquire_time=parse_micro_time(s.get("acquireTime")),
            renew_time=parse_micro_time(s.get("renewTime")),
            leader_transitions=int(transitions) if isinstance(transitions, int | float) else 0,
        )


class LeaseClient(Protocol):
    """The three Lease calls the lock needs. Errors are ``StatusError`` (404, 409, ...)."""

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Lease, or ``None`` when it does not exist."""
        ...

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create; 409 AlreadyExists if another candidate created it first."""
        ...

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace, conditional on ``metadata.resourceVersion``; 409 Conflict when it is stale."""
        ...


class LeaseLock:
    """A resource lock on one Lease (client-go's ``resourcelock.LeaseLock``). Not thread-safe:
    owned by one ``LeaderElector``."""

    def __init__(self, client: LeaseClient, namespace: str, name: str) -> None:
        if not namespace:
            raise ValueError("LeaseLock.namespace: must not be empty")
        if not name:
            raise ValueError("LeaseLock.name: must not be empty")
        # the API access; never None
        self._client = client
        # the Lease's coordinates; fixed
        self.namespace = namespace
        self.name = name
        # the Lease as last read or written (its resourceVersion guards our next update);
        # None until the first successful get/create
        self._lease: dict[str, Any] | None = None

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    def get(self) -> LeaderElectionRecord | None:
        """Read the record; ``None`` when the Lease does not exist."""
        lease = self._client.get(self.namespace, self.name)
        if lease is None:
            return None
        self._lease = copy.deepcopy(lease)
        return LeaderElectionRecord.from_spec(lease.get("spec"))

    def create(self, record: LeaderElectionRecord) -> None:
        obj = {
            "apiVersion": LEASE_API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.to_spec(),
        }
        self._lease = copy.deepcopy(self._client.create(obj))

    def update(self, record: LeaderElectionRecord) -> None:
        """Write ``record`` over the Lease last seen; 409 if it changed since."""
        if self._lease is None:
            raise RuntimeError("LeaseLock.update: lease not initialised, call get or create first")
        obj = copy.deepcopy(self._lease)
        obj["spec"] = {**(obj.get("spec") or {}), **record.to_spec()}
        self._lease = copy.deepcopy(self._client.update(obj))


class KubeLeaseClient:
    """``LeaseClient`` over the API server.

    Every request is bounded by ``timeout`` seconds (connect and each read): an attempt that
    hangs must not outlive the renew deadline, or a leader could keep believing it leads after a
    standby took over. The manager passes ``renew_deadline / 2``, as controller-runtime does.
    """

    def __init__(self, client: DynamicClient | RestClient, *, timeout: float) -> None:
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"KubeLeaseClient.timeout: must be > 0, got {timeout}")
        # the manager's REST client (a DynamicClient's); fixed
        self._rest: RestClient = client.rest if isinstance(client, DynamicClient) else client
        # (connect, read) timeout of every call; fixed
        self._timeout = (timeout, timeout)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._rest.request("GET", resource_path(LEASE_MAPPING, namespace, name),
                                      timeout=self._timeout)
        except StatusError as exc:
            if is_not_found(exc):
                return None
            raise

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        ns = str((obj.get("metadata") or {}).get("namespace") or "")
        return self._rest.request("POST", resource_path(LEASE_MAPPING, ns), body=obj, timeout=self._timeout)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        md = obj.get("metadata") or {}
        path = resource_path(LEASE_MAPPING, str(md.get("namespace") or ""), str(md.get("name") or ""))
        return self._rest.request("PUT", path, body=obj, timeout=self._timeout)


class InMemoryLeaseClient:
    """A thread-safe in-process Lease store with real resourceVersion semantics (for tests and
    the simulator). Several electors sharing one instance behave like replicas sharing a cluster."""

    def __init__(self) -> None:
        # guards _objects and _rv
        self._mu = threading.Lock()
        # (namespace, name) → stored Lease (deep copies in and out)
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}
        # last resourceVersion handed out; strictly increasing
        self._rv = 0

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._mu:
            obj = self._objects.get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._mu:
            if key in self._objects:
                raise StatusError(409, "AlreadyExists", f'leases "{key[1]}" already exists')
            stored = copy.deepcopy(obj)
            stored["metadata"] = {**meta, "resourceVersion": self._next_rv()}
            self._objects[key] = stored
            return copy.deepcopy(stored)

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._mu:
            current = self._objects.get(key)
            if current is None:
                raise StatusError(404, "NotFound", f'leases "{key[1]}" not found')
            if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise StatusError(
                    409, "Conflict",
                    f'Operation cannot be fulfilled on leases "{key[1]}": the object has been modified',
                )
            stored = copy.deepcopy(obj)
            stored["metadata"] = {**meta, "resourceVersion": self._next_rv()}
            self._objects[key] = stored
            return copy.deepcopy(stored)


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Timings and identity for one election; validated like client-go's ``NewLeaderElector``."""

    # the Lease's name and namespace
    name: str
    namespace: str
    # this candidate's unique identity (hostname_uuid by convention)
    identity: str
    # how long a standby waits, from observing a record change, before taking the lease over
    lease_duration: float = DEFAULT_LEASE_DURATION
    # how long the leader keeps retrying a renewal before giving up leadership
    renew_deadline: float = DEFAULT_RENEW_DEADLINE
    # the wait between attempts (jittered when acquiring)
    retry_period: float = DEFAULT_RETRY_PERIOD
    # release the lease when stopped while leading, so a standby takes over at once
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        for field_name in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, field_name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"LeaderElectionConfig.{field_name}: must be > 0, got {value}")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                "LeaderElectionConfig.lease_duration: must be greater than renew_deadline "
                f"(lease_duration > renew_deadline), got {self.lease_duration} <= {self.renew_deadline}"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(
                "LeaderElectionConfig.renew_deadline: must be greater than "
                f"{JITTER_FACTOR} * retry_period (renew_deadline > JitterFactor * retry_period), "
                f"got {self.renew_deadline} <= {JITTER_FACTOR * self.retry_period:g}"
            )
        if not self.identity:
            raise ValueError("LeaderElectionConfig.identity: must not be empty")
        if not self.name:
            raise ValueError("LeaderElectionConfig.name: must not be empty")
        if not self.namespace:
            raise ValueError("LeaderElectionConfig.namespace: must not be empty")

    @property
    def lease_duration_seconds(self) -> int:
        # The Lease field is whole seconds; round up so we never advertise less than configured.
        return max(1, math.ceil(self.lease_duration))


class _Attempt(enum.Enum):
    ACQUIRED = "acquired"  # we hold the lease now (acquired or renewed)
    FAILED = "failed"  # API error or lost race: inconclusive, try again
    HELD = "held"  # another holder's claim is live by our observation


class LeaderElector:
    """Runs one candidate's election loop; see the module docstring."""

    def __init__(
        self,
        config: LeaderElectionConfig,
        lock: LeaseLock,
        *,
        clock: Clock | None = None,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        on_new_leader: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        if (lock.namespace, lock.name) != (config.namespace, config.name):
            raise ValueError(
                f"LeaderElector.lock: lease {lock.describe()} does not match the config's "
                f"{config.namespace}/{config.name}"
            )
        # immutable configuration and collaborators
        self.config = config
        self._lock = lock
        self._clock: Clock = clock or RealClock()
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        # jitter source; only the elector thread draws from it
        self._rng = rng or random.Random()
        self._log = log or _log
        # guards the observed state below (read by is_leader/get_leader from other threads)
        self._mu = threading.Lock()
        # the lease record as last read or written by us; None before the first observation
        self._observed_record: LeaderElectionRecord | None = None
        # monotonic time at which _observed_record last changed; expiry is measured from it
        self._observed_time = 0.0
        # True from acquiring until losing/releasing the lease; the public is_leader()
        self._leading = False
        # the holder last reported to on_new_leader (so each change is reported once)
        self._reported_leader = ""
        # run() may be called once
        self._ran = False
        # cleared by disable_release(): then a stopped leader leaves the lease to expire
        self._release_on_cancel = config.release_on_cancel

    # ----------------------------------------------------------------- observation

    def is_leader(self) -> bool:
        """True while this candidate holds the lease (between acquire and loss/release)."""
        with self._mu:
            return self._leading

    def disable_release(self) -> None:
        """Do not release the lease on stop (call before setting ``stop``): for a caller whose
        writers may still be running, so a standby must wait for the lease to expire."""
        with self._mu:
            self._release_on_cancel = False

    def get_leader(self) -> str:
        """The holder identity last observed ("" when unknown or released)."""
        with self._mu:
            return self._observed_record.holder_identity if self._observed_record else ""

    def _set_observed(self, record: LeaderElectionRecord) -> None:
        with self._mu:
            self._observed_record = record
            self._observed_time = self._clock.monotonic()

    def _holds_observed(self) -> bool:
        with self._mu:
            rec = self._observed_record
            return rec is not None and rec.holder_identity == self.config.identity

    def _lease_valid(self, now: float) -> bool:
        with self._mu:
            rec = self._observed_record
            if rec is None:
                return False
            return self._observed_time + rec.lease_duration_seconds > now

    # ----------------------------------------------------------------- the loop

    def run(self, stop: threading.Event) -> None:
        """Acquire, then renew until ``stop`` is set or leadership is lost. Returns in both cases."""
        if self._ran:
            raise RuntimeError("LeaderElector.run: may be called only once")
        self._ran = True
        if not self._acquire(stop):
            return
        with self._mu:
            self._leading = True
        self._call("on_started_leading", self._on_started)
        self._renew(stop)
        with self._mu:
            release = self._release_on_cancel
        if stop.is_set() and release:
            self._release()
        with self._mu:
            self._leading = False
        self._call("on_stopped_leading", self._on_stopped)

    def _acquire(self, stop: threading.Event) -> bool:
        desc = self._lock.describe()
        self._log.info("attempting to acquire leader lease %s", desc)
        while not stop.is_set():
            attempt = self._try_acquire_or_renew()
            self._maybe_report_transition()
            if attempt is _Attempt.ACQUIRED:
                self._log.info("successfully acquired lease %s as %s", desc, self.config.identity)
                return True
            period = self.config.retry_period * (1.0 + self._rng.random() * JITTER_FACTOR)
            if self._clock.sleep(min(period, self._until_expiry()), stop):
                return False
        return False

    def _until_expiry(self) -> float:
        """Seconds until the observed lease expires by our clock (inf when there is none to wait for).

        A standby wakes exactly then instead of at its next jittered retry, so a dead leader is
        replaced ``leaseDuration`` after we last saw it renew, not up to 2.2 retry periods later.
        """
        with self._mu:
            rec = self._observed_record
            if rec is None or not rec.holder_identity or rec.holder_identity == self.config.identity:
                return math.inf
            left = self._observed_time + rec.lease_duration_seconds - self._clock.monotonic()
        return max(0.0, left)

    def _renew(self, stop: threading.Event) -> None:
        """Return on stop (still leader) or on loss (after logging it)."""
        cfg = self.config
        # The lease was written just now: the first renewal is due one retry_period later
        # (client-go renews at once, a redundant write).
        while not self._clock.sleep(cfg.retry_period, stop):
            deadline = self._clock.monotonic() + cfg.renew_deadline
            while True:
                attempt = self._try_acquire_or_renew()
                self._maybe_report_transition()
                if attempt is _Attempt.ACQUIRED:
                    break
                if attempt is _Attempt.HELD:
                    self._log.error("leader lease %s was taken by %s: leadership lost",
                                    self._lock.describe(), self.get_leader())
                    return
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0 or self._clock.sleep(min(cfg.retry_period, remaining), stop):
                    if not stop.is_set():
                        self._log.error("failed to renew leader lease %s within %gs: leadership lost",
                                        self._lock.describe(), cfg.renew_deadline)
                    return
                if self._clock.monotonic() >= deadline:
                    self._log.error("failed to renew leader lease %s within %gs: leadership lost",
                                    self._lock.describe(), cfg.renew_deadline)
                    return

    def _try_acquire_or_renew(self) -> _Attempt:
        try:
            return self._try_acquire_or_renew_unsafe()
        except Exception as exc:  # API errors, connection failures: the attempt failed
            self._log.warning("leader election attempt on %s failed: %s", self._lock.describe(), exc)
            return _Attempt.FAILED

    def _try_acquire_or_renew_unsafe(self) -> _Attempt:
        cfg = self.config
        now_wall = self._clock.now()
        record = LeaderElectionRecord(
            holder_identity=cfg.identity,
            lease_duration_seconds=cfg.lease_duration_seconds,
            acquire_time=now_wall,
            renew_time=now_wall,
        )
        # 1. Fast path: the leader updates optimistically over the record it wrote last.
        if self._holds_observed() and self._lease_valid(self._clock.monotonic()):
            with self._mu:
                assert self._observed_record is not None
                old = self._observed_record
            fast = LeaderElectionRecord(
                cfg.identity, cfg.lease_duration_seconds, old.acquire_time, now_wall, old.leader_transitions,
            )
            try:
                self._lock.update(fast)
                self._set_observed(fast)
                return _Attempt.ACQUIRED
            except Exception as exc:
                self._log.info("optimistic renewal of %s failed (%s); falling back to a read",
                               self._lock.describe(), exc)

        # 2. Read the record, or create the Lease if it does not exist.
        try:
            current = self._lock.get()
        except StatusError as exc:
            if not is_not_found(exc):
                raise
            current = None
        if current is None:
            self._lock.create(record)
            self._set_observed(record)
            return _Attempt.ACQUIRED

        # 3. Note when the record changed: expiry counts from our observation of the change.
        with self._mu:
            changed = self._observed_record != current
        if changed:
            self._set_observed(current)
        if (current.holder_identity and current.holder_identity != cfg.identity
                and self._lease_valid(self._clock.monotonic())):
            return _Attempt.HELD

        # 4. Free, expired, or ours: write our claim.
        if current.holder_identity == cfg.identity:
            record = LeaderElectionRecord(
                cfg.identity, cfg.lease_duration_seconds, current.acquire_time, now_wall,
                current.leader_transitions,
            )
        else:
            record = LeaderElectionRecord(
                cfg.identity, cfg.lease_duration_seconds, now_wall, now_wall, current.leader_transitions + 1,
            )
        self._lock.update(record)  # 409 → another candidate won the race: attempt failed
        self._set_observed(record)
        return _Attempt.ACQUIRED

    def _release(self) -> None:
        if not self._holds_observed():
            return
        now_wall = self._clock.now()
        with self._mu:
            transitions = self._observed_record.leader_transitions if self._observed_record else 0
        record = LeaderElectionRecord(
            holder_identity="",
            lease_duration_seconds=RELEASED_LEASE_DURATION_SECONDS,
            acquire_time=now_wall,
            renew_time=now_wall,
            leader_transitions=transitions,
        )
        try:
            self._lock.update(record)
        except Exception as exc:
            self._log.error("failed to release leader lease %s: %s", self._lock.describe(), exc)
            return
        self._set_observed(record)
        self._log.info("released leader lease %s", self._lock.describe())

    def _maybe_report_transition(self) -> None:
        with self._mu:
            holder = self._observed_record.holder_identity if self._observed_record else ""
            if holder == self._reported_leader:
                return
            self._reported_leader = holder
        if holder:
            self._log.info("new leader for lease %s: %s", self._lock.describe(), holder)
        if self._on_new_leader is not None:
            on_new_leader = self._on_new_leader
            self._call("on_new_leader", lambda: on_new_leader(holder))

    def _call(self, what: str, fn: Callable[[], None] | None) -> None:
        if fn is None:
            return
        try:
            fn()
        except Exception:
            self._log.exception("leader election callback %s failed", what)
