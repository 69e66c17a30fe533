"""``BoundedDict``: a ``dict`` that never holds more than ``maxsize`` entries, at a dict's cost.

A per-scaler memo that must stay bounded (a scaler's deletion may never be seen) was a
``cachetools.LRUCache``: every entry then also lives in the cache's ``OrderedDict`` of recency, ~92
bytes an entry more than a plain dict (200,000 entries: 132 against 40 bytes each, RSS, ``python
bench/rss_cuts.py``; issue 30: memory per scaler). A memo that one write per scaler per change
fills and one read per poll consults needs a bound, not an exact recency order, so this keeps only
the dict:

* Reads are a ``dict``'s (``get``, ``in``, ``len``, ``pop``, iteration) and change no order.
* ``d[key] = value`` inserts, or replaces *and moves the key to the newest end* (the order is that
  of the last write, so a memo written on every change outlives one never written again).
* When a write makes it hold more than ``maxsize``, it drops the oldest-written entries: the excess
  and ``maxsize // 8`` more, in one pass, so a full memo pays for an eviction once per ``maxsize //
  8`` writes, not on each (dropping one at a time from the front of a dict rescans the slots the
  earlier drops left: quadratic). A dropped entry only costs its owner a recomputation.
* Every way in goes through that bound: ``update``, ``setdefault`` and ``|=`` write key by key as
  ``d[key] = value`` does (a plain dict's would add entries past it).
* Not thread-safe: its users hold their own lock around every access, as they did around the LRU.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice
from typing import Any, TypeVar

__all__ = ["BoundedDict"]

K = TypeVar("K")
V = TypeVar("V")


class BoundedDict(dict[K, V]):
    """See the module docstring."""

    __slots__ = ("maxsize",)

    def __init__(self, maxsize: int) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"BoundedDict.maxsize: must be an integer >= 1, got {maxsize!r}")
        super().__init__()
        # the most entries kept
        self.maxsize = maxsize

    def __setitem__(self, key: K, value: V) -> None:
        if key in self:
            super().__delitem__(key)
        super().__setitem__(key, value)
        if len(self) > self.maxsize:
            excess = len(self) - self.maxsize + self.maxsize // 8
            for old in list(islice(iter(self), excess)):
                super().__delitem__(old)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        items = other.items() if isinstance(other, Mapping) else other
        for key, value in (*items, *kwargs.items()):
            self[key] = value

    def setdefault(self, key: K, default: V = None, /) -> V:  # type: ignore[assignment]
        if key not in self:
            self[key] = default
        return self[key]

    def __ior__(self, other: Any) -> BoundedDict[K, V]:  # type: ignore[override, misc]
        self.update(other)
        return self
