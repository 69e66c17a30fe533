"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's ``leaderelection``).

The Python client ships no lock, so this module is a port of client-go's ``LeaderElector`` over
the ``LeaseLock`` of ``escaler.runtime.leaselock`` (split as client-go splits ``resourcelock``).
The contract, and the reasoning it rests on:

* **Optimistic concurrency.** Every write is an update carrying the ``resourceVersion`` last read
  or written; a 409 Conflict means another candidate wrote first, and the attempt simply failed.
* **Expiry is judged on our own monotonic clock, never on the remote timestamps.** A candidate
  records *when it last saw the lease record change* (``observed_time``, monotonic); the lease is
  considered live until ``observed_time + leaseDurationSeconds``. Two replicas' wall clocks may
  disagree arbitrarily and nothing breaks. ``renewTime``/``acquireTime`` are written (MicroTime,
  RFC 3339 with 6 fraction digits) for humans and other implementations only.
* **Acquire**: try every ``retry_period`` jittered by up to ``JITTER_FACTOR`` (1.2) * the period
  (sliding: the wait starts after an attempt), and at the instant the observed claim expires.
  With a ``watcher`` (``escaler.runtime.leasewatch``; the manager always passes one) the
  candidate also watches the Lease while it waits, so each renewal is observed as it is written
  rather than up to a jittered period late: a dead leader is replaced ``lease_duration`` after
  its last renewal. The watch only moves ``observed_time`` forward to the arrival of a changed
  record (never earlier than a read would), runs on its own thread only while acquiring, and is
  stopped before leading. An empty ``holderIdentity`` (a released lease) or
  an expired lease may be taken; ``leaseTransitions`` is incremented when the holder changes.
