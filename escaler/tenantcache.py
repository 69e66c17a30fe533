"""``TenantLRU``: one bounded LRU cache shared by every namespace, each namespace held to its share
(issue 27: no tenant can flush another's cached work).

A process-wide cache keyed by what tenants write (a PromQL query, a Tidal spec) is shared by every
namespace; with one plain LRU, a tenant writing thousands of distinct entries evicts everyone
else's, and every other tenant pays the recomputation (never a wrong answer, but its work). Here
every entry belongs to a tenant (a namespace) and:

* **Share.** A tenant holds at most ``max(total // active, floor)`` weight, ``active`` being the
  number of tenants that hold entries (the inserting one counted). A tenant over its share evicts
  **its own** least recently used entries first; one tenant writing ten times the cache's size
  of distinct entries churns through its share and leaves the other tenants' entries where they
  are.
* **Total.** The cache never holds more than ``total`` weight: when the shares add up to more than
  that (``floor`` times many tenants), the heaviest tenant gives up its least recently used entry,
  until the total fits; a tenant lighter than every other is never the one that pays.
* **Tenants tracked.** A tenant without entries is forgotten, so the tenants tracked never outnumber
  the entries (at most ``total``: an entry weighs at least 1).
* **Too heavy.** An entry heavier than its tenant's share (or than ``total``) is not kept:
  ``put`` returns False and the caller recomputes it next time.
* **Weight.** ``weigh(value)`` (a positive int; 1 per entry when not given), read once at ``put``.

``get(tenant, key, default)`` answers a kept value and marks it recently used, or ``default``;
``put(tenant, key, value)`` keeps it (replacing the tenant's previous value for ``key``).
Thread-safe: one lock per cache, held for a dictionary operation or an eviction, never while a
value is computed (the caller computes outside, then puts). The heaviest tenant is found through a
heap of the tenants by weight (O(log tenants) per entry evicted, amortized), not a scan. No clock,
no I/O: this module imports nothing of escaler.
"""

from __future__ import annotations

import heapq
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, overload

__all__ = ["TenantLRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")


class _Shelf(Generic[K, V]):
    """One tenant's entries, least recently used first, and their weight."""

    __slots__ = ("entries", "weight")

    def __init__(self) -> None:
        # key → (value, weight), least recently used first
        self.entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        # the sum of the entries' weights
        self.weight = 0


