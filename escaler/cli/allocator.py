"""``tune_allocator``: glibc's malloc set up for a long-running, many-threaded Python process.

A manager runs ~180-250 threads (workers, outbound pools, informers), and CPython hands every
allocation larger than 512 bytes to glibc's ``malloc``. glibc gives each new thread an arena of its
own until there are eight per core (16 on CI's two cores), and memory freed in one arena serves
only that arena's threads. Threads that take turns under the GIL gain nothing from that, and the
free memory the arenas keep apart is resident: at 10,000 scalers the probe counted 32 MB of it in
the glibc heaps after a surge (``BENCH_CAPACITY_MEMPROBE=1 python bench/bench_capacity.py``;
docs/performance.md). So the manager asks for at most ``ARENA_MAX`` (2) arenas — the setting
commonly given to many-threaded Python servers (``MALLOC_ARENA_MAX=2``).

glibc serves a block of ``M_MMAP_THRESHOLD`` (128 KiB) or more with a mapping of its own, returned
to the system when freed — until the first such block is freed: glibc then raises the threshold to
that block's size (up to 32 MiB), so from then on the tables of the manager's largest dicts (one
entry per scaler: ~300 KiB each at 10,000) come from the heap, and each table left behind when one
grows is a hole only a later block that fits can use. Setting the threshold fixes it at
``MMAP_THRESHOLD`` (128 KiB, glibc's default) and turns that raising off (capacity bench at 3,000:
17.5 → 16.6 KB a scaler; docs/performance.md).

Contract of ``tune_allocator(environ, libc)``:

* Called once, first thing in ``escaler manager``, before any thread starts (an arena limit set
  later does not merge arenas already made).
* An operator's own setting wins, each on its own: with ``MALLOC_ARENA_MAX`` (``MALLOC_MMAP_THRESHOLD_``)
  in the environment, or ``glibc.malloc.arena_max`` (``glibc.malloc.mmap_threshold``) in
  ``GLIBC_TUNABLES``, that one is not changed (glibc read it at start).
* Not glibc (musl, macOS, no ``mallopt``): nothing is changed. A ``mallopt`` that refuses (returns
  0) is reported, not raised: the process runs as it would have.
* Returns what it did, as one line for the start-up log: ``arena_max=2, mmap_threshold=131072``;
  a setting the operator made reads ``arena_max=<n> (MALLOC_ARENA_MAX)``, a refused one ``unchanged
  (mallopt refused arena_max=2)``; ``unchanged (not glibc)``.

``MallocTrim`` (a manager ``Runnable``, on every replica, leader or not): glibc returns free memory
to the system only from the top of a heap; what is freed in the middle (a surge's request and
response bodies, the old table of a dict of every scaler that grew) stays resident, reused only by
later allocations that fit it. The probe at 10,000 scalers counted 16 MB of it after a surge, and
``malloc_trim(0)`` gave 15 MB back (docs/performance.md). So every ``interval`` seconds
(``--malloc-trim-interval``, default ``TRIM_INTERVAL_SECONDS``; 0 turns it off) the manager calls
``malloc_trim(0)``, which releases every whole free page of every arena (``madvise``); nothing in
use moves, and a page released and needed again is only faulted back in. A call walks each
arena's free chunks holding that arena's lock (only allocations larger than 512 bytes wait;
CPython's own allocator serves the rest). Not glibc: it never runs.
``trims`` and ``released`` count the calls and those that released something.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Mapping
from typing import Any

from escaler.clock import Clock, RealClock

__all__ = ["ARENA_MAX", "MMAP_THRESHOLD", "M_ARENA_MAX", "M_MMAP_THRESHOLD", "TRIM_INTERVAL_SECONDS",
           "MallocTrim", "glibc", "tune_allocator"]

# the most malloc arenas the manager asks for (glibc's default: 8 per core)
ARENA_MAX = 2
# mallopt's parameter number for the arena limit (glibc's malloc.h)
M_ARENA_MAX = -8
# the smallest block glibc maps on its own (bytes; its default, fixed instead of raised as it frees)
MMAP_THRESHOLD = 128 * 1024
# mallopt's parameter number for it (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
# (log name, mallopt parameter, value, environment variable, GLIBC_TUNABLES name) of each setting
_SETTINGS = (
    ("arena_max", M_ARENA_MAX, ARENA_MAX, "MALLOC_ARENA_MAX", "glibc.malloc.arena_max"),
    ("mmap_threshold", M_MMAP_THRESHOLD, MMAP_THRESHOLD, "MALLOC_MMAP_THRESHOLD_",
     "glibc.malloc.mmap_threshold"),
)
# --malloc-trim-interval's default (seconds): free heap pages go back to the system this often
TRIM_INTERVAL_SECONDS = 10.0


def glibc() -> Any | None:
    """The process's C library when it is glibc with ``mallopt``, else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def _operator_setting(environ: Mapping[str, str], name: str, variable: str, tunable: str) -> str | None:
    """The value the operator set in the environment for one setting, as the log names it, or None."""
    if environ.get(variable):
        return f"{name}={environ[variable]} ({variable})"
    for item in environ.get("GLIBC_TUNABLES", "").split(":"):
        key, _, value = item.partition("=")
        if key.strip() == tunable:
            return f"{name}={value} (GLIBC_TUNABLES)"
    return None


