"""Sharding: N manager replicas split the scalers by a stable hash, one Lease per shard.

When one manager process is not enough, run N replicas with ``--total-shards K``. Each object a
controller reconciles belongs to exactly one shard, ``shard_for(namespace, name, K)`` =
SHA-256 of ``"namespace/name"`` mod K — the same in every process, every release (not Python's
salted ``hash``). This is kube-state-metrics' and Argo CD's scheme, kept on the API server: the
shards are plain ``coordination.k8s.io/v1`` Leases, no home-made membership protocol.

**Who leads a shard.** With leader election, every replica is a candidate for every shard's
Lease ``<leader-election-id>-shard-<i>`` (``ShardCandidate``, one elector thread per shard,
re-entering the race after a loss). A replica *prefers* one shard (``--shard-index``, else the
ordinal of a StatefulSet pod name ``<name>-<n>`` mod K): for it, it is an ordinary candidate; for
every other shard it is a *standby* (``LeaderElectionConfig.standby``): it claims that Lease only
once the Lease (or its absence) has stayed unchanged for a full ``lease_duration`` by its own
monotonic clock. So K replicas for K shards each lead their own in steady state, and a dead
replica's shard moves to a standby ``lease_duration`` (+ retry jitter) after its last renewal.
Without leader election the split is static (kube-state-metrics' ``--shard``/``--total-shards``):
the replica leads exactly ``--shard-index`` and nothing moves.

**The fence is per shard.** ``ShardedFence`` holds one ``WriteFence`` per shard (time-based, the
rules of ``escaler.runtime.fence``, a fresh one per term since a fence latches closed). The shard
of a write is carried by a context variable, ``current_shard()``:

* the controller sets it (``writing_for(shard)``) around each reconcile, to the shard of the
  reconcile's ``Request``; threads inherit nothing, so code that writes from another thread must
  carry it along — the Event recorder captures the recorder caller's context at ``event()`` time
  and performs the write inside it (``contextvars.Context.run``);
* the REST client's write guard (``ShardedFence.guard``, installed by the manager exactly as the
  single fence is: in ``RestClient`` and in the connection, see ``escaler.kube.fencedpool``) checks
  *that shard's* fence right before the bytes leave. A write with no shard in context is refused:
  with sharding on, every write must say on whose behalf it is made. Lease and review calls are
  exempt as before;
* ``is_set()`` (what reconcilers ask before writing) answers for the shard in context, too.

So two replicas never write for the same scaler in overlapping time: each write is checked against
the one fence whose validity ends (send time of the last renewal + renew deadline) strictly before
any standby may take that shard's Lease over.

**Losing and gaining.** A lost shard's fence is closed first; the controller drops (``forget``)
every queued request of a shard it does not lead when it pops it, so its scalers stop reconciling
at once while the other shards go on; the process does not exit. A gained shard runs the
``on_gained`` callbacks (the builder's: enqueue every primary object of that shard, listed from
the cache). Caches are not filtered: every replica keeps the whole cache (warm for a takeover;
memory per replica as for one manager — see docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

from escaler.clock import Clock
from escaler.errors import FencedWrite
from escaler.runtime.fence import EXEMPT_PATH_PARTS, WriteFence
from escaler.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from escaler.runtime.leaselock import LeaseClient, LeaseLock
from escaler.runtime.leasewatch import lease_watcher

__all__ = [
    "ShardCandidate",
    "ShardGate",
    "ShardedFence",
    "current_shard",
    "ordinal_shard",
    "shard_for",
    "shard_lease_name",
    "writing_for",
]

_log = logging.getLogger(__name__)

_SHARD: contextvars.ContextVar[int | None] = contextvars.ContextVar("escaler_write_shard", default=None)
# a StatefulSet pod name: <name>-<ordinal>
_ORDINAL_RE = re.compile(r"-(\d+)$")


def shard_for(namespace: str, name: str, total: int) -> int:
    """The shard of ``namespace/name`` among ``total``: SHA-256 of ``"namespace/name"`` mod total."""
    if total <= 1:
        return 0
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % total


def shard_lease_name(leader_election_id: str, shard: int) -> str:
    return f"{leader_election_id}-shard-{shard}"


def ordinal_shard(pod_name: str, total: int) -> int | None:
    """The preferred shard derived from a StatefulSet pod name (``escaler-2`` → 2 mod total)."""
    m = _ORDINAL_RE.search(pod_name)
    return int(m.group(1)) % total if m and total > 0 else None


def current_shard() -> int | None:
    """The shard the code running now writes for (None outside a sharded reconcile)."""
    return _SHARD.get()


@contextlib.contextmanager
def writing_for(shard: int | None) -> Iterator[None]:
    """Run the block as writing for ``shard`` (the controller wraps each reconcile in it)."""
    token = _SHARD.set(shard)
    try:
        yield
    finally:
        _SHARD.reset(token)


class ShardGate(Protocol):
    """What a controller asks before reconciling a request (``ShardedFence`` satisfies it)."""

    def shard_of(self, namespace: str, name: str) -> int: ...

    def leads(self, shard: int) -> bool: ...


class ShardedFence:
    """One ``WriteFence`` per shard; the guard checks the fence of the shard in context.

    Thread-safe. ``total`` shards; ``leased`` as ``WriteFence`` (False: static sharding, the fence
    of an opened shard never lapses)."""

    def __init__(self, clock: Clock, total: int, *, leased: bool) -> None:
        if total < 2:
            raise ValueError(f"ShardedFence.total: must be >= 2 (1 = no sharding), got {total}")
        # time source for the fences; fixed
        self._clock = clock
        # number of shards; fixed
        self.total = total
        # True when shard fences come from leases; fixed
        self.leased = leased
        # guards _fences, _closed and _on_gained
        self._mu = threading.Lock()
        # the current term's fence per shard (a closed placeholder until first gained)
        self._fences: list[WriteFence] = [self._placeholder() for _ in range(total)]
        # set by close(): every fence closed, no later term opens
        self._closed = False
        self._why = ""
        # called with the shard index after a shard was gained (fence open) / lost (fence closed)
        self._on_gained: list[Callable[[int], object]] = []
        self._on_lost: list[Callable[[int], object]] = []

    def _placeholder(self) -> WriteFence:
        f = WriteFence(self._clock, leased=True)
        f.close("shard not led by this replica")
        return f

    # ------------------------------------------------------------------ terms

    def new_term(self, shard: int) -> WriteFence:
        """A fresh (not yet opened) fence for ``shard``'s next term; the elector grants it."""
        return WriteFence(self._clock, leased=self.leased)

    def gained(self, shard: int, fence: WriteFence) -> bool:
        """``shard`` is led under ``fence`` from now on: open it and run the on_gained callbacks.
        False (nothing opened) once the whole fence was closed."""
        with self._mu:
            if self._closed:
                fence.close(self._why)
                return False
            fence.open()
            self._fences[shard] = fence
            callbacks = list(self._on_gained)
        _log.info("leading shard %d of %d", shard, self.total)
        _run_callbacks(callbacks, shard, "gained")
        return True

    def lost(self, shard: int, why: str = "shard lease lost") -> None:
        with self._mu:
            fence = self._fences[shard]
            callbacks = list(self._on_lost)
        fence.close(why)
        _log.warning("no longer leading shard %d: %s", shard, why)
        _run_callbacks(callbacks, shard, "lost")

    def on_gained(self, callback: Callable[[int], object]) -> None:
        with self._mu:
            self._on_gained.append(callback)

    def on_lost(self, callback: Callable[[int], object]) -> None:
        with self._mu:
            self._on_lost.append(callback)

    # ------------------------------------------------------------------ readers

    def shard_of(self, namespace: str, name: str) -> int:
        return shard_for(namespace, name, self.total)

    def leads(self, shard: int) -> bool:
        with self._mu:
            fence = self._fences[shard]
        return fence.allowed()

    def led(self) -> list[int]:
        return [i for i in range(self.total) if self.leads(i)]

    def fence(self, shard: int) -> WriteFence:
        with self._mu:
            return self._fences[shard]

    def check(self, what: str) -> None:
        """Raise ``FencedWrite`` unless the shard in context is led (its fence valid) now."""
        shard = _SHARD.get()
        if shard is None:
            raise FencedWrite(f"{what}: refused, sharded manager writing outside a shard's reconcile")
        if not 0 <= shard < self.total:
            raise FencedWrite(f"{what}: refused, shard {shard} is not in [0, {self.total})")
        self.fence(shard).check(f"{what} (shard {shard})")

    def guard(self, method: str, path: str) -> None:
        """``RestClient`` write guard: ``check`` every write except the exempt paths."""
        if any(part in path for part in EXEMPT_PATH_PARTS):
            return
        self.check(f"{method} {path}")

    # --------------------------------------------- the manager's single-fence interface

    def allowed(self) -> bool:
        """The shard in context is led now (False with none in context)."""
        shard = _SHARD.get()
        return shard is not None and 0 <= shard < self.total and self.leads(shard)

    def is_set(self) -> bool:
        return self.allowed()

    def any_led(self) -> bool:
        return any(self.leads(i) for i in range(self.total))

    def open(self) -> None:
        """No-op: shards open one by one as they are gained."""

    def close(self, why: str = "closed") -> None:
        """Close every shard's fence; later terms are closed at birth."""
        with self._mu:
            self._closed = True
            self._why = why
            fences = list(self._fences)
        for f in fences:
            f.close(why)


