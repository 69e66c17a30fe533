"""The policy simulator's speed: one hour of traffic under every policy (issue 26, item 6).

Runs ``escaler.sim.engine.simulate`` in this process over the shipped conversation trace (one hour,
19,366 requests, about one replica of work) and the same at 5 times its rate (``--scale 5``, about
five replicas of work), once per policy of the default set at its default settings, from the
steady-state fleet ``escaler simulate`` starts from; the opt-in oracle is timed apart, with its
calibration (the up to ``ORACLE_STEPS`` runs ``escaler simulate --policy oracle`` makes). Each
row is the CPU seconds of the runs (``time.process_time``), the wall seconds, and the simulated
requests per CPU second. The ``report`` rows time the whole report ``escaler simulate`` makes
(steady start, the references — cheapest fixed fleet and lower bound —, every default policy, the
JSON and Markdown; no plots) in wall seconds, on one process and on ``--jobs`` worker processes
(``escaler.sim.parallel``), and the report of every policy ``--policy`` takes (``ALL_POLICIES``:
the oracle, the standby pool's sweep, the seasonal forecast too) on ``--jobs``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from escaler.sim.engine import simulate  # noqa: E402
from escaler.sim.parallel import default_jobs  # noqa: E402
from escaler.sim.runner import (  # noqa: E402
    ALL_POLICIES,
    POLICIES,
    Experiment,
    build,
    calibrate_oracle,
    initial_fleet,
    run_experiment,
)
from escaler.sim.trace import load_trace, shipped_trace_path  # noqa: E402

TITLE = "Policy simulator: one hour of traffic under every policy (CPU seconds)"
NOTES = """
`python bench/run.py bench_simulate`: the shipped conversation trace (one hour) at its rate and at
5 times it, each default policy once at its default settings, in one process; the opt-in oracle
apart, with its calibration runs. Goal (issue 26): one hour x every policy <= 30 s; the `all` row is
the default set's sum; the `report` rows are a whole `escaler simulate` report's wall clock
(references included) on one process and on every CPU (`--jobs`, the default), and the report of
every policy `--policy` takes (`report, every policy`: the oracle's calibration, the standby pool's
sweep and the seasonal forecast too).
A replica that only decodes costs one event per sequence it finishes, not one per iteration
(coalesced decode runs, `escaler/sim/serving.py`; the runs are identical to one event per
iteration); what is left is mostly per request: its arrival, its prefill, its finish.
"""


def _time(name: str, exp: Experiment) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    if name == "oracle":
        calibrate_oracle(exp)
    else:
        simulate(exp.arrivals, build(name, exp), exp.options)
    return time.process_time() - cpu, time.perf_counter() - wall


def _report(arrivals: Any, policies: tuple[str, ...], jobs: int) -> float:
    wall = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        run_experiment(Experiment(arrivals=arrivals, policies=policies), Path(out), plot=False, jobs=jobs)
    return round(time.perf_counter() - wall, 2)


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for scale in (1.0, 5.0):
        arrivals = load_trace(shipped_trace_path(), scale=scale)
        exp = initial_fleet(Experiment(arrivals=arrivals))
        trace = f"conversation x{scale:g}"
        total_cpu = total_wall = 0.0
        for name in POLICIES:
            cpu, wall = _time(name, exp)
            total_cpu, total_wall = total_cpu + cpu, total_wall + wall
            rows.append({"trace": trace, "policy": name, "cpu_s": round(cpu, 2),
                         "wall_s": round(wall, 2), "requests_per_cpu_s": round(len(arrivals) / cpu)})
        rows.append({"trace": trace, "policy": "all", "cpu_s": round(total_cpu, 2),
                     "wall_s": round(total_wall, 2), "requests_per_cpu_s": ""})
        # the oracle's calibration makes up to ORACLE_STEPS runs: no per-run rate
        cpu, wall = _time("oracle", exp)
        rows.append({"trace": trace, "policy": "oracle (opt-in)", "cpu_s": round(cpu, 2),
                     "wall_s": round(wall, 2), "requests_per_cpu_s": ""})
        for jobs in sorted({1, default_jobs()}):
            rows.append({"trace": trace, "policy": f"report, --jobs {jobs}", "cpu_s": "",
                         "wall_s": _report(arrivals, POLICIES, jobs), "requests_per_cpu_s": ""})
        rows.append({"trace": trace, "policy": f"report, every policy, --jobs {default_jobs()}", "cpu_s": "",
                     "wall_s": _report(arrivals, ALL_POLICIES, default_jobs()), "requests_per_cpu_s": ""})
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
