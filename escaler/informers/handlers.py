"""What a ``SharedInformer`` calls: the ``ResourceEventHandler`` protocol (client-go's).

Contract, as delivered by ``SharedInformer``:

* ``on_add(obj, is_in_initial_list)``: ``obj`` appeared. ``is_in_initial_list`` is True for the
  objects of the initial list and for the synthetic adds a handler registered late receives for
  everything already cached; False for objects created later (including ones a relist found).
* ``on_update(old, new)``: ``obj`` changed; on a periodic resync ``old is new``.
* ``on_delete(obj)``: ``obj`` is gone. After a watch gap, ``obj`` is a
  ``DeletedFinalStateUnknown`` whose ``.obj`` is the last state the cache saw.
* Objects are frozen (read-only) and shared with the cache and other handlers; ``thaw()`` one
  to modify it. Calls to one handler happen on one thread, in event order. Handlers should only
  enqueue keys: a slow handler delays only itself, but its buffer grows while it lags.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from escaler.informers.frozen import FrozenDict
from escaler.informers.store import DeletedFinalStateUnknown

__all__ = ["FuncHandler", "ResourceEventHandler"]


class ResourceEventHandler(Protocol):
    def on_add(self, obj: FrozenDict, is_in_initial_list: bool) -> None: ...

    def on_update(self, old: FrozenDict, new: FrozenDict) -> None: ...

    def on_delete(self, obj: FrozenDict | DeletedFinalStateUnknown) -> None: ...


@dataclass(frozen=True)
class FuncHandler:
    """A ``ResourceEventHandler`` from optional callables; a missing one ignores its events."""

    # called as add(obj, is_in_initial_list)
    add: Callable[[FrozenDict, bool], None] | None = None
    # called as update(old, new)
    update: Callable[[FrozenDict, FrozenDict], None] | None = None
    # called as delete(obj_or_tombstone)
    delete: Callable[[FrozenDict | DeletedFinalStateUnknown], None] | None = None

    def on_add(self, obj: FrozenDict, is_in_initial_list: bool) -> None:
        if self.add is not None:
            self.add(obj, is_in_initial_list)

    def on_update(self, old: FrozenDict, new: FrozenDict) -> None:
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: FrozenDict | DeletedFinalStateUnknown) -> None:
        if self.delete is not None:
            self.delete(obj)
