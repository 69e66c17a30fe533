"""What one Tidal evaluation costs with the largest specs the API server accepts (issue 27 item 2).

Runs ``escaler.scaling.tidal.evaluate`` in this process (no cluster) on Tidals of 64 rules (the
API's maximum), each with 366 ``excludeDates`` (the maximum per rule), every rule's start a
distinct expression (no schedule is shared), in shapes a tenant could write:

* the review's: a daily start, 366 consecutive excluded dates around now;
* a weekly start with 366 excluded Mondays before now and an end that fires only on Feb 29 (the
  walk back to the last end crosses more excluded fires than an evaluation looks past: the Tidal
  is ``InvalidSchedule``, and the row times reaching that answer);
* the same with the excluded Mondays after now (the walk to the next start);
* a start every 7 minutes with every other day excluded for two years;
* a start every minute and an end every hour, evaluated inside the repeated hour of a fall-back
  (Europe/Berlin, 2026-10-25): the fires of that hour map to instants before now;
* the rarest schedules the parser accepts: a start on the fifth Friday of February (every 28
  years) and an end on Feb 29.

Columns (CPU milliseconds, ``time.process_time``, medians of ``BENCH_TIDAL_COST_RUNS`` runs,
default 5): ``before`` — the croniter walk of fb705e9 (``tests/unit/tidal_oracle.py``, the same
code kept as the unit tests' oracle); ``parse`` — ``parse_rule_schedules`` of a spec never seen
(each schedule validated with croniter, as the webhook does, and each date parsed), ``reparse``
— the same spec at a new resourceVersion (a label flip: schedules and date lists are kept parsed);
``first`` — the first evaluation of a spec no evaluation has seen (every expression compiled,
every cache empty); ``after`` — an evaluation a minute later
than the one before (the steady state: one evaluation a minute, compiled matchers kept), the
outcome being the same as ``before``'s (checked).
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

import escaler.scaling.tidal as tidal  # noqa: E402
import tests.unit.tidal_oracle as before  # noqa: E402

TITLE = "Tidal: one evaluation of the largest specs the API accepts (CPU milliseconds)"
NOTES = """
`python bench/run.py bench_tidal_cost`: 64 rules x 366 excludeDates, each rule's start its own
expression. `before`: the croniter walk of fb705e9 (kept as `tests/unit/tidal_oracle.py`).
`first`: the first evaluation of a spec never seen (each cron expression compiled into an
`escaler.scaling.cronmatch.CronMatcher`, every cache empty); `after`: the median of evaluations one
minute apart (the steady state: the Tidal's reconcile and every floorFrom read of it share one
evaluation per (uid, resourceVersion, minute), `escaler.reconcilers.kit.tidalevaluations`). `parse`:
the rules' schedules (validated with croniter, as the webhook does) and dates of a spec never seen;
`reparse`: the same spec at a new resourceVersion (a label flip), schedules and dates kept parsed. An
evaluation crosses a run of excluded dates in one bisection, stops a rule's walk at its last end
(or the next transition) and looks past at most 64 excluded fires (`MAX_SKIPPED_FIRES`): beyond
that the Tidal is InvalidSchedule naming the rule. Answers are identical to `before`'s
(tests/unit/test_tidal_oracle.py; the bench checks its own rows too).
"""

NOW = datetime(2026, 12, 6, 13, 0, tzinfo=UTC)
RUNS = int(os.environ.get("BENCH_TIDAL_COST_RUNS", "5"))


def _days(first: date, n: int, step: int = 1) -> list[str]:
    return [(first + timedelta(days=step * k)).isoformat() for k in range(n)]


# shape → (rule i → (start, end, excludeDates), the instant evaluated)
SHAPES: dict[str, tuple[Callable[[int], tuple[str, str, list[str]]], datetime]] = {
    "daily, 366 consecutive dates around now": (lambda i: (
        f"CRON_TZ=America/New_York {i % 60} 9 * * *", "CRON_TZ=America/New_York 0 8 * * *",
        _days(date(2026, 6, 5), 366)), NOW),
    "weekly, 366 excluded Mondays before now, end on Feb 29": (lambda i: (
        f"CRON_TZ=Europe/Berlin {i % 60} 9 * * 1", "CRON_TZ=Europe/Berlin 0 0 29 2 *",
        _days(date(2026, 11, 30), 366, step=-7)), NOW),
    "weekly, 366 excluded Mondays after now, end on Feb 29": (lambda i: (
        f"CRON_TZ=Europe/Berlin {i % 60} 9 * * 1", "CRON_TZ=Europe/Berlin 0 0 29 2 *",
        _days(date(2026, 12, 7), 366, step=7)), NOW),
    "every 7 minutes, every other day excluded": (lambda i: (
        f"CRON_TZ=Asia/Kathmandu {i % 7}/7 * * * *", "CRON_TZ=Asia/Kathmandu 0 0 29 2 *",
        _days(date(2025, 12, 6), 366, step=2)), NOW),
    "every minute, inside a repeated hour (fall-back)": (lambda i: (
        f"CRON_TZ=Europe/Berlin * * * * {i % 7}-6", f"CRON_TZ=Europe/Berlin {i % 60} * * * *",
        _days(date(2025, 12, 6), 366, step=2)), datetime(2026, 10, 25, 1, 30, tzinfo=UTC)),
    "fifth Friday of February, end on Feb 29": (lambda i: (
        f"CRON_TZ=Asia/Tehran {i % 60} 0 * 2 5#5", "CRON_TZ=Asia/Tehran 0 0 29 2 *",
        _days(date(2026, 6, 5), 366)), NOW),
}


def _outcome(module: Any, rules: list[Any], now: datetime) -> tuple[str, object]:
    try:
        ev = module.evaluate(rules, 1, now)
    except module.TooManyExcludedFires as err:
        return f"InvalidSchedule ({str(err)[:40]}...)", ("error", err.index, str(err))
    return (f"{ev.desired_replicas} replicas, {len(ev.active_rules)} rules active",
            (ev.desired_replicas, ev.active_rules, ev.next_transition,
             [(s.name, s.active, s.last_start, s.last_end) for s in ev.rules]))


def _cpu(f: Callable[[], object]) -> float:
    t = time.process_time()
    f()
    return 1000 * (time.process_time() - t)


def _forget() -> None:
    """Empty the evaluator's caches (what a spec no evaluation has seen finds)."""
    for cached in (tidal._matcher, tidal._dated_instant, tidal._bound_offset, tidal._parse,
                   tidal._parse_dates, tidal._runs, tidal._fires_of):
        cached.cache_clear()


