"""Resident memory per parsed ElasticScaler kept by the reconciler's ``ParseCache`` (issue 30).

``python bench/parse_rss.py`` parses ``PARSE_N`` (default 20,000) ElasticScalers shaped like
bench/bench_capacity.py's fleet (one ExternalServer query of their own each) through
``ParseCache.load``, each kept, and prints the growth of the process's ``VmRSS`` per parse, in a
child process per variant:

* ``shared-keys dicts``: the code as it is (``escaler.api.compact.share_bookkeeping`` gives each
  model an instance dict that shares its keys with its class);
* ``own dicts``: the same with that one step undone (each model keeps the dict pydantic made, as
  before 71a3441).

RSS, not tracemalloc: a dict taken from CPython's free list is not a new allocation to tracemalloc.
Not part of ``make bench`` (no table in docs/benchmarks.md); docs/performance.md quotes it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
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


def _object(i: int) -> dict[str, Any]:
    from bench_capacity import scaler

    obj = scaler(f"s{i}", "https://prometheus.example:9090", "tenant-a")
    obj["metadata"].update(namespace="tenant-a", uid=f"{i:08d}-aaaa-bbbb-cccc-dddddddddddd",
                           resourceVersion=str(1000 + i), generation=1,
                           creationTimestamp="2026-12-07T10:00:00Z")
    return obj


def child(variant: str, n: int) -> None:
    from escaler.api import compact
    from escaler.reconcilers.elasticscaler.parsecache import ParseCache
    from escaler.runtime.types import Request

    if variant == "own":
        compact._shared_keys_dict = lambda cls, fields: fields
    objects = [_object(i) for i in range(n)]
    cache = ParseCache()
    cache.load(Request("tenant-a", "warm"), _object(n + 1))
    gc.collect()
    before = _rss_kb()
    for i, obj in enumerate(objects):
        cache.load(Request("tenant-a", f"s{i}"), obj)
    gc.collect()
    print(f"{(_rss_kb() - before) * 1024 / n:.0f}")


def main() -> int:
    n = int(os.environ.get("PARSE_N", "20000"))
    print("| variant | parses | RSS bytes per parse |\n|---|---|---|")
    for variant, label in (("shared", "shared-keys dicts"), ("own", "own dicts")):
        out = subprocess.run([sys.executable, __file__, "--child", variant, str(n)], check=True,
                             capture_output=True, text=True).stdout.strip()
        print(f"| {label} | {n:,} | {int(out):,} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
