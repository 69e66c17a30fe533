#!/usr/bin/env python3
"""How many pytest-xdist workers the e2e suite's parallel tier runs (``make test``, docs/testing.md).

An e2e test mostly waits (polls, windows, leases, pods starting); what it does use is CPU, of the
test worker, the managers it starts and the shared control plane. With ``CPU_SHARE`` the measured
fraction of one core a worker keeps busy on average (the tier's CPU seconds over its workers'
wall-clock seconds, docs/testing.md), ``cores / CPU_SHARE`` workers would fill the machine; the
count is that, times ``HEADROOM`` so timing-sensitive assertions keep some idle CPU, within
[MIN_WORKERS, MAX_WORKERS]. Standard library only (runs before the virtualenv exists).
"""

from __future__ import annotations

import math
import os

# measured: see docs/testing.md ("Sizing the workers")
CPU_SHARE = 0.30
HEADROOM = 0.5
MIN_WORKERS = 2
MAX_WORKERS = 8


def workers(cores: int) -> int:
    return max(MIN_WORKERS, min(MAX_WORKERS, math.floor(cores / CPU_SHARE * HEADROOM)))


if __name__ == "__main__":
    print(workers(len(os.sched_getaffinity(0))))
