"""Resident memory per entry of a per-scaler memo: ``cachetools.LRUCache`` against ``BoundedDict``.

``python bench/memo_rss.py`` writes ``MEMO_N`` (default 200,000) uid-keyed entries into each kind of
memo (the Reporter's and the StatusWriter's, issue 30), reads a third of them back, and prints the
growth of ``VmRSS`` per entry, in a child process per kind (the values are one shared object: what
is measured is the memo's own bookkeeping and its keys).
Not part of ``make bench`` (no table in docs/benchmarks.md); docs/performance.md quotes it.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def child(kind: str, n: int) -> None:
    from cachetools import LRUCache

    from escaler.boundeddict import BoundedDict

    keys = [f"{i:08d}-aaaa-bbbb-cccc-dddddddddddd" for i in range(n)]
    value = object()
    gc.collect()
    before = _rss_kb()
    memo: dict[str, object] | LRUCache[str, object] = \
        LRUCache(maxsize=2 * n) if kind == "lru" else BoundedDict(2 * n)
    for key in keys:
        memo[key] = value
    for key in keys[::3]:
        memo.get(key)
    gc.collect()
    print(f"{(_rss_kb() - before) * 1024 / n:.0f}")


def main() -> int:
    n = int(os.environ.get("MEMO_N", "200000"))
    print("| memo | entries | RSS bytes per entry |\n|---|---|---|")
    for kind, label in (("lru", "cachetools.LRUCache"), ("bounded", "escaler.boundeddict.BoundedDict")):
        out = subprocess.run([sys.executable, __file__, "--child", kind, str(n)], check=True,
                             capture_output=True, text=True).stdout.strip()
        print(f"| {label} | {n:,} | {int(out):,} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        sys.exit(0)
    sys.exit(main())