def tune_allocator(environ: Mapping[str, str] | None = None, libc: Any | None = None) -> str:
    """Limit glibc's arenas to ``ARENA_MAX`` and fix its mmap threshold at ``MMAP_THRESHOLD``, each
    unless the operator set it (module docstring)."""
    env = os.environ if environ is None else environ
    chosen = [_operator_setting(env, name, variable, tunable) for name, _, _, variable, tunable in _SETTINGS]
    if all(c is not None for c in chosen):
        return ", ".join(c for c in chosen if c is not None)
    lib = glibc() if libc is None else libc
    if lib is None:
        return "unchanged (not glibc)"
    said: list[str] = []
    for (name, param, value, _, _), operators in zip(_SETTINGS, chosen, strict=True):
        if operators is not None:
            said.append(operators)
        elif lib.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
            said.append(f"unchanged (mallopt refused {name}={value})")
        else:
            said.append(f"{name}={value}")
    return ", ".join(said)


class MallocTrim:
    """Calls ``malloc_trim(0)`` every ``interval`` seconds until stopped (see the module docstring)."""

    def __init__(self, interval: float = TRIM_INTERVAL_SECONDS, *, libc: Any | None = None,
                 clock: Clock | None = None) -> None:
        if not interval >= 0:
            raise ValueError(f"MallocTrim.interval: must be >= 0 seconds, got {interval}")
        # seconds between calls; 0 = never
        self.interval = interval
        # the C library with malloc_trim, or None (not glibc: nothing to do); fixed
        lib = glibc() if libc is None else libc
        self._libc = lib if lib is not None and hasattr(lib, "malloc_trim") else None
        self._clock: Clock = clock or RealClock()
        # calls made / calls that released memory (malloc_trim returned 1)
        self.trims = 0
        self.released = 0

    @property
    def enabled(self) -> bool:
        return self.interval > 0 and self._libc is not None

    def trim(self) -> bool:
        """One ``malloc_trim(0)``; True when it released memory."""
        if self._libc is None:
            return False
        released = bool(self._libc.malloc_trim(ctypes.c_size_t(0)) == 1)
        self.trims += 1
        self.released += released
        return released

    def start(self, stop: threading.Event) -> None:
        """The ``Runnable``: trims every ``interval`` seconds until ``stop`` is set."""
        if not self.enabled:
            stop.wait()
            return
        while not self._clock.sleep(self.interval, stop):
            self.trim()
