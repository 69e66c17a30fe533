"""What one Tidal evaluation costs with the largest specs the API server accepts (issue 27 item 2).

Runs ``escaler.scaling.tidal.evaluate`` in this process (no cluster) on Tidals of 64 rules (the
API's maximum), each with 366 ``excludeDates`` (the maximum per rule), every rule's start a
distinct expression (no schedule is shared), in four shapes a tenant could write:

* the review's: a daily start, 366 consecutive excluded dates around now;
* a weekly start with 366 excluded Mondays before now and an end that fires only on Feb 29 (the
  walk back to the last end crosses more excluded fires than an evaluation looks past: the Tidal
  is ``InvalidSchedule``, and the row times reaching that answer);
* the same with the excluded Mondays after now (the walk to the next start);
* a start every 7 minutes with every other day excluded for two years.

Each row is the median CPU milliseconds (``time.process_time``) of ``BENCH_TIDAL_COST_RUNS``
evaluations (default 5) and the outcome. Before the change the first shape took 7.5 s.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from escaler.scaling.tidal import TooManyExcludedFires, evaluate, parse_rule_schedules  # noqa: E402

TITLE = "Tidal: one evaluation of the largest specs the API accepts (CPU milliseconds)"
NOTES = """
`python bench/run.py bench_tidal_cost`: 64 rules x 366 excludeDates, each rule's start its own
expression. An evaluation parses each schedule once, crosses a run of excluded dates in one
look-up, stops a rule's walk at its last end (or the next transition) and looks past at most 64
excluded fires (`MAX_SKIPPED_FIRES`): beyond that the Tidal is InvalidSchedule naming the rule.
A floor Tidal is evaluated once per (uid, resourceVersion, minute) however many scalers read it.
"""

NOW = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)
RUNS = int(os.environ.get("BENCH_TIDAL_COST_RUNS", "5"))


def _days(first: date, n: int, step: int = 1) -> list[str]:
    return [(first + timedelta(days=step * k)).isoformat() for k in range(n)]


SHAPES: dict[str, Callable[[int], tuple[str, str, list[str]]]] = {
    "daily, 366 consecutive dates around now": lambda i: (
        f"CRON_TZ=America/New_York {i % 60} 9 * * *", "CRON_TZ=America/New_York 0 8 * * *",
        _days(date(2026, 6, 5), 366)),
    "weekly, 366 excluded Mondays before now, end on Feb 29": lambda i: (
        f"CRON_TZ=Europe/Berlin {i % 60} 9 * * 1", "CRON_TZ=Europe/Berlin 0 0 29 2 *",
        _days(date(2026, 11, 30), 366, step=-7)),
    "weekly, 366 excluded Mondays after now, end on Feb 29": lambda i: (
        f"CRON_TZ=Europe/Berlin {i % 60} 9 * * 1", "CRON_TZ=Europe/Berlin 0 0 29 2 *",
        _days(date(2026, 12, 7), 366, step=7)),
    "every 7 minutes, every other day excluded": lambda i: (
        f"CRON_TZ=Asia/Kathmandu {i % 7}/7 * * * *", "CRON_TZ=Asia/Kathmandu 0 0 29 2 *",
        _days(date(2025, 12, 6), 366, step=2)),
}


def run() -> list[dict[str, Any]]:
    rows = []
    for shape, make in SHAPES.items():
        rules, errors = parse_rule_schedules(
            [(f"r{i}", *make(i)[:2], 3, make(i)[2]) for i in range(64)])
        assert not errors, errors[:2]
        times, outcome = [], ""
        for _ in range(RUNS):
            t = time.process_time()
            try:
                ev = evaluate(rules, 1, NOW)
                outcome = f"{ev.desired_replicas} replicas, {len(ev.active_rules)} rules active"
            except TooManyExcludedFires as err:
                outcome = f"InvalidSchedule ({str(err)[:40]}...)"
            times.append(time.process_time() - t)
        rows.append({"spec (64 rules x 366 excludeDates)": shape,
                     "CPU ms": round(1000 * statistics.median(times), 1), "outcome": outcome})
    return rows


if __name__ == "__main__":
    from bench.run import table

    print(table(run()))
