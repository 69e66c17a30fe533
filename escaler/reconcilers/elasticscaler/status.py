"""Status writes: only when the status changed, through the status subresource (ARCHITECTURE.md).

``StatusWriter.write(mapping, obj, new_status)`` compares ``new_status`` (the JSON form the
reconciler computed) with the status of ``obj`` (the cached object the reconcile started from)
and, only when they differ, sends a JSON merge patch to ``.../status`` that sets every field of
the new status and nulls every field the old one had and the new one has not (a merge patch
replaces lists wholesale, so conditions, currentMetrics and recentDecisions are written as a
whole). No ``resourceVersion`` is sent: only the elected leader writes a scaler's status and a
merge patch touches nothing but status, so a write based on a cache a few milliseconds behind
is still correct, and it costs no 409 round trip.

A cache can lag our own write: the next reconcile may start from the object as it was *before*
the write. ``StatusWriter`` remembers, per object, the resourceVersion it wrote against and the
status it wrote; while the cache still shows that old resourceVersion, ``base_status`` hands out
the status we wrote (a read-modify-write of ``recentDecisions`` on the stale copy would drop the
entry just added) and an equal status is not written again.

Counted: ``writes`` (status patches sent) and ``skipped`` (unchanged, nothing sent).

What is remembered is bounded: ``forget(uid)`` drops an object's entry (deleted, or recreated under
the same name with a new uid), and the map is an LRU of ``MAX_REMEMBERED`` entries, so objects whose
deletion was never seen (created and deleted faster than the queue ran them) cannot grow it
without bound. An evicted entry only costs one status write that might have been skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

from cachetools import LRUCache

from escaler.informers.frozen import thaw

__all__ = ["MAX_REMEMBERED", "StatusClient", "StatusWriter", "status_patch"]

# objects whose last written status one StatusWriter remembers (one per live scaler is plenty)
MAX_REMEMBERED = 65536


class StatusClient(Protocol):
    """What the writer needs of ``DynamicClient``."""

    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]: ...


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch turning status ``old`` into ``new`` (absent keys nulled)."""
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    patch.update(new)
    return {"status": patch}


class StatusWriter:
    """Writes a status only when it changed; see the module docstring."""

    def __init__(self, client: StatusClient, max_remembered: int = MAX_REMEMBERED) -> None:
        if max_remembered < 1:
            raise ValueError(f"StatusWriter.max_remembered: must be >= 1, got {max_remembered}")
        # performs the patch; fixed
        self._client = client
        # guards the fields below (LRUCache is not thread-safe, and get() reorders it)
        self._mu = threading.Lock()
        # uid → (resourceVersion the last write was based on, the status written); an LRU
        self._last: LRUCache[str, tuple[str, dict[str, Any]]] = LRUCache(maxsize=max_remembered)
        # patches sent / writes skipped as unchanged (for tests and debugging)
        self.writes = 0
        self.skipped = 0

    def base_status(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The status to build this sync's on: the cached one, or — while the cache has not seen our
        last write yet — the status we wrote (so fields that accumulate, ``recentDecisions``, are
        never rebuilt from a stale copy and lose an entry)."""
        meta = _meta(obj)
        with self._mu:
            last = self._last.get(str(meta.get("uid") or meta.get("name")))
        if last is not None and last[0] == str(meta.get("resourceVersion") or ""):
            return dict(last[1])
        old = obj.get("status")
        return thaw(old) if isinstance(old, Mapping) else {}

    def changed(self, obj: Mapping[str, Any], new_status: Mapping[str, Any]) -> bool:
        """True when writing ``new_status`` would change what the cluster holds."""
        old = obj.get("status")
        old_status = thaw(old) if isinstance(old, Mapping) else {}
        if old_status == new_status:
            return False
        meta = _meta(obj)
        with self._mu:
            last = self._last.get(str(meta.get("uid") or meta.get("name")))
        # the cache still shows the object our last write was based on: compare with what we wrote
        return not (last is not None and last[0] == str(meta.get("resourceVersion") or "")
                    and last[1] == new_status)

    def write(self, mapping: Any, obj: Mapping[str, Any],
              new_status: dict[str, Any]) -> dict[str, Any] | None:
        """Patch the status when it changed; returns the server's object, or None when skipped."""
        if not self.changed(obj, new_status):
            with self._mu:
                self.skipped += 1
            return None
        meta = _meta(obj)
        old = obj.get("status")
        patch = status_patch(thaw(old) if isinstance(old, Mapping) else {}, new_status)
        out = self._client.patch_status(mapping, str(meta["name"]), patch, str(meta.get("namespace") or "")
                                        or None, patch_type="merge")
        with self._mu:
            self.writes += 1
            self._last[str(meta.get("uid") or meta.get("name"))] = (str(meta.get("resourceVersion") or ""),
                                                                    dict(new_status))
        return out

    def remembered(self) -> int:
        """How many objects' last status is remembered (for tests and debugging)."""
        with self._mu:
            return len(self._last)

    def forget(self, obj_uid: str) -> None:
        with self._mu:
            self._last.pop(obj_uid, None)
