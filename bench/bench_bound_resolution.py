"""The simulator's lower bound on the code trace at finer time resolution (issue 26: is the bucket
what keeps the bound loose?).

Runs ``escaler.sim.bound.lower_bound`` over the shipped code trace as ``escaler simulate --trace
code`` reads it (the default 8 B profile, TTFT 2 s, TPOT 0.1 s, the 99 % goal, 1 to 64 replicas, the
steady-start initial fleet) at buckets of 10 s (the default), 5 s and 2 s, each without and with a
standby tier (a rise may be a 10 s wake). Each row: the bound (replica-hours), the linear program's
mean serving replicas (before the ``--min-replicas`` floor, which the bound never goes under), the
CPU seconds of the call.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from escaler.sim.bound import lower_bound  # noqa: E402
from escaler.sim.engine import SimOptions  # noqa: E402
from escaler.sim.fixed import steady_state_fleet  # noqa: E402
from escaler.sim.model import load_profile  # noqa: E402
from escaler.sim.report import SloTargets  # noqa: E402
from escaler.sim.trace import load_trace, resolve_trace  # noqa: E402

TITLE = "Policy simulator: the lower bound on the code trace by time resolution"
NOTES = """
`python bench/run.py bench_bound_resolution`: the code trace with `escaler simulate`'s defaults.
A finer bucket lets the program see a burst's deadlines within seconds instead of spreading its work
over 10 s, so the program's mean serving replicas rise; on this trace they stay far under the one
replica `--min-replicas` keeps, so the bound does not move: what sizes this trace's fleet (prefill
chunks stalling the decodes of a replica, TPOT misses) is not in the program, whatever its resolution.
"""

GOAL = 0.99
WAKE_S = 10.0


def run() -> list[dict[str, Any]]:
    profile = load_profile(None)
    arrivals = load_trace(resolve_trace("code"))
    slo = SloTargets(ttft_s=2.0, tpot_s=0.1)
    options = SimOptions(profile=profile, min_replicas=1, max_replicas=64)
    initial = max(1, min(steady_state_fleet(arrivals, options, slo, GOAL), 64))
    rows = []
    for bucket in (10.0, 5.0, 2.0):
        for standby in (False, True):
            t = time.process_time()
            b = lower_bound(arrivals, profile, ttft_s=slo.ttft_s, tpot_s=slo.tpot_s, goal=GOAL,
                            initial_replicas=initial, max_replicas=64, min_replicas=1, bucket_s=bucket,
                            startup_s=min(WAKE_S, profile.min_startup_s) if standby else None)
            rows.append({"bucket s": bucket, "standby tier": "yes" if standby else "no",
                         "initial replicas": initial,
                         "bound replica-hours": round(b.replica_hours or 0.0, 3),
                         "program mean serving replicas": round(b.mean_replicas or 0.0, 3),
                         "CPU s": round(time.process_time() - t, 1)})
    return rows


if __name__ == "__main__":
    from bench.run import table

    print(table(run()))