* **Renew**: once leading, renew every ``retry_period`` (the first renewal one period after
  acquiring; client-go's immediate one is a redundant write). A renewal round retries every
  ``retry_period`` until it succeeds.
* **The deadline is the fence.** Every successful lease write (create, acquire, renew) was sent
  at a monotonic instant read just *before* sending; ``valid_until = that send time +
  renew_deadline`` is handed to the ``WriteFence`` (``fence.grant``), which refuses every write
  from then on unless a later renewal extends it. The renewal loop's deadline is the same
  instant (stricter than client-go, whose deadline counts from the start of a renewal round, one
  ``retry_period`` later): leadership is **lost** when ``valid_until`` passes without a
  renewal — ``on_stopped_leading`` runs and ``run`` returns. A whole attempt is bounded by it:
  an attempt is not started with no time left, and each Lease call gets ``timeout = time left``
  (the client caps it further by its own per-call timeout, with no transport retries), so no
  call outlives the deadline. A renewal whose answer arrives after the deadline (the process
  froze meanwhile) is a loss too: the fence is latched closed and is not revived. Because
  ``lease_duration > renew_deadline`` and a standby counts ``lease_duration`` from when it
  *observed* the record (after we sent it), the fence closes before any standby can take over,
  even if this process froze — see ``escaler.runtime.fence``.
  ``leaseDurationSeconds`` is whole seconds: a fractional ``lease_duration`` is rounded up.
  Deliberately stricter than client-go: a renewal that finds the lease held by *another* live
  holder is lost at once instead of retrying until the deadline.
* **Release**: on cancel (``stop`` set) with ``release_on_cancel``, a leader writes
  ``holderIdentity: ""`` and ``leaseDurationSeconds: 1`` so a standby takes over at its next
  attempt rather than after a full lease duration. The caller must have stopped every writer
  *before* cancelling (the manager does).
* **Validation** (client-go's ``NewLeaderElector``): every duration > 0,
  ``lease_duration > renew_deadline``, ``renew_deadline > JITTER_FACTOR * retry_period``, and a
  non-empty identity; violations raise ``ValueError`` naming the field and the rule.

* **Standby** (``config.standby``, used by sharding for a shard this replica does not prefer): the
  candidate claims the Lease only once the record it observed (or the Lease's absence) has stayed
  unchanged for a full ``lease_duration`` by its own clock — a released (``holderIdentity: ""``)
  or missing Lease is not taken at once, so the replica that prefers the shard wins it whenever
  it is alive. Renewing a Lease it already holds is unaffected.

Callbacks run on the elector's thread and must return promptly. Unlike client-go,
``on_stopped_leading`` runs only if this candidate actually led.
"""

from __future__ import annotations

import enum
import logging
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from escaler.clock import Clock, RealClock
from escaler.errors import StatusError, is_not_found
from escaler.runtime.fence import WriteFence
from escaler.runtime.leaselock import LeaderElectionRecord, LeaseLock
from escaler.runtime.leasewatch import LeaseWatcher

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "DEFAULT_RENEW_DEADLINE",
    "DEFAULT_RETRY_PERIOD",
    "JITTER_FACTOR",
    "LeaderElectionConfig",
    "LeaderElector",
]

# docs/operations.md and client-go's defaults.
DEFAULT_LEASE_DURATION = 15.0
DEFAULT_RENEW_DEADLINE = 10.0
DEFAULT_RETRY_PERIOD = 2.0
# client-go's leaderelection.JitterFactor: acquire attempts wait retry_period * [1, 2.2).
JITTER_FACTOR = 1.2
# What a release writes as leaseDurationSeconds (client-go's release()).
RELEASED_LEASE_DURATION_SECONDS = 1

# What a standby observes while the Lease does not exist (an impossible real record).
_ABSENT = LeaderElectionRecord(holder_identity="", lease_duration_seconds=-1)

_log = logging.getLogger(__name__)


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
    # a standby claims a free, released or missing Lease only after observing it unchanged for
    # lease_duration (sharding: a shard this replica does not prefer); see the module docstring
    standby: bool = False

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


class _OutOfTime(Exception):
    """The renew deadline passed before the next Lease call could start."""


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
        fence: WriteFence | None = None,
        watcher: LeaseWatcher | None = None,
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
        # the manager's write fence, granted on every successful lease write (None: no fence)
        self._fence = fence
        # watches the Lease while acquiring (None: reads only); see _watching
        self._watcher = watcher
        if watcher is not None and (watcher.namespace, watcher.name) != (config.namespace, config.name):
            raise ValueError(
                f"LeaderElector.watcher: lease {watcher.namespace}/{watcher.name} does not match the "
                f"config's {config.namespace}/{config.name}"
            )
        # True while the watcher's records may update the observation (cleared before leading)
        self._watch_open = False
        # send time of our last successful lease write + renew_deadline (monotonic); -inf before
        # the first; the renewal deadline. Read and written by the elector thread only.
        self._valid_until = -math.inf

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
        if self._fence is not None:  # no write after this, whichever way leading ended
            self._fence.close("stopped" if stop.is_set() else "leader lease lost")
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
        watch_stop = self._start_watch()
        try:
            return self._acquire_loop(stop, desc)
        finally:
            self._stop_watch(watch_stop)

    def _acquire_loop(self, stop: threading.Event, desc: str) -> bool:
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

    def _start_watch(self) -> threading.Event | None:
        if self._watcher is None:
            return None
        watch_stop = threading.Event()
        with self._mu:
            self._watch_open = True
        watcher = self._watcher
        threading.Thread(target=watcher.run, args=(watch_stop, self._observe_watched), daemon=True,
                         name=f"lease-watch-{self.config.name}").start()
        return watch_stop

    def _stop_watch(self, watch_stop: threading.Event | None) -> None:
        if watch_stop is None or self._watcher is None:
            return
        with self._mu:
            self._watch_open = False  # from now on a late event cannot touch the observation
        watch_stop.set()
        self._watcher.close()

    def _observe_watched(self, record: LeaderElectionRecord) -> None:
        """A record the watch delivered: a change is observed now (the watcher's thread)."""
        with self._mu:
            if not self._watch_open or record == self._observed_record:
                return
            self._observed_record = record
            self._observed_time = self._clock.monotonic()

    def _until_expiry(self) -> float:
        """Seconds until the observed lease expires by our clock (inf when there is none to wait for).

        A standby wakes exactly then instead of at its next jittered retry, so a dead leader is
        replaced ``leaseDuration`` after we last saw it renew, not up to 2.2 retry periods later.
        """
        with self._mu:
            rec = self._observed_record
            if rec is None or rec.holder_identity == self.config.identity:
                return math.inf
            if self.config.standby:
                left = self._observed_time + self._standby_wait(rec) - self._clock.monotonic()
            elif not rec.holder_identity:
                return math.inf
            else:
                left = self._observed_time + rec.lease_duration_seconds - self._clock.monotonic()
        return max(0.0, left)

    def _standby_wait(self, rec: LeaderElectionRecord) -> float:
        return max(float(rec.lease_duration_seconds), self.config.lease_duration)

    def _standby_patient(self, now: float) -> bool:
        """A standby must keep waiting: the observed record (or absence) is younger than its wait."""
        if not self.config.standby:
            return False
        with self._mu:
            rec = self._observed_record
            if rec is None:
                return True
            if rec.holder_identity == self.config.identity:
                return False
            return self._observed_time + self._standby_wait(rec) > now

    def _renew(self, stop: threading.Event) -> None:
        """Return on stop (still leader) or on loss (after logging it)."""
        # The lease was written just now: the first renewal is due one retry_period later
        # (client-go renews at once, a redundant write).
        while not self._clock.sleep(self.config.retry_period, stop):
            if not self._renew_round(stop):
                return

    def _renew_round(self, stop: threading.Event) -> bool:
        """Retry until renewed (True) or until ``_valid_until`` passes / stop / loss (False)."""
        cfg = self.config
        while True:
            deadline = self._valid_until
            if self._clock.monotonic() >= deadline:
                self._log.error("failed to renew leader lease %s within %gs of the last renewal: "
                                "leadership lost", self._lock.describe(), cfg.renew_deadline)
                return False
            attempt = self._try_acquire_or_renew(deadline)
            self._maybe_report_transition()
            if attempt is _Attempt.ACQUIRED:
                if self._valid_until > deadline:
                    return True
                self._log.error("leader lease %s renewed only after the renew deadline (was this "
                                "process frozen?): leadership lost", self._lock.describe())
                return False
            if attempt is _Attempt.HELD:
                self._log.error("leader lease %s was taken by %s: leadership lost",
                                self._lock.describe(), self.get_leader())
                return False
            remaining = deadline - self._clock.monotonic()
            if remaining > 0 and self._clock.sleep(min(cfg.retry_period, remaining), stop):
                return False

    def _try_acquire_or_renew(self, deadline: float | None = None) -> _Attempt:
        try:
            return self._try_acquire_or_renew_unsafe(deadline)
        except _OutOfTime:
            return _Attempt.FAILED
        except Exception as exc:  # API errors, connection failures: the attempt failed
            self._log.warning("leader election attempt on %s failed: %s", self._lock.describe(), exc)
            return _Attempt.FAILED

    def _budget(self, deadline: float | None) -> float | None:
        """The time left for the next Lease call (None: no deadline); _OutOfTime when none is."""
        if deadline is None:
            return None
        left = deadline - self._clock.monotonic()
        if left <= 0:
            raise _OutOfTime()
        return left

    def _wrote(self, sent: float, record: LeaderElectionRecord) -> _Attempt:
        """A lease write sent at ``sent`` succeeded: observe it and extend the deadline and fence.

        Nothing is extended if, while leading, the answer came back after the deadline (the
        process froze meanwhile, or the fence refuses the grant): the renewal loop reports that
        as a loss — a writer may have found the fence closed, and it stays closed.
        """
        self._set_observed(record)
        until = sent + self.config.renew_deadline
        lapsed = self._is_leading() and self._clock.monotonic() >= self._valid_until
        refused = self._fence is not None and not self._fence.grant(until)
        if not lapsed and not refused:
            self._valid_until = max(self._valid_until, until)
        return _Attempt.ACQUIRED

    def _is_leading(self) -> bool:
        with self._mu:
            return self._leading

    def _try_acquire_or_renew_unsafe(self, deadline: float | None) -> _Attempt:
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
            budget = self._budget(deadline)
            sent = self._clock.monotonic()
            try:
                self._lock.update(fast, timeout=budget)
                return self._wrote(sent, fast)
            except Exception as exc:
                self._log.info("optimistic renewal of %s failed (%s); falling back to a read",
                               self._lock.describe(), exc)

        # 2. Read the record, or create the Lease if it does not exist.
        try:
            current = self._lock.get(timeout=self._budget(deadline))
        except StatusError as exc:
            if not is_not_found(exc):
                raise
            current = None
        if current is None:
            if self.config.standby:
                with self._mu:
                    absent = self._observed_record == _ABSENT
                if not absent:
                    self._set_observed(_ABSENT)  # the absence is observed now; wait from here
                if self._standby_patient(self._clock.monotonic()):
                    return _Attempt.HELD
            budget = self._budget(deadline)
            sent = self._clock.monotonic()
            self._lock.create(record, timeout=budget)
            return self._wrote(sent, record)

        # 3. Note when the record changed: expiry counts from our observation of the change.
        with self._mu:
            changed = self._observed_record != current
        if changed:
            self._set_observed(current)
        if (current.holder_identity and current.holder_identity != cfg.identity
                and self._lease_valid(self._clock.monotonic())):
            return _Attempt.HELD
        if self._standby_patient(self._clock.monotonic()):
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
        budget = self._budget(deadline)
        sent = self._clock.monotonic()
        self._lock.update(record, timeout=budget)  # 409 → another candidate won the race: attempt failed
        return self._wrote(sent, record)

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
