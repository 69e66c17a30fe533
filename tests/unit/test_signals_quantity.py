"""escaler.api.quantity (re-exported by escaler.signals) and escaler.signals.sample:
parsing quantities, finite samples, capped errors."""

from __future__ import annotations

import math
from typing import Any

import pytest

from escaler.errors import MAX_BODY_BYTES
from escaler.signals import Sample, parse_quantity

GOOD = [
    ("250m", 0.25), ("100Mi", 100 * 2**20), ("1Gi", 2**30), ("123456Ki", 123456 * 1024), ("1.5", 1.5),
    ("2e3", 2000.0), ("2E3", 2000.0), ("1e-3", 0.001), ("1E+2", 100.0), ("12345678n", 0.012345678),
    ("500u", 0.0005), ("1k", 1000.0), ("1M", 1e6), ("2G", 2e9), ("3T", 3e12), ("1P", 1e15),
    ("1E", 1e18), ("1Ti", 2.0**40), ("1Pi", 2.0**50), ("1Ei", 2.0**60), ("0", 0.0), ("+4", 4.0),
    ("-4", -4.0), (".5", 0.5), ("5.", 5.0), ("0.1m", 0.0001), ("007", 7.0), (4, 4.0), (2.5, 2.5),
    ("1e-400", 0.0),
]
GOOD_IDS = [str(q) for q, _ in GOOD]

BAD: list[Any] = ["", " 1", "1 ", "1K", "1e", "1e1.5", "1.2.3", "1Ki1", "m", "Mi", "1mi", "1b", "--1", "+",
                  ".", "1,5", "0x10", "NaN", "Inf", "1e400", "9" * 400 + "E", True, None, [], float("nan"),
                  float("inf")]
BAD_IDS = [repr(q)[:20] for q in BAD]


@pytest.mark.parametrize(("q", "expected"), GOOD, ids=GOOD_IDS)
def test_parses(q: Any, expected: float) -> None:
    assert parse_quantity(q) == pytest.approx(expected, rel=1e-12, abs=0.0)


@pytest.mark.parametrize("q", BAD, ids=BAD_IDS)
def test_refuses(q: Any) -> None:
    with pytest.raises(ValueError, match=r"quantity|range"):
        parse_quantity(q)


def test_exact_decimal_arithmetic() -> None:
    # 0.1 + 0.2 style errors do not creep in: the scaling is done in Decimal
    assert parse_quantity("100m") == 0.1
    assert parse_quantity("1.1k") == 1100.0


# ---- Sample ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_of_turns_non_finite_into_an_error(value: float) -> None:
    s = Sample.of(value, "queue depth")
    assert s.value is None and not s.ok
    assert s.error is not None and s.error.startswith("queue depth is ")


def test_of_keeps_finite_values() -> None:
    assert Sample.of(3, "x") == Sample(3.0)
    assert Sample.of(3, "x").ok


def test_error_is_capped_at_one_kib() -> None:
    s = Sample.fail("é" * 5000)
    assert s.error is not None
    assert len(s.error.encode()) <= MAX_BODY_BYTES + len("…".encode())


@pytest.mark.parametrize(
    ("value", "error"),
    [(None, None), (1.0, "both"), (math.nan, None), (True, None)],
    ids=["neither", "both", "nan", "bool"],
)
def test_constructor_refuses_programming_errors(value: Any, error: Any) -> None:
    with pytest.raises(ValueError):
        Sample(value, error)
