"""Resident memory per kept object, before and after two of issue 30's cuts, one child per variant.

``python bench/rss_cuts.py`` prints two tables (``VmRSS`` growth per object, each variant in a
fresh child process; RSS, not tracemalloc: a dict taken from CPython's free list is not a new
allocation to tracemalloc):

* **parse**: ``RSS_PARSES`` (default 20,000) ElasticScalers shaped like bench/bench_capacity.py's
  fleet (one ExternalServer query of their own each) kept by the reconciler's ``ParseCache``: as the
  code is (``escaler.api.compact.share_bookkeeping`` gives each model an instance dict sharing its
  keys with its class), and with that one step undone (each model keeps the dict pydantic made, as
  before 71a3441);
* **memo**: ``RSS_MEMO_ENTRIES`` (default 200,000) uid-keyed entries written into a per-scaler memo
  (the Reporter's and the StatusWriter's), a third of them read back: a ``cachetools.LRUCache`` (as
  before 0e5652e) and an ``escaler.boundeddict.BoundedDict`` (the values are one shared object: what
  is measured is the memo's own bookkeeping and its keys).

Not part of ``make bench`` (no table in docs/benchmarks.md); docs/performance.md quotes it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _scaler(i: int) -> dict[str, Any]:
    from bench_capacity import scaler

    obj = scaler(f"s{i}", "https://prometheus.example:9090", "tenant-a")
    obj["metadata"].update(namespace="tenant-a", uid=f"{i:08d}-aaaa-bbbb-cccc-dddddddddddd",
                           resourceVersion=str(1000 + i), generation=1,
                           creationTimestamp="2026-12-07T10:00:00Z")
    return obj


def _parses(variant: str, n: int) -> Callable[[], Any]:
    """Set up ``n`` parses to keep; returns the function that makes and keeps them."""
    from escaler.api import compact
    from escaler.reconcilers.elasticscaler.parsecache import ParseCache
    from escaler.runtime.types import Request

    if variant == "own dicts":
        compact._shared_keys_dict = lambda cls, fields: fields
    objects = [_scaler(i) for i in range(n)]
    cache = ParseCache()
    cache.load(Request("tenant-a", "warm"), _scaler(n + 1))
    return lambda: [cache.load(Request("tenant-a", f"s{i}"), obj) for i, obj in enumerate(objects)]


def _memo(variant: str, n: int) -> Callable[[], Any]:
    from cachetools import LRUCache

    from escaler.boundeddict import BoundedDict

    keys = [f"{i:08d}-aaaa-bbbb-cccc-dddddddddddd" for i in range(n)]
    value = object()

    def fill() -> Any:
        memo: Any = LRUCache(maxsize=2 * n) if variant == "cachetools.LRUCache" else BoundedDict(2 * n)
        for key in keys:
            memo[key] = value
        for key in keys[::3]:
            memo.get(key)
        return memo

    return fill


# table → (what a row counts, its size's environment variable and default, its variants, set-up)
TABLES: dict[str, tuple[str, str, int, tuple[str, ...], Callable[[str, int], Callable[[], Any]]]] = {
    "parse": ("parses", "RSS_PARSES", 20_000, ("shared-keys dicts", "own dicts"), _parses),
    "memo": ("entries", "RSS_MEMO_ENTRIES", 200_000, ("escaler.boundeddict.BoundedDict",
                                                      "cachetools.LRUCache"), _memo),
}


def child(table: str, variant: str, n: int) -> None:
    make = TABLES[table][4](variant, n)
    gc.collect()
    before = _rss_kb()
    kept = make()
    gc.collect()
    print(f"{(_rss_kb() - before) * 1024 / n:.0f}")
    del kept


def main() -> int:
    for table, (unit, env, default, variants, _) in TABLES.items():
        n = int(os.environ.get(env, str(default)))
        print(f"\n{table}\n\n| variant | {unit} | RSS bytes each |\n|---|---|---|")
        for variant in variants:
            out = subprocess.run([sys.executable, __file__, "--child", table, variant, str(n)],
                                 check=True, capture_output=True, text=True).stdout.strip()
            print(f"| {variant} | {n:,} | {int(out):,} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
