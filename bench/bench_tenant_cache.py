"""Per-namespace cache shares (``escaler.tenantcache.TenantLRU``, issue 27): what a look-up costs,
what an insert costs with many namespaces, and what one flooding namespace leaves of another's
entries, against the process-wide LRUs it replaced.

Run: ``python bench/bench_tenant_cache.py`` (or ``python bench/run.py bench_tenant_cache``), a few
seconds. Each timing is the best of 7 rounds (the round least disturbed by the machine's load).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cachetools import LRUCache

from escaler.tenantcache import TenantLRU

TITLE = "Per-namespace cache shares: look-up and insert cost, and one namespace's flood"
NOTES = """
`python bench/bench_tenant_cache.py`. A cache of 4,096 (the PromQL verdict cache's size; floor 64).
`hit µs`: one look-up of a kept entry (the path of every poll of a fleet); `functools.lru_cache` is
what the verdicts used before, `cachetools.LRUCache + lock` what the Tidal caches and metric grants
used. `insert µs`: one insert into a full cache whose entries belong to `namespaces` namespaces, the
inserting one over its share (it evicts its own oldest) or, with 4,096 namespaces of one entry each
and floor 1, a namespace new to the cache (the total overflows and the heaviest namespace gives up
an entry: found through a heap of the namespaces by weight, not a scan of them). `B kept`:
namespace B writes 64 entries, namespace A then writes 40,960 distinct ones (ten times the cache);
the share of B's entries still answered from the cache.
"""

TOTAL = 4096
FLOOR = 64
ROUNDS = 7


def _best(fn: Callable[[], None], n: int) -> float:
    """Microseconds per call of ``fn``, best of ``ROUNDS`` rounds of ``n`` calls."""
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def _hit_costs() -> list[dict[str, Any]]:
    keys = [f'sum(x_{i}{{namespace="team"}})' for i in range(TOTAL)]

    @functools.lru_cache(maxsize=TOTAL)
    def verdict(query: str, namespace: str) -> str | None:
        return None

    for k in keys:
        verdict(k, "team")
    lru: LRUCache[tuple[str, str], int] = LRUCache(TOTAL)
    lock = threading.Lock()
    shares: TenantLRU[str, int] = TenantLRU(TOTAL, FLOOR)
    for k in keys:
        lru[(k, "team")] = 1
        shares.put("team", k, 1)
    key = keys[TOTAL // 2]

    def cachetools_hit() -> None:
        with lock:
            lru.get((key, "team"))

    rows = []
    for name, fn in (("functools.lru_cache", lambda: verdict(key, "team")),
                     ("cachetools.LRUCache + lock", cachetools_hit),
                     ("TenantLRU", lambda: shares.get("team", key))):
        rows.append({"cache": name, "case": "hit", "namespaces": 1, "µs": _best(fn, 20_000)})
    return rows


def _insert_costs() -> list[dict[str, Any]]:
    rows = []
    for namespaces in (1, 64, 4096):
        cache: TenantLRU[int, int] = TenantLRU(TOTAL, 1 if namespaces == TOTAL else FLOOR)
        per = TOTAL // namespaces
        for t in range(namespaces):
            for i in range(per):
                cache.put(f"ns-{t}", i, i)
        counter = iter(range(10**9))
        n = 200 if namespaces == TOTAL else 20_000
        fresh = namespaces == TOTAL  # each insert by a namespace new to the cache: the scan

        def insert(cache: TenantLRU[int, int] = cache, fresh: bool = fresh,
                   counter: Iterator[int] = counter) -> None:
            i = next(counter)
            cache.put(f"new-{i}" if fresh else "ns-0", TOTAL + i, 0)

        rows.append({"cache": "TenantLRU", "case": "insert (full)", "namespaces": namespaces,
                     "µs": _best(insert, n)})
        assert cache.weight <= TOTAL
    return rows


def _flood() -> list[dict[str, Any]]:
    rows = []
    b_keys = [f"b{i}" for i in range(64)]
    plain: LRUCache[tuple[str, str], int] = LRUCache(TOTAL)
    shares: TenantLRU[str, int] = TenantLRU(TOTAL, FLOOR)
    for k in b_keys:
        plain[("team-b", k)] = 1
        shares.put("team-b", k, 1)
    for i in range(10 * TOTAL):
        plain[("team-a", f"a{i}")] = 1
        shares.put("team-a", f"a{i}", 1)
    kept_plain = sum(("team-b", k) in plain for k in b_keys) / len(b_keys)
    kept_shares = sum(shares.get("team-b", k) is not None for k in b_keys) / len(b_keys)
    rows.append({"cache": "cachetools.LRUCache", "case": "flood: B kept %", "namespaces": 2,
                 "µs": "", "value": round(100 * kept_plain)})
    rows.append({"cache": "TenantLRU", "case": "flood: B kept %", "namespaces": 2, "µs": "",
                 "value": round(100 * kept_shares)})
    return rows


def run() -> list[dict[str, Any]]:
    return _hit_costs() + _insert_costs() + _flood()


if __name__ == "__main__":
    from run import table

    print(table(run()))
