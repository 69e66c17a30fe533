"""The write fence: may this process write to the cluster *right now*?

A leader-elected manager must never write after a standby could have taken its lease over — not
even for the few milliseconds after a frozen process (SIGSTOP, a long GC pause, CPU throttling, a
paused VM) wakes up and before its elector notices. Checking an event that the elector clears is
not enough: the thread that would clear it is frozen too. So permission is *time-based*:

* ``valid_until`` is ``send time of the last successful lease write + renew_deadline``, in the
  process's monotonic clock. The send time is read *before* the request goes out, so it is
  earlier than the moment the API server stored the record, which is no later than the moment
  any standby observed it; a standby takes over no earlier than ``observed + lease_duration``, and
  ``lease_duration > renew_deadline`` (validated), so ``valid_until`` falls strictly before any
  takeover, by at least ``lease_duration - renew_deadline`` of margin for clock-rate differences.
  The elector extends it on every successful acquire/renew (``grant``).
* ``allowed()`` is ``opened and not closed and clock.monotonic() < valid_until``, evaluated at the
  call — the REST client's write guard (``guard``) calls it immediately before each
  POST/PUT/PATCH/DELETE goes on the wire, so a thawed process reads the clock, finds the lease
  lapsed, and sends nothing.
* **Latched**: once an open fence is found lapsed, or is ``close``\\ d, it stays closed; a later
  grant (a renewal whose answer arrived late) does not reopen it. A lapse *is* the loss of
  leadership; the elector reports it as such.
* Without leader election (``leased=False``) there is no lease to lapse: the fence is valid
  forever once opened, until ``close`` (shutdown).
* Exempt from the guard (``EXEMPT_PATH_PARTS``): the elector's own Lease calls, and TokenReview /
  SubjectAccessReview, which are POSTs that read.

Event-like aliases (``set``/``clear``/``is_set``) keep callers written against the old
``threading.Event`` working; ``WriteGate`` is the one-method protocol readers depend on.

What it cannot cover: a request already on the wire when the process froze (it was sent while
valid; the API server may apply it late), and clocks that do not advance while the machine is
suspended (CLOCK_MONOTONIC stops during VM/host suspend on Linux — a suspended VM wakes believing
less time passed; run managers where suspend is not a thing, or rely on the margin).
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Protocol

from escaler.clock import Clock
from escaler.errors import FencedWrite

__all__ = ["EXEMPT_PATH_PARTS", "WriteFence", "WriteGate"]

# Paths that carry these fragments are not writes of cluster state: the elector's own Lease
# calls, and the review APIs (a POST that only asks a question).
EXEMPT_PATH_PARTS: tuple[str, ...] = (
    "/apis/coordination.k8s.io/",
    "/apis/authentication.k8s.io/",
    "/apis/authorization.k8s.io/",
)

_log = logging.getLogger(__name__)


class WriteGate(Protocol):
    """What a writer asks before writing (a ``WriteFence``, or a ``threading.Event`` in tests)."""

    def is_set(self) -> bool: ...


class WriteFence:
    """Time-based write permission; see the module docstring. Thread-safe."""

    def __init__(self, clock: Clock, *, leased: bool) -> None:
        # the manager's time source (monotonic is what counts)
        self._clock = clock
        # True when permission comes from a lease (leader election on); fixed
        self.leased = leased
        # guards the fields below
        self._mu = threading.Lock()
        # monotonic instant at which permission ends; -inf before the first grant (leased), +inf
        # without leader election; only ever grows
        self._valid_until = -math.inf if leased else math.inf
        # set by open() (elected and leader runnables may run); never unset except by close
        self._opened = False
        # latched: closed by close() or found lapsed while open; never reopened
        self._closed = False
        # why the fence closed ("" while not closed), for the refusal message
        self._why = ""

    # -------------------------------------------------------------- the elector's side

    def grant(self, until: float) -> bool:
        """Extend permission to ``until`` (send time of a successful lease write + renew deadline).

        False, and nothing changes, when the fence is closed or had already lapsed: a late
        renewal cannot revive a fence a writer may have seen closed.
        """
        with self._mu:
            if self._closed:
                return False
            if self._opened and self._valid_until > -math.inf and not self._valid_locked():
                return False  # lapsed while open: latched closed by _valid_locked
            self._valid_until = max(self._valid_until, until)
            return True

    @property
    def valid_until(self) -> float:
        with self._mu:
            return self._valid_until

    # -------------------------------------------------------------- the manager's side

    def open(self) -> None:
        """Allow writes (while the grant lasts): the manager calls this once elected."""
        with self._mu:
            if not self._closed:
                self._opened = True

    def close(self, why: str = "closed") -> None:
        """Refuse every write from now on (lease lost, shutdown)."""
        with self._mu:
            if not self._closed:
                self._closed = True
                self._why = why

    # -------------------------------------------------------------- the writers' side

    def allowed(self) -> bool:
        """True while this process may write; evaluated against the clock now."""
        with self._mu:
            return self._opened and not self._closed and self._valid_locked()

    def check(self, what: str) -> None:
        """Raise ``FencedWrite`` naming ``what`` unless writing is allowed now."""
        with self._mu:
            if self._opened and not self._closed and self._valid_locked():
                return
            why = self._why or "not elected"
        raise FencedWrite(f"{what}: refused, this manager may not write ({why})")

    def guard(self, method: str, path: str) -> None:
        """``RestClient`` write guard: ``check`` every write except the exempt paths."""
        if any(part in path for part in EXEMPT_PATH_PARTS):
            return
        self.check(f"{method} {path}")

    def _valid_locked(self) -> bool:
        if self._clock.monotonic() < self._valid_until:
            return True
        # latch only a grant that lapsed (opened before any grant: simply not valid yet)
        if self._opened and not self._closed and self._valid_until > -math.inf:
            self._closed = True
            self._why = "leader lease not renewed within the renew deadline"
            _log.error("write fence lapsed: no write leaves this process from now on")
        return False

    # -------------------------------------------------------------- threading.Event aliases

    def is_set(self) -> bool:
        return self.allowed()

    def set(self) -> None:
        self.open()

    def clear(self) -> None:
        self.close("cleared")
