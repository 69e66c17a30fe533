"""Status writes: only when the status changed, through the status subresource (docs/design.md#design-rules,
rule 2).

``StatusWriter.write(mapping, obj, new_status)`` compares ``new_status`` (the JSON form the
reconciler computed) with the status of ``obj`` (the cached object the reconcile started from)
and, only when they differ, sends a JSON merge patch to ``.../status`` that sets every field of
the new status and nulls every field the old one had and the new one has not (a merge patch
replaces lists wholesale, so conditions, currentMetrics and recentDecisions are written as a
whole). No ``resourceVersion`` is sent: only the elected leader writes a scaler's status and a
merge patch touches nothing but status, so a write based on a cache a few milliseconds behind
is still correct, and it costs no 409 round trip.

A cache can lag our own write: the next reconcile may start from the object as it was *before*
the write. ``StatusWriter`` remembers, per object, the resourceVersions that predate its last
write and the status it wrote; while the cache still shows one of them, ``base_status`` hands out
the status we wrote (a read-modify-write of ``recentDecisions`` on the stale copy would drop the
entry just added) and an equal status is not written again. The cache can lag *several* of our
writes (a sync held by a guard, then one that scales, tens of milliseconds apart): the versions
older than the last write are the one it was based on and, when that base was already behind,
the versions behind the write before it plus the version that write produced (read from the
patch's answer; a client that returns none leaves it out). So a cache that delivers the first of
two quick writes is still known to be behind the second (seen on the real control plane: a
``recentDecisions`` entry and ``lastScaleTime`` lost). At most ``MAX_STALE_VERSIONS`` are kept.
Once a reconcile starts from a version that is none of them (the cache has caught up with the
write, or moved past it), the status text and the versions are dropped: only the refresh time is
kept (issue 30, memory per scaler: in a steady fleet every idle poll finds its cache caught up, so
~1 KB of status text per scaler is held only between a write and the next poll). A reflector never
shows a version older than one it has shown, so nothing that could still read the text is lost.
The text is kept deflated (``escaler.packed``) against a preset dictionary (``STATUS_ZDICT`` of
``escaler.api.typical``: the text of a typical scaler status — its keys, condition rows and
reasons), so a fleet's statuses, which repeat those and differ in names, counts and times, take ~7x
less than their text (~2 KB per scaler right after a surge at 10,000 scalers, when every scaler has
just written; issue 30). Any text packs and unpacks exactly, whatever it holds; a status unlike the
dictionary only compresses less. Packing costs ~10 microseconds a write, unpacking is done only
while a cache lags.

**Drift** (``escaler.reconcilers.kit.drift``): given the sync's ``now`` (the injected
clock's wall time) and the scaler's ``significance``, a status that differs from the one the
cluster holds only by drift (a metric value inside the significance, numbers in an error text) is
not written — unless ``refresh_seconds`` > 0 (``--status-refresh-seconds``) and that long has
passed since this writer last wrote that object (or, when it never has, since the first drift it
saw there: a restarted manager does not rewrite every scaler). A significant difference is written
at once. Without ``now``, every change is written at once (as before). A write restarts the
refresh interval; the time is remembered in the same bounded map as the status written.

Counted: ``writes`` (status patches sent), ``skipped`` (unchanged, nothing sent) and ``deferred``
(drift not written).

What is remembered is bounded: ``forget(uid)`` drops an object's entry (deleted, or recreated under
the same name with a new uid), and the map keeps at most ``MAX_REMEMBERED`` entries (an
``escaler.boundeddict.BoundedDict``: the oldest-written go first), so objects whose
deletion was never seen (created and deleted faster than the queue ran them) cannot grow it
without bound. An evicted entry only costs one status write that might have been skipped.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

from escaler.api.typical import STATUS_ZDICT
from escaler.boundeddict import BoundedDict
from escaler.informers.frozen import thaw
from escaler.packed import JsonPacker
from escaler.reconcilers.kit.drift import DEFAULT_STATUS_REFRESH_SECONDS, significant

__all__ = [
    "MAX_REMEMBERED", "MAX_STALE_VERSIONS", "STATUS_ZDICT", "StatusClient", "StatusWriter", "WriteOutcome",
    "pack_status", "status_patch", "unpack_status",
]

# objects whose last written status one StatusWriter remembers (one per live scaler is plenty)
MAX_REMEMBERED = 65536
# resourceVersions remembered as older than an object's last write (a cache lagging more writes
# than this only costs a status built on its copy, as before)
MAX_STALE_VERSIONS = 16


class StatusClient(Protocol):
    """What the writer needs of ``DynamicClient``."""

    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]: ...


class WriteOutcome(StrEnum):
    """What ``StatusWriter.write`` did."""

    # the patch was sent
    WRITTEN = "written"
    # the cluster already holds this status: nothing sent
    UNCHANGED = "unchanged"
    # the status differs only by drift and the refresh is not due: nothing sent
    DEFERRED = "deferred"


@dataclass(frozen=True, slots=True)
class _Memo:
    """What the writer remembers about one object."""

    # resourceVersions a cache may show that predate our last write (oldest first, at most
    # MAX_STALE_VERSIONS), and the status written as compact JSON text, deflated (``pack_status``;
    # read back only while a cache shows one of those versions: ~200 bytes for a fleet's typical
    # status instead of a tree of dicts, issues 10 and 30: memory per scaler); None until we write
    written: tuple[tuple[str, ...], bytes] | None
    # wall time (epoch seconds, the caller's clock) of our last write — or of the first drift seen
    # when we never wrote: the refresh interval counts from it; None when no caller passed a time
    at: float | None
    # the resourceVersion our last write produced ("" when the client did not say)
    produced: str = ""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch turning status ``old`` into ``new`` (absent keys nulled)."""
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    patch.update(new)
    return {"status": patch}


