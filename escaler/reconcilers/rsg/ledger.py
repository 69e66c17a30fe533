"""``CloneLedger``: the clones this manager created that its caches do not show yet, per namespace.

Two things need it, both because an informer cache lags the API server by a watch event:

* **Expectations** (client-go's ``ControllerExpectations``, as the ReplicaSet controller keeps
  them): after a sync creates clones, the next sync of that RSG may run before the clone cache
  shows them, see them missing and create them again (a 409, reported as a name taken by someone
  else). ``awaiting(namespace, owner, seen)`` says how many of ``owner``'s creates the cache has not
  shown yet; the RSG waits for them (their watch events wake it) instead of acting on a stale list.
* **The per-namespace bound**: ``reserve(namespace, seen, want)`` grants at most
  ``limit - (|seen + created-not-seen| + reserved)`` creates, counting what other RSGs of the
  namespace reserved and have not finished, so concurrent syncs of two RSGs never create past the
  bound together. The returned ``Reservation`` records each create (``created``) and gives back
  what it did not use (``close``, or leaving its ``with`` block).

An entry leaves the ledger when a cache shows it: ``observe(namespace, clone)`` from the clone
caches' event handler (so a clone created and deleted between two syncs is not awaited), or a
sync's ``seen``; or after ``expiry`` seconds on the
injected monotonic clock (a clone deleted before its watch event arrived is never seen; it stops
counting then). Entries are bounded by the namespace limit: the ledger never grants more.
Thread-safe (one lock; no I/O under it).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from types import TracebackType

from escaler.clock import Clock

__all__ = ["DEFAULT_EXPIRY_SECONDS", "CloneId", "CloneLedger", "Reservation"]

# a create the caches never showed stops counting after this long
DEFAULT_EXPIRY_SECONDS = 30.0

# (group/resource, name): one clone in a namespace
CloneId = tuple[str, str]


class Reservation:
    """Creates granted to one sync; ``created`` for each made, ``close`` returns the rest."""

    def __init__(self, ledger: CloneLedger, namespace: str, owner: str, granted: int, used: int) -> None:
        # the ledger it was taken from; fixed
        self._ledger = ledger
        self._namespace = namespace
        # who creates (the RSG's namespace/name); fixed
        self._owner = owner
        # how many creates were granted; fixed
        self.granted = granted
        # clones counted in the namespace when granted (seen, created-not-seen, reserved by others)
        self.used = used
        # granted creates not yet recorded or returned; guarded by the ledger's lock
        self._left = granted

    def created(self, clone: CloneId) -> None:
        self._ledger._record(self, clone)

    def close(self) -> None:
        self._ledger._close(self)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class CloneLedger:
    """See the module docstring."""

    def __init__(self, limit: int, clock: Clock, expiry: float = DEFAULT_EXPIRY_SECONDS) -> None:
        if limit < 1 or expiry <= 0:
            raise ValueError(f"CloneLedger: need limit >= 1 and expiry > 0, got {limit}, {expiry}")
        # clones per namespace; fixed
        self.limit = limit
        # monotonic time for expiry; fixed
        self._clock = clock
        self._expiry = expiry
        # guards every field below
        self._mu = threading.Lock()
        # namespace → clone → (owner, monotonic time created); no empty dicts kept
        self._created: dict[str, dict[CloneId, tuple[str, float]]] = {}
        # namespace → creates granted and not yet recorded or returned; no zeros kept
        self._reserved: dict[str, int] = {}

    def observe(self, namespace: str, clone: CloneId) -> None:
        """A cache showed ``clone`` (an add, update or delete event): it is no longer awaited."""
        with self._mu:
            entries = self._created.get(namespace)
            if entries is not None and entries.pop(clone, None) is not None and not entries:
                del self._created[namespace]

    def awaiting(self, namespace: str, owner: str, seen: Collection[CloneId]) -> int:
        """How many of ``owner``'s creates in ``namespace`` the caches (``seen``) do not show yet."""
        with self._mu:
            self._prune(namespace, seen)
            return sum(1 for who, _ in self._created.get(namespace, {}).values() if who == owner)

    def reserve(self, namespace: str, owner: str, seen: Collection[CloneId], want: int) -> Reservation:
        """Grant up to ``want`` creates in ``namespace`` within the limit (see the module docstring)."""
        with self._mu:
            self._prune(namespace, seen)
            unseen = sum(1 for c in self._created.get(namespace, {}) if c not in seen)
            used = len(seen) + unseen + self._reserved.get(namespace, 0)
            granted = max(0, min(want, self.limit - used))
            if granted:
                self._reserved[namespace] = self._reserved.get(namespace, 0) + granted
            return Reservation(self, namespace, owner, granted, used)

    def _record(self, r: Reservation, clone: CloneId) -> None:
        with self._mu:
            if r._left <= 0:
                raise RuntimeError("CloneLedger: more creates recorded than reserved")
            r._left -= 1
            self._give_back(r._namespace, 1)
            self._created.setdefault(r._namespace, {})[clone] = (r._owner, self._clock.monotonic())

    def _close(self, r: Reservation) -> None:
        with self._mu:
            left, r._left = r._left, 0
            self._give_back(r._namespace, left)

    def _give_back(self, namespace: str, n: int) -> None:
        left = self._reserved.get(namespace, 0) - n
        if left > 0:
            self._reserved[namespace] = left
        else:
            self._reserved.pop(namespace, None)

    def _prune(self, namespace: str, seen: Collection[CloneId]) -> None:
        entries = self._created.get(namespace)
        if not entries:
            return
        oldest = self._clock.monotonic() - self._expiry
        for clone in [c for c, (_, t) in entries.items() if c in seen or t < oldest]:
            del entries[clone]
        if not entries:
            del self._created[namespace]