def _run_callbacks(callbacks: list[Callable[[int], object]], shard: int, what: str) -> None:
    for cb in callbacks:
        try:
            cb(shard)
        except Exception:
            _log.exception("on-shard-%s callback failed for shard %d", what, shard)


class ShardCandidate:
    """One shard's candidacy: elect, lead until lost, then run for the Lease again, until stopped.

    ``preferred``: an ordinary candidate; otherwise a standby (see the module docstring). Each term
    gets a fresh ``LeaderElector`` and ``WriteFence`` (both are single-use)."""

    def __init__(self, shard: int, config: LeaderElectionConfig, lease_client: LeaseClient,
                 fences: ShardedFence, clock: Clock, *,
                 on_term: Callable[[LeaderElector], None] | None = None) -> None:
        # the shard index and its election config (name = the shard's Lease); fixed
        self.shard = shard
        self.config = config
        self._lease_client = lease_client
        self._fences = fences
        self._clock = clock
        # told about each term's elector (the manager keeps the current one to disable release)
        self._on_term = on_term
        self.name = f"shard-{shard}-election"

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            fence = self._fences.new_term(self.shard)
            elector = LeaderElector(
                self.config, LeaseLock(self._lease_client, self.config.namespace, self.config.name),
                clock=self._clock, fence=fence,
                watcher=lease_watcher(self._lease_client, self.config, self._clock),
                on_started_leading=functools.partial(self._gained, fence),
                on_stopped_leading=lambda: self._fences.lost(
                    self.shard, "stopped" if stop.is_set() else "shard lease lost"),
            )
            if self._on_term is not None:
                self._on_term(elector)
            elector.run(stop)
            if not stop.is_set():
                # a short pause before running again, so a flapping API server is not hammered
                self._clock.sleep(self.config.retry_period, stop)

    def _gained(self, fence: WriteFence) -> None:
        self._fences.gained(self.shard, fence)