class StatusWriter:
    """Writes a status only when it changed (and drift only at the refresh); see the module docstring."""

    def __init__(self, client: StatusClient, max_remembered: int = MAX_REMEMBERED,
                 refresh_seconds: float = DEFAULT_STATUS_REFRESH_SECONDS) -> None:
        if max_remembered < 1:
            raise ValueError(f"StatusWriter.max_remembered: must be >= 1, got {max_remembered}")
        if not refresh_seconds >= 0:
            raise ValueError(f"StatusWriter.refresh_seconds: must be >= 0, got {refresh_seconds}")
        # performs the patch; fixed
        self._client = client
        # drift is written at most this often per object (seconds; 0 = never on its own); fixed
        self._refresh = refresh_seconds
        # guards the fields below
        self._mu = threading.Lock()
        # uid → _Memo (the last write, and when the refresh interval started); bounded
        self._last: BoundedDict[str, _Memo] = BoundedDict(max_remembered)
        # patches sent / writes skipped as unchanged / drift held back (for tests and debugging)
        self.writes = 0
        self.skipped = 0
        self.deferred = 0

    def _memo(self, obj: Mapping[str, Any]) -> _Memo | None:
        with self._mu:
            return self._last.get(_uid(obj))

    def _ours(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The status we last wrote, while the cache still shows the object that write was based on."""
        memo = self._memo(obj)
        if memo is None or memo.written is None:
            return None
        stale, status = memo.written
        version = str(_meta(obj).get("resourceVersion") or "")
        if version not in stale:
            if version:
                self._caught_up(obj, memo)
            return None
        return unpack_status(status)

    def _caught_up(self, obj: Mapping[str, Any], memo: _Memo) -> None:
        """The cache shows a version newer than our last write: the text is never read again (a cache
        does not go back past a version it has shown), so keep only the refresh time."""
        with self._mu:
            key = _uid(obj)
            if self._last.get(key) is memo:
                self._last[key] = _Memo(None, memo.at)

    def _stale_after_write(self, obj: Mapping[str, Any]) -> tuple[str, ...]:
        """The resourceVersions older than a write based on ``obj`` (see the module docstring)."""
        base = str(_meta(obj).get("resourceVersion") or "")
        memo = self._memo(obj)
        if memo is None or memo.written is None or base not in memo.written[0]:
            return (base,)
        # the base was already behind our previous write: so is that write's own version
        older = memo.written[0] + ((memo.produced,) if memo.produced else ())
        return tuple(dict.fromkeys(older))[-MAX_STALE_VERSIONS:]

    def base_status(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """The status to build this sync's on: the cached one, or — while the cache has not seen our
        last write yet — the status we wrote (so fields that accumulate, ``recentDecisions``, are
        never rebuilt from a stale copy and lose an entry). It is also the status the cluster holds."""
        ours = self._ours(obj)
        if ours is not None:
            return ours  # a fresh copy (decoded from the memo's text)
        old = obj.get("status")
        return thaw(old) if isinstance(old, Mapping) else {}

    def changed(self, obj: Mapping[str, Any], new_status: Mapping[str, Any]) -> bool:
        """True when writing ``new_status`` would change what the cluster holds."""
        old = obj.get("status")
        old_status = thaw(old) if isinstance(old, Mapping) else {}
        if old_status == new_status:
            return False
        # the cache still shows the object our last write was based on: compare with what we wrote
        return self._ours(obj) != new_status

    def refresh_due(self, obj: Mapping[str, Any], now: float) -> bool:
        """True when drift may be written at ``now``: ``refresh_seconds`` (> 0) since our last write of
        ``obj`` (or since the first drift we saw, when we never wrote it — that sighting is recorded)."""
        if self._refresh <= 0:
            return False
        key = _uid(obj)
        with self._mu:
            memo = self._last.get(key)
            if memo is None or memo.at is None:
                self._last[key] = _Memo(None, now) if memo is None else replace(memo, at=now)
                return False
            return now - memo.at >= self._refresh

    def write(self, mapping: Any, obj: Mapping[str, Any], new_status: dict[str, Any], *,
              now: float | None = None, significance: float | None = None) -> WriteOutcome:
        """Patch the status when it changed — drift only when the refresh is due, given ``now`` and
        ``significance`` (see the module docstring)."""
        old = obj.get("status")
        old_status = thaw(old) if isinstance(old, Mapping) else {}
        ours = self._ours(obj)
        if old_status == new_status or ours == new_status:  # as changed(), with one thaw
            with self._mu:
                self.skipped += 1
            return WriteOutcome.UNCHANGED
        held = ours if ours is not None else old_status  # what the cluster holds (base_status)
        if now is not None and significance is not None and not significant(held, new_status, significance) \
                and not self.refresh_due(obj, now):
            with self._mu:
                self.deferred += 1
            return WriteOutcome.DEFERRED
        meta = _meta(obj)
        patch = status_patch(old_status, new_status)
        stale = self._stale_after_write(obj)
        answer = self._client.patch_status(mapping, str(meta["name"]), patch,
                                           str(meta.get("namespace") or "") or None, patch_type="merge")
        with self._mu:
            self.writes += 1
            self._last[_uid(obj)] = _Memo((stale, pack_status(new_status)), now, _resource_version(answer))
        return WriteOutcome.WRITTEN

    def skip(self) -> None:
        """Count a write skipped by a caller that knew nothing changed without building the status."""
        with self._mu:
            self.skipped += 1

    def remembered(self) -> int:
        """How many objects' last status is remembered (for tests and debugging)."""
        with self._mu:
            return len(self._last)

    def forget(self, obj_uid: str) -> None:
        with self._mu:
            self._last.pop(obj_uid, None)


# the memo's packer (STATUS_ZDICT: escaler.api.typical; the ElasticScaler cache's ends with it)
_PACKER = JsonPacker(STATUS_ZDICT)


def pack_status(status: Mapping[str, Any]) -> bytes:
    """``status`` as compact JSON, deflated against ``STATUS_ZDICT`` (``unpack_status`` reverses it)."""
    return _PACKER.pack(status)


def unpack_status(packed: bytes) -> dict[str, Any]:
    """A fresh dict of the status ``pack_status`` packed (the caller may change it)."""
    status: dict[str, Any] = _PACKER.unpack(packed)
    return status


def _resource_version(answer: Any) -> str:
    """The resourceVersion of a patch's answer ("" when it has none), interned: the cache's copy of
    the object this write made interns it too (``escaler.informers.frozen``), so the memo and the
    cache hold one string (issue 30)."""
    meta = _meta(answer) if isinstance(answer, Mapping) else {}
    return sys.intern(str(meta.get("resourceVersion") or ""))


def _uid(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return str(meta.get("uid") or meta.get("name"))