class TenantLRU(Generic[K, V]):
    """See the module docstring."""

    def __init__(self, total: int, floor: int, weigh: Callable[[V], int] | None = None) -> None:
        if total < 1:
            raise ValueError(f"total must be at least 1, got {total}")
        if not 1 <= floor <= total:
            raise ValueError(f"floor must be between 1 and total ({total}), got {floor}")
        # the most weight kept, over every tenant
        self.total = total
        # the share a tenant keeps however many tenants are active
        self.floor = floor
        self._weigh = weigh
        # guards everything below
        self._mu = threading.Lock()
        # tenant → its entries (only tenants holding at least one)
        self._shelves: dict[str, _Shelf[K, V]] = {}
        # the sum of every tenant's weight
        self._weight = 0
        # (-weight, tenant) pushed whenever a tenant's weight grows: a max-heap of the tenants by
        # weight whose entries may be stale (the tenant lighter since, or gone); see _heaviest
        self._heap: list[tuple[int, str]] = []
        # answers from the cache, and look-ups that found nothing (for tests and benchmarks)
        self.hits = 0
        self.misses = 0

    # ------------------------------------------------------------------ reads

    @overload
    def get(self, tenant: str, key: K) -> V | None: ...

    @overload
    def get(self, tenant: str, key: K, default: D) -> V | D: ...

    def get(self, tenant: str, key: K, default: object = None) -> object:
        """The value kept for ``(tenant, key)`` (now the tenant's most recently used), or ``default``."""
        with self._mu:
            shelf = self._shelves.get(tenant)
            item = shelf.entries.get(key) if shelf is not None else None
            if shelf is None or item is None:
                self.misses += 1
                return default
            shelf.entries.move_to_end(key)
            self.hits += 1
            return item[0]

    @property
    def weight(self) -> int:
        """The weight kept, over every tenant (at most ``total``)."""
        with self._mu:
            return self._weight

    def weight_of(self, tenant: str) -> int:
        """The weight ``tenant`` holds."""
        with self._mu:
            shelf = self._shelves.get(tenant)
            return shelf.weight if shelf is not None else 0

    def tenants(self) -> int:
        """How many tenants hold entries."""
        with self._mu:
            return len(self._shelves)

    def share(self, tenant: str) -> int:
        """The weight ``tenant`` may hold now (``max(total // active, floor)``, itself counted)."""
        with self._mu:
            return self._share(tenant)

    def __len__(self) -> int:
        with self._mu:
            return sum(len(s.entries) for s in self._shelves.values())

    # ------------------------------------------------------------------ writes

    def put(self, tenant: str, key: K, value: V) -> bool:
        """Keep ``value`` for ``(tenant, key)``; False when it is not kept (heavier than the tenant's
        share)."""
        weight = self._weigh(value) if self._weigh is not None else 1
        if weight < 1:
            raise ValueError(f"an entry weighs at least 1, got {weight}")
        with self._mu:
            shelf = self._shelves.get(tenant)
            if shelf is not None and key in shelf.entries:
                self._drop(tenant, shelf, key)
                shelf = self._shelves.get(tenant)
            share = self._share(tenant)
            if weight > share:
                return False
            if shelf is None:
                shelf = self._shelves[tenant] = _Shelf()
            shelf.entries[key] = (value, weight)
            shelf.weight += weight
            self._weight += weight
            self._note(tenant, shelf.weight)
            while shelf.weight > share:  # over its share: its own oldest go first
                self._drop(tenant, shelf, next(iter(shelf.entries)))
            while self._weight > self.total:  # the shares overlap (floors): the heaviest pays
                heaviest, victim = self._heaviest()
                self._drop(heaviest, victim, next(iter(victim.entries)))
            return key in shelf.entries

    def clear(self) -> None:
        """Forget every entry of every tenant (the counters stay)."""
        with self._mu:
            self._shelves.clear()
            self._weight = 0
            self._heap.clear()

    # ------------------------------------------------------------------ internals (lock held)

    def _share(self, tenant: str) -> int:
        active = len(self._shelves) + (tenant not in self._shelves)
        return max(self.total // active, self.floor)

    def _note(self, tenant: str, weight: int) -> None:
        """``tenant`` now weighs ``weight`` (more than before)."""
        heapq.heappush(self._heap, (-weight, tenant))
        if len(self._heap) > 2 * len(self._shelves) + 64:  # mostly stale: rebuilt from the shelves
            self._heap = [(-s.weight, t) for t, s in self._shelves.items()]
            heapq.heapify(self._heap)

    def _heaviest(self) -> tuple[str, _Shelf[K, V]]:
        """The tenant holding the most weight (the cache is not empty). Every tenant has a heap entry
        at least its weight (one is pushed at each growth, and a stale one is re-pushed at the
        current weight when it surfaces), so the first entry matching its tenant's weight is the
        heaviest: O(log tenants) amortized, where a scan would be O(tenants)."""
        heap = self._heap
        while True:
            negative, tenant = heap[0]
            shelf = self._shelves.get(tenant)
            if shelf is not None and shelf.weight == -negative:
                return tenant, shelf
            heapq.heappop(heap)
            if shelf is not None and shelf.weight < -negative:
                heapq.heappush(heap, (-shelf.weight, tenant))

    def _drop(self, tenant: str, shelf: _Shelf[K, V], key: K) -> None:
        _, weight = shelf.entries.pop(key)
        shelf.weight -= weight
        self._weight -= weight
        if not shelf.entries:
            del self._shelves[tenant]
