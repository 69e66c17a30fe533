"""Admission warnings as the API server passes them on (escaler.webhook.warnings): one printable line
each, at most MAX_WARNING_BYTES bytes, de-duplicated, at most MAX_WARNINGS plus a count of the rest."""

from __future__ import annotations

import pytest

from escaler.webhook.warnings import MAX_WARNING_BYTES, MAX_WARNINGS, bound_warnings, one_line

CASES: list[tuple[str, list[str], list[str]]] = [
    ("none", [], []),
    ("kept-as-written", ["a: must be x, got 'y'; using the default 1"],
     ["a: must be x, got 'y'; using the default 1"]),
    ("newline-and-tab", ["one\ntwo\tthree\r"], ["one two three"]),
    ("escape-and-nul", ["\x1b[31mred\x00"], ["[31mred"]),
    ("bidi-override", ["abc\u202edef"], ["abc def"]),
    ("only-control", ["\n\t"], []),
    ("duplicates", ["w", "w", "v"], ["w", "v"]),
]


@pytest.mark.parametrize(("given", "want"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bound_warnings(given: list[str], want: list[str]) -> None:
    assert bound_warnings(given) == want


@pytest.mark.parametrize("char", ["a", "é", "💥"], ids=["ascii", "two-byte", "four-byte"])
def test_long_warning_cut_at_a_character_boundary(char: str) -> None:
    (out,) = bound_warnings([char * 1000])
    assert len(out.encode("utf-8")) <= MAX_WARNING_BYTES and out.endswith("...")
    assert out[:-3] == char * len(out[:-3])


def test_at_most_ten_and_a_count_of_the_rest() -> None:
    out = bound_warnings([f"w{i}" for i in range(25)])
    assert out == [f"w{i}" for i in range(MAX_WARNINGS)] + ["and 15 more warnings"]
    assert bound_warnings([f"w{i}" for i in range(MAX_WARNINGS + 1)])[-1] == "and 1 more warning"
    assert len(bound_warnings([f"w{i}" for i in range(MAX_WARNINGS)])) == MAX_WARNINGS


def test_one_line() -> None:
    assert one_line(" a\nb ") == "a b"
