"""escaler.scaling.cronmatch: the compiled matcher answers what croniter answers on naive wall times
(``prev(w)`` = ``get_prev(w + 1 s)``, ``next(w)`` = ``get_next(w - 1 s)``), for random expressions
of the Tidal dialect and wall times biased to month ends and leap days."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escaler.scaling.cronmatch import CronMatcher
from tests.unit.tidal_strategies import EXPRESSIONS, walls


def _croniter_prev(expression: str, wall: datetime) -> datetime | None:
    try:
        out: datetime = croniter(expression, wall + timedelta(seconds=1)).get_prev(datetime)
    except Exception:
        return None
    return out


def _croniter_next(expression: str, wall: datetime) -> datetime | None:
    try:
        out: datetime = croniter(expression, wall - timedelta(seconds=1)).get_next(datetime)
    except Exception:
        return None
    return out


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
@given(EXPRESSIONS, st.lists(walls(), min_size=1, max_size=6))
def test_the_matcher_agrees_with_croniter(expression: str, at: list[datetime]) -> None:
    m = CronMatcher(expression)
    for wall in at:
        assert m.prev(wall) == _croniter_prev(expression, wall), (expression, wall)
        assert m.next(wall) == _croniter_next(expression, wall), (expression, wall)


@pytest.mark.parametrize(("expression", "wall", "prev", "nxt"), [
    # leap days: Feb 29 comes every 4 years, not in 2100
    ("0 0 29 2 *", datetime(2026, 12, 6, 13), datetime(2024, 2, 29), datetime(2028, 2, 29)),
    ("0 0 29 2 *", datetime(2097, 1, 1), datetime(2096, 2, 29), datetime(2104, 2, 29)),
    # the last day of the month; day 31 skips the short months
    ("30 23 L * *", datetime(2024, 2, 29, 23, 30), datetime(2024, 2, 29, 23, 30),
     datetime(2024, 2, 29, 23, 30)),
    ("0 12 31 * *", datetime(2026, 4, 15), datetime(2026, 3, 31, 12), datetime(2026, 5, 31, 12)),
    # the fifth Friday of February: only a leap February starting on a Friday (2008, 2036)
    ("0 0 * 2 5#5", datetime(2026, 12, 6), datetime(2008, 2, 29), datetime(2036, 2, 29)),
    # the weekday nearest the 1st when the 1st is a Saturday: Monday the 3rd
    ("0 9 1W * *", datetime(2026, 8, 2), datetime(2026, 7, 1, 9), datetime(2026, 8, 3, 9)),
    # both day fields restricted: either matches (Vixie cron's union)
    ("0 0 13 * 5", datetime(2026, 2, 14), datetime(2026, 2, 13), datetime(2026, 2, 20)),
    # a wall time with seconds: the next fire is the next whole minute that matches
    ("* * * * *", datetime(2026, 1, 1, 0, 0, 30), datetime(2026, 1, 1), datetime(2026, 1, 1, 0, 1)),
])
def test_named_cases(expression: str, wall: datetime, prev: datetime, nxt: datetime) -> None:
    m = CronMatcher(expression)
    assert m.prev(wall) == prev == _croniter_prev(expression, wall)
    assert m.next(wall) == nxt == _croniter_next(expression, wall)


def test_a_look_up_of_the_rarest_schedule_walks_a_few_dozen_months() -> None:
    # the fifth Friday of February comes every 28 years: the walk skips whole years of one month
    m = CronMatcher("0 0 * 2 5#5")
    m.next(datetime(2009, 1, 1))
    assert len(m._kinds) <= 14  # February: leap or not, x the weekday of the 1st
