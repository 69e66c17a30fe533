"""``tune_allocator``: glibc's malloc set up for a long-running, many-threaded Python process.

A manager runs ~180-250 threads (workers, outbound pools, informers), and CPython hands every
allocation larger than 512 bytes to glibc's ``malloc``. glibc gives each new thread an arena of its
own until there are eight per core (16 on CI's two cores), and memory freed in one arena serves
only that arena's threads. Threads that take turns under the GIL gain nothing from that, and the
free memory the arenas keep apart is resident: at 10,000 scalers the probe counted 32 MB of it in
the glibc heaps after a surge (``BENCH_CAPACITY_MEMPROBE=1 python bench/bench_capacity.py``;
docs/performance.md). So the manager asks for at most ``ARENA_MAX`` (2) arenas — the setting
commonly given to many-threaded Python servers (``MALLOC_ARENA_MAX=2``).

Contract of ``tune_allocator(environ, libc)``:

* Called once, first thing in ``escaler manager``, before any thread starts (an arena limit set
  later does not merge arenas already made).
* An operator's own setting wins: with ``MALLOC_ARENA_MAX`` in the environment, or
  ``glibc.malloc.arena_max`` in ``GLIBC_TUNABLES``, nothing is changed (glibc read it at start).
* Not glibc (musl, macOS, no ``mallopt``): nothing is changed. A ``mallopt`` that refuses (returns
  0) is reported, not raised: the process runs as it would have.
* Returns what it did, as one line for the start-up log: ``arena_max=2``, ``arena_max=<n>
  (MALLOC_ARENA_MAX)``, ``unchanged (not glibc)`` or ``unchanged (mallopt refused arena_max=2)``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["ARENA_MAX", "M_ARENA_MAX", "glibc", "tune_allocator"]

# the most malloc arenas the manager asks for (glibc's default: 8 per core)
ARENA_MAX = 2
# mallopt's parameter number for the arena limit (glibc's malloc.h)
M_ARENA_MAX = -8


def glibc() -> Any | None:
    """The process's C library when it is glibc with ``mallopt``, else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def _operator_setting(environ: Mapping[str, str]) -> str | None:
    """The arena limit the operator set in the environment, as the log names it, or None."""
    if environ.get("MALLOC_ARENA_MAX"):
        return f"arena_max={environ['MALLOC_ARENA_MAX']} (MALLOC_ARENA_MAX)"
    for tunable in environ.get("GLIBC_TUNABLES", "").split(":"):
        name, _, value = tunable.partition("=")
        if name.strip() == "glibc.malloc.arena_max":
            return f"arena_max={value} (GLIBC_TUNABLES)"
    return None


def tune_allocator(environ: Mapping[str, str] | None = None, libc: Any | None = None) -> str:
    """Limit glibc's arenas to ``ARENA_MAX`` unless the operator set a limit (module docstring)."""
    env = os.environ if environ is None else environ
    chosen = _operator_setting(env)
    if chosen is not None:
        return chosen
    lib = glibc() if libc is None else libc
    if lib is None:
        return "unchanged (not glibc)"
    if lib.mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(ARENA_MAX)) != 1:
        return f"unchanged (mallopt refused arena_max={ARENA_MAX})"
    return f"arena_max={ARENA_MAX}"
