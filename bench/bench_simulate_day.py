"""A day of traffic at real time through the simulator: the whole default report's wall clock.

Issue 26's goal: a day-scale trace at real time (the ServeGen curves) in <= 5 minutes of wall clock
on 2 cores. The trace is a day of the shipped ServeGen ``deepseek-r1`` rate curve, unscaled (about
1.4 M requests, token lengths from the shipped conversation trace); the report is what ``escaler
simulate --trace servegen --model deepseek-r1 --no-plots`` makes: the steady start, the cheapest
fixed fleet's sweep, the lower bound's linear program and every default policy, on every CPU
(``--jobs``' default). One row: wall seconds, this process's and its workers' CPU seconds, and
requests per wall second.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from escaler.sim.parallel import default_jobs  # noqa: E402
from escaler.sim.runner import Experiment, run_experiment  # noqa: E402
from escaler.sim.trace import load_trace, resolve_trace  # noqa: E402

TITLE = "Policy simulator: a day at real time, the whole default report (wall seconds)"
NOTES = """
`python bench/run.py bench_simulate_day`: a day of the shipped ServeGen `deepseek-r1` curve at
real time (24 h, unscaled), the report `escaler simulate --trace servegen --model deepseek-r1
--no-plots` makes (steady start, the cheapest fixed fleet's sweep — undersized fleets stop once
their misses prove them short —, the lower bound, apa, slo, flow, hpa and kpa) on every CPU.
Goal (issue 26): <= 300 s on 2 cores. `cpu_s` adds the worker processes' CPU (`RUSAGE_CHILDREN`).
"""


def run() -> list[dict[str, Any]]:
    arrivals = load_trace(resolve_trace("servegen"), model="deepseek-r1")
    jobs = default_jobs()
    cpu0 = os.times()
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        run_experiment(Experiment(arrivals=arrivals), Path(out), plot=False, jobs=jobs)
    wall = time.perf_counter() - wall
    cpu1 = os.times()
    cpu = sum(cpu1[:4]) - sum(cpu0[:4])
    return [{"trace": "ServeGen deepseek-r1, 24 h", "requests": len(arrivals), "jobs": jobs,
             "cores": os.cpu_count(), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
             "requests_per_wall_s": round(len(arrivals) / wall)}]


if __name__ == "__main__":
    for row in run():
        print(row)
