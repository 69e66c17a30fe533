"""Hypothesis strategies for Tidal schedules: five-field cron expressions in the dialect the Tidal
CRD accepts (``*``, ``?``, values, ranges, steps, lists, month and weekday names, ``L``, ``nW``,
``n#k``, ``nL``), zones with odd daylight-saving rules, and wall times and instants biased to month
ends, leap days and the zone's clock changes (tests/unit/test_cronmatch.py, test_tidal_oracle.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import strategies as st

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
# zones whose clocks change in every way the tz database knows: the usual hour, 30 minutes
# (Lord_Howe), at midnight (Havana, Santiago), a negative DST (Dublin), two hours (Troll), twice
# a year around Ramadan (Casablanca), a fixed odd offset (Kathmandu) and none (UTC)
ZONES = ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kathmandu",
         "America/Santiago", "America/Havana", "Europe/Dublin", "Antarctica/Troll", "Africa/Casablanca",
         "Pacific/Apia", "Asia/Tehran"]


def _value(lo: int, hi: int, names: list[str] | None) -> st.SearchStrategy[str]:
    plain = st.integers(lo, hi).map(str)
    if names is None:
        return plain
    return st.one_of(plain, st.sampled_from(names))


@st.composite
def _item(draw: st.DrawFn, lo: int, hi: int, names: list[str] | None = None) -> str:
    kind = draw(st.sampled_from(["*", "value", "value", "range"]))
    if kind == "*":
        text = "*"
    elif kind == "value":
        text = draw(_value(lo, hi, names))
    else:
        a, b = sorted((draw(st.integers(lo, hi)), draw(st.integers(lo, hi))))
        text = f"{a}-{b}"
    if draw(st.integers(0, 3)) == 0:
        text += f"/{draw(st.integers(1, 12))}"
    return text


def _field(lo: int, hi: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    return st.lists(_item(lo, hi, names), min_size=1, max_size=3).map(",".join)


DAY_OF_MONTH = st.one_of(_field(1, 31), st.just("*"), st.just("?"), st.just("L"),
                         st.sampled_from(["28-31", "29", "30,31", "1,L", "31"]),
                         st.integers(1, 31).map(lambda d: f"{d}W"))
DAY_OF_WEEK = st.one_of(
    _field(0, 7, WEEKDAYS), st.just("*"), st.just("?"),
    st.lists(st.tuples(st.integers(0, 7), st.integers(1, 5)), min_size=1, max_size=2).map(
        lambda xs: ",".join(f"{d}#{k}" for d, k in xs)),
    st.integers(0, 7).map(lambda d: f"{d}L"))
MONTH = st.one_of(st.just("*"), _field(1, 12, MONTHS), st.sampled_from(["2", "feb", "2,8", "1-3"]))


def _fires(expression: str) -> bool:
    """What escaler.scaling.schedule.parse_schedule checks of the five fields."""
    try:
        if not croniter.is_valid(expression):
            return False
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
    except Exception:
        return False
    return True


EXPRESSIONS = st.builds(
    lambda mi, h, dom, mo, dow: f"{mi} {h} {dom} {mo} {dow}",
    st.one_of(_field(0, 59), st.sampled_from(["0", "*/15", "30"])),
    st.one_of(_field(0, 23), st.sampled_from(["0", "1", "2", "3", "*"])),
    DAY_OF_MONTH, MONTH, DAY_OF_WEEK).filter(_fires)


@st.composite
def walls(draw: st.DrawFn) -> datetime:
    """A naive wall time 1995-2055, often on a month's last days or Feb 29, sometimes with seconds."""
    year = draw(st.integers(1995, 2055))
    month = draw(st.integers(1, 12))
    day = draw(st.one_of(st.integers(1, 31), st.sampled_from([1, 28, 29, 30, 31])))
    while True:
        try:
            base = datetime(year, month, day)
            break
        except ValueError:
            day -= 1
    wall = base + timedelta(minutes=draw(st.integers(0, 24 * 60 - 1)))
    if draw(st.booleans()):
        wall += timedelta(seconds=draw(st.integers(1, 59)))
    return wall


@lru_cache(maxsize=512)
def transitions(zone: str, year: int) -> tuple[datetime, ...]:
    """The instants (UTC, to the second) at which ``zone`` changed its offset in ``year``."""
    tz = ZoneInfo(zone)
    out = []
    start = datetime(year, 1, 1, tzinfo=UTC)
    step = timedelta(hours=6)
    t = start
    while t.year == year:
        nxt = t + step
        if t.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            lo, hi = t, nxt
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset():
                    lo = mid
                else:
                    hi = mid
            out.append(hi.replace(microsecond=0))
        t = nxt
    return tuple(out)


@st.composite
def instants(draw: st.DrawFn, zone: str) -> datetime:
    """An instant 2000-2040 (UTC): half of them within a day and a half of a clock change of ``zone``."""
    year = draw(st.integers(2000, 2040))
    changes = transitions(zone, year)
    if changes and draw(st.booleans()):
        base = draw(st.sampled_from(changes))
        return base + timedelta(seconds=draw(st.integers(-36 * 3600, 36 * 3600)))
    return datetime(year, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 365 * 86400)))
