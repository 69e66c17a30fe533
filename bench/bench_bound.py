"""The simulator's lower bound at day scale (issue 26, item 6): the linear program's CPU seconds.

Runs ``escaler.sim.bound.lower_bound`` in this process over the shipped ServeGen rate curve
(``m-small`` at ``--scale 0.02``, request lengths sampled from the conversation trace, as
``escaler simulate --trace servegen --model m-small --scale 0.02`` reads it) for the first 4 hours
and for a whole day, at the default resolution (``default_bucket_s``: 10 s up to 1,440 buckets,
coarser beyond) and, for the 4 hours, at 60 s.
Each row is the bound (replica-hours at the 99 % goal, TTFT 2 s, TPOT 0.1 s, the default profile)
and the CPU seconds of the call (``time.process_time``), the trace's loading excluded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from escaler.sim.bound import lower_bound  # noqa: E402
from escaler.sim.model import load_profile  # noqa: E402
from escaler.sim.trace import load_trace, resolve_trace  # noqa: E402

TITLE = "Policy simulator: the lower bound's linear program at day scale (CPU seconds)"
NOTES = """
`python bench/run.py bench_bound`: the ServeGen m-small curve at `--scale 0.02`, 4 hours and a day.
A day at 10 s buckets (8,640 of them) did not finish in 16 minutes; the default now cuts a trace
into at most 1,440 buckets (60 s for a day). Every resolution gives a valid bound.
"""

CURVE = resolve_trace("servegen")  # the shipped rate curve (escaler/sim/data/README.md)


def run() -> list[dict[str, Any]]:
    profile = load_profile(None)
    rows = []
    for hours, bucket in ((4, None), (4, 60.0), (24, None)):
        arrivals = load_trace(CURVE, model="m-small", scale=0.02, duration=hours * 3600.0)
        t = time.process_time()
        b = lower_bound(arrivals, profile, ttft_s=2.0, tpot_s=0.1, goal=0.99, initial_replicas=5,
                        max_replicas=128, bucket_s=bucket)
        rows.append({"span h": hours, "requests": len(arrivals), "bucket s": b.bucket_s,
                     "bound replica-hours": round(b.replica_hours or 0.0, 3),
                     "CPU s": round(time.process_time() - t, 1)})
    return rows


if __name__ == "__main__":
    from bench.run import table

    print(table(run()))