def run() -> list[dict[str, Any]]:
    global NOTES
    # CPU time, not wall time, yet a shared machine's load still slows every figure
    NOTES = NOTES.rstrip() + (f" Measured at a load average of {os.getloadavg()[0]:.1f} on "
                              f"{os.cpu_count()} CPUs (`os.getloadavg()` as the run began).\n")
    rows = []
    for shape, (make, now) in SHAPES.items():
        texts = [(f"r{i}", *make(i)[:2], 3, make(i)[2]) for i in range(64)]
        old_rules, errors = before.parse_rule_schedules(texts)
        assert not errors, errors[:2]
        old_times = []
        for _ in range(RUNS):
            t = time.process_time()
            expected = _outcome(before, old_rules, now)
            old_times.append(1000 * (time.process_time() - t))
        parse_times = []
        for _ in range(RUNS):  # the spec's dates never seen (a list seen before is kept parsed)
            _forget()
            parse_times.append(_cpu(lambda texts=texts: tidal.parse_rule_schedules(texts)))
        reparse_times = [_cpu(lambda texts=texts: tidal.parse_rule_schedules(texts)) for _ in range(RUNS)]
        _forget()
        rules, _ = tidal.parse_rule_schedules(texts)
        t = time.process_time()
        outcome, answer = _outcome(tidal, rules, now)
        first = 1000 * (time.process_time() - t)
        assert answer == expected[1], shape
        after = []
        for k in range(1, RUNS + 1):
            at = now + timedelta(minutes=k)
            t = time.process_time()
            got = _outcome(tidal, rules, at)[1]
            after.append(1000 * (time.process_time() - t))
            assert got == _outcome(before, old_rules, at)[1], (shape, at)
        rows.append({"spec (64 rules x 366 excludeDates)": shape,
                     "before CPU ms": round(statistics.median(old_times), 1),
                     "parse CPU ms": round(statistics.median(parse_times), 1),
                     "reparse CPU ms": round(statistics.median(reparse_times), 2),
                     "first CPU ms": round(first, 1),
                     "after CPU ms": round(statistics.median(after), 2),
                     "outcome": outcome})
    return rows


if __name__ == "__main__":
    from bench.run import table

    print(table(run()))
