"""Trace readers: every format, the transforms, and an error naming the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from escaler.sim.trace import (
    SHIPPED_TRACES,
    Arrival,
    TraceError,
    load_trace,
    resolve_trace,
    shipped_trace_path,
)

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,10,1
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_csv_is_relative_to_its_first_row(tmp_path: Path) -> None:
    got = load_trace(write(tmp_path, "a.csv", AZURE))
    assert [a.prompt_tokens for a in got] == [374, 396, 10]
    assert got[0].t == 0.0
    assert got[1].t == pytest.approx(4.314579)
    assert got[2].t == pytest.approx(4.31941)


def test_generic_csv_and_jsonl_with_aliases(tmp_path: Path) -> None:
    csv = write(tmp_path, "g.csv", "Arrival_S,input_tokens,completion_tokens\n10.5,5,6\n10,3,4\n")
    assert load_trace(csv) == (Arrival(0.0, 3, 4), Arrival(0.5, 5, 6))
    jl = write(tmp_path, "g.jsonl", '{"timestamp": 3, "prompt_tokens": 7, "output_tokens": 2}\n\n'
                                    '{"timestamp": 1.5, "prompt_tokens": 1, "output_tokens": 1}\n')
    assert load_trace(jl) == (Arrival(0.0, 1, 1), Arrival(1.5, 7, 2))


@pytest.mark.parametrize(("name", "text", "message"), [
    ("a.csv", AZURE + "2023-11-16 18:15:52,abc,3\n", r"a\.csv:5: ContextTokens must be a number, got 'abc'"),
    ("a.csv", AZURE + "yesterday,1,3\n", r"a\.csv:5: TIMESTAMP 'yesterday' is not"),
    ("a.csv", AZURE + "2023-11-16 18:15:52,0,3\n", r"a\.csv:5: ContextTokens must be at least 1"),
    ("a.csv", AZURE + "2023-11-16 18:15:52,5,\n", r"a\.csv:5: GeneratedTokens is missing"),
    ("g.csv", "arrival_s,prompt_tokens,output_tokens\n1,2,3\n-1,2,3\n",
     r"g\.csv:3: arrival_s must be a finite"),
    ("g.csv", "arrival_s,prompt_tokens,output_tokens\n1,2.5,3\n", r"g\.csv:2: prompt_tokens must be a whole"),
    ("g.csv", "when,prompt_tokens,output_tokens\n1,2,3\n", r"g\.csv:1: no column for an arrival time"),
    ("g.jsonl", '{"timestamp": 1, "prompt_tokens": 1, "output_tokens": 1}\n{oops\n', r"g\.jsonl:2: not JSON"),
    ("g.jsonl", '[1, 2]\n', r"g\.jsonl:1: want a JSON object"),
    ("g.jsonl", '{"timestamp": 1, "output_tokens": 1}\n', r"g\.jsonl:1: no column for a prompt length"),
    ("e.csv", "", r"e\.csv:1: empty"),
])
def test_a_malformed_line_names_the_file_line_and_rule(tmp_path: Path, name: str, text: str,
                                                       message: str) -> None:
    with pytest.raises(TraceError, match=message):
        load_trace(write(tmp_path, name, text))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.csv: no such file"):
        load_trace(tmp_path / "nope.csv")


def test_scale_speedup_and_duration(tmp_path: Path) -> None:
    p = write(tmp_path, "g.csv", "arrival_s,prompt_tokens,output_tokens\n" +
              "".join(f"{i},10,10\n" for i in range(100)))
    assert len(load_trace(p, scale=3)) == 300
    half = load_trace(p, scale=0.5, seed=1)
    assert 30 < len(half) < 70 and half == load_trace(p, scale=0.5, seed=1)
    fast = load_trace(p, speedup=10)
    assert fast[-1].t == pytest.approx(9.9)
    assert len(load_trace(p, duration=49.5)) == 50
    with pytest.raises(ValueError, match="--scale must be a positive"):
        load_trace(p, scale=0)


def test_scale_superposes_shifted_copies_and_never_replays_a_burst_at_one_instant(tmp_path: Path) -> None:
    # one request a second for 1,000 s and a burst of 20 at t=100
    rows = [f"{i},100,10" for i in range(1000)] + ["100.0,500,10"] * 20
    p = write(tmp_path, "b.csv", "arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    x5 = load_trace(p, scale=5, seed=3)
    assert len(x5) == 5 * 1020 and x5 == load_trace(p, scale=5, seed=3)
    times = [a.t for a in x5]
    assert min(times) >= 0.0 and max(times) < 1000.0 + 1.0  # copies wrap round the span
    # the densest second holds the burst once (and a few background requests), not five times
    densest = max(sum(1 for t in times if s <= t < s + 1.0) for s in range(0, 1000))
    assert 20 <= densest < 30
    # each copy keeps the burst: five seconds hold 20 or more
    assert sum(1 for s in range(0, 1000) if sum(1 for t in times if s <= t < s + 1.0) >= 20) == 5
    # a fraction beyond a whole number is one more copy, thinned
    assert 2 * 1020 < len(load_trace(p, scale=2.5, seed=1)) < 3 * 1020


def test_a_rate_curve_becomes_poisson_arrivals_with_sampled_lengths(tmp_path: Path) -> None:
    curve = write(tmp_path, "r.csv", "model,window_start_s,total_rate_rps,req_per_min,active_clients\n"
                                     "m,0,1,60,1\nm,600,0,0,1\nm,1200,2,120,1\nother,0,1,60,1\n")
    lengths = write(tmp_path, "l.csv", "arrival_s,prompt_tokens,output_tokens\n0,7,8\n")
    got = load_trace(curve, model="m", lengths=lengths, seed=3)
    assert got == load_trace(curve, model="m", lengths=lengths, seed=3)
    first = [a for a in got if a.t < 600]
    quiet = [a for a in got if 600 <= a.t < 1200]
    busy = [a for a in got if a.t >= 1200]
    assert not quiet and 500 < len(first) < 700 and 1050 < len(busy) < 1350
    assert {(a.prompt_tokens, a.output_tokens) for a in got} == {(7, 8)}
    with pytest.raises(TraceError, match="holds 2 models; choose one with --model"):
        load_trace(curve, lengths=lengths)
    with pytest.raises(TraceError, match="has no model 'x'"):
        load_trace(curve, model="x", lengths=lengths)


def test_the_shipped_trace_is_the_azure_conversation_trace() -> None:
    got = load_trace(shipped_trace_path())
    assert len(got) == 19_366
    assert got[-1].t == pytest.approx(3501.7, abs=0.1)


def test_the_shipped_traces_resolve_by_short_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--trace code`` is the shipped Azure code trace (8,819 rows), ``conv`` the conversation one,
    ``servegen`` the rate curve; a file of that name in the working directory wins, and any other
    name is a path."""
    monkeypatch.chdir(tmp_path)
    assert resolve_trace("conv") == shipped_trace_path()
    assert len(load_trace(resolve_trace("code"))) == 8_819
    curve = load_trace(resolve_trace("servegen"), model="mm-image", duration=600.0)
    assert curve and all(a.t < 600.0 for a in curve)
    for name, file in SHIPPED_TRACES.items():
        assert resolve_trace(name).name == file and resolve_trace(name).is_file()
    (tmp_path / "code").write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", encoding="utf-8")
    assert resolve_trace("code") == Path("code")
    assert resolve_trace("other.csv") == Path("other.csv")


# ------------------------------------------------------------------ formats and time units

def jsonl(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_azure_2024_timestamps_carry_an_offset_and_any_fraction(tmp_path: Path) -> None:
    p = write(tmp_path, "a24.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                   "2024-05-10 00:00:00.009930+00:00,2162,5\n"
                                   "2024-05-10 00:00:01+00:00,10,2\n"
                                   "2024-05-10T00:00:01.5Z,10,2\n"
                                   "2024-05-10 02:00:02.25+02:00,10,2\n"  # 00:00:02.25 UTC
                                   "2024-05-10 00:00:03.1234567,10,2\n")  # naive: read as UTC
    got = load_trace(p)
    assert [a.t for a in got] == pytest.approx([0.0, 0.99007, 1.49007, 2.24007, 3.113527])
    with pytest.raises(TraceError, match=r"a24\.csv: --time-unit ms does not apply to an Azure LLM "
                                         r"inference trace: its TIMESTAMP column holds dates"):
        load_trace(p, time_unit="ms")


def test_an_azure_trace_over_implausible_dates_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "a.csv", AZURE + "2024-11-16 18:15:51.0000000,10,1\n")
    with pytest.raises(TraceError, match=r"a\.csv: read 4 requests over 31,622,404 s \(366 days\) .*"
                                         r"check its TIMESTAMPs"):
        load_trace(p)


BURST = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
         "5,ChatGPT,472,18,490,Conversation log\n"
         "45,ChatGPT,1087,0,1087,Conversation log\n"
         "118,GPT-4,417,262,679,Conversation log\n"
         "120,ChatGPT,0,0,0,API log\n")


def test_burstgpt_is_read_in_seconds_and_its_failed_rows_refused_or_dropped(tmp_path: Path) -> None:
    p = write(tmp_path, "burst.csv", BURST)
    with pytest.raises(TraceError, match=r"burst\.csv:3: Response tokens is 0: a failed request, as "
                                         r"BurstGPT logs them \(2 such rows in the file\); drop them with "
                                         r"--drop-failed"):
        load_trace(p)
    notes: list[str] = []
    got = load_trace(p, drop_failed=True, note=notes.append)
    assert got == (Arrival(0.0, 472, 18), Arrival(113.0, 417, 262))
    assert notes == [f"{p}: dropped 2 failed requests (Response tokens 0; lines 3, 5), kept 2"]
    assert load_trace(p, drop_failed=True, time_unit="ms")[-1].t == pytest.approx(0.113)


def test_a_burstgpt_row_that_did_not_fail_is_still_checked(tmp_path: Path) -> None:
    p = write(tmp_path, "burst.csv", BURST.replace("472,18", "0,18"))
    with pytest.raises(TraceError, match=r"burst\.csv:2: Request tokens must be at least 1"):
        load_trace(p, drop_failed=True)


MOONCAKE = jsonl([
    {"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29]},
    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]},
    {"timestamp": 0, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14]},
    {"timestamp": 10535, "input_length": 672, "output_length": 26},
])


def test_mooncake_is_read_in_milliseconds_and_keeps_its_hash_ids(tmp_path: Path) -> None:
    got = load_trace(write(tmp_path, "mooncake_trace.jsonl", MOONCAKE))
    assert got == (Arrival(0.0, 6755, 500, (0, 1, 2)), Arrival(0.0, 7319, 490, (0, 14)),
                   Arrival(3.052, 7234, 794, (0, 28, 29)), Arrival(10.535, 672, 26))
    # copies made by --scale keep them
    assert {a.hash_ids for a in load_trace(write(tmp_path, "m.jsonl", MOONCAKE), scale=2)} == {
        (0, 1, 2), (0, 14), (0, 28, 29), ()}
    # told from the first object's keys, also without the extension
    assert load_trace(write(tmp_path, "m.txt", MOONCAKE)) == got
    assert [a.t for a in load_trace(write(tmp_path, "m.jsonl", MOONCAKE), time_unit="s")] == [
        0.0, 0.0, 3052.0, 10535.0]


@pytest.mark.parametrize("bad", ['"0,1"', "[0, -1]", "[0, 1.5]", "[true]"])
def test_hash_ids_must_be_a_list_of_whole_numbers(tmp_path: Path, bad: str) -> None:
    p = write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1, '
                                   f'"hash_ids": {bad}}}\n')
    with pytest.raises(TraceError, match=r"m\.jsonl:1: hash_ids must be a list of whole numbers >= 0"):
        load_trace(p)


def test_arrival_keeps_its_three_field_form_and_sorts_by_time_first() -> None:
    a = Arrival(1.0, 5, 5)
    assert a.hash_ids == () and a == Arrival(1.0, 5, 5, ())
    assert sorted([Arrival(2.0, 1, 1, (0,)), Arrival(1.0, 9, 9, (5,)), a]) == [
        a, Arrival(1.0, 9, 9, (5,)), Arrival(2.0, 1, 1, (0,))]


@pytest.mark.parametrize(("unit", "last"), [(None, 250.0), ("s", 250.0), ("ms", 0.25), ("us", 0.00025)])
def test_the_generic_formats_read_seconds_unless_told(tmp_path: Path, unit: str | None, last: float) -> None:
    csv = write(tmp_path, "g.csv", "timestamp,prompt_tokens,output_tokens\n0,1,1\n250,1,1\n")
    jl = write(tmp_path, "g.jsonl", jsonl([{"time": 0, "input_tokens": 1, "output_tokens": 1},
                                           {"time": 250, "input_tokens": 1, "output_tokens": 1}]))
    assert load_trace(csv, time_unit=unit)[-1].t == pytest.approx(last)
    assert load_trace(jl, time_unit=unit)[-1].t == pytest.approx(last)


def test_a_time_unit_that_is_not_one_is_named(tmp_path: Path) -> None:
    p = write(tmp_path, "g.csv", "arrival_s,prompt_tokens,output_tokens\n0,1,1\n")
    with pytest.raises(ValueError, match=r"--time-unit must be one of s, ms, us, got 'h'"):
        load_trace(p, time_unit="h")


# ------------------------------------------------------------------ plausibility

def ms_trap(tmp_path: Path, rows: int = 20_000, gap_ms: int = 175) -> Path:
    """A Mooncake trace whose fields were renamed to the generic ones: milliseconds, read as s."""
    return write(tmp_path, "renamed.jsonl", jsonl([
        {"timestamp": i * gap_ms, "prompt_tokens": 100, "output_tokens": 10} for i in range(rows)]))


def test_milliseconds_read_as_seconds_are_refused_with_the_way_out(tmp_path: Path) -> None:
    p = ms_trap(tmp_path)
    with pytest.raises(TraceError) as err:
        load_trace(p)
    assert str(err.value) == (
        f"{p}: read 20,000 requests over 3,499,825 s (40.5 days) at 0.00571 requests/s with times in "
        "seconds (a generic JSONL trace's default unit): implausible for a per-request trace (longer "
        "than 7 days at under 0.1 requests/s). The values look like milliseconds (in ms: 3,500 s "
        "(0.0405 days) at 5.71 requests/s): pass --time-unit ms; if they really are seconds, pass "
        "--time-unit s")
    got = load_trace(p, time_unit="ms")
    assert len(got) == 20_000 and got[-1].t == pytest.approx(3499.825)
    # a unit given is taken at its word
    assert load_trace(p, time_unit="s")[-1].t == 3_499_825.0


def test_a_trace_sparse_over_days_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "g.csv", "arrival_s,prompt_tokens,output_tokens\n"
              + "".join(f"{i * 28_800},1,1\n" for i in range(10)))  # 10 over 3 days
    with pytest.raises(TraceError, match=r"g\.csv: read 10 requests over 259,200 s \(3 days\) at 3\.86e-05 "
                                         r"requests/s .*longer than 1 day at under one request an hour\)\. "
                                         r"The values look like milliseconds"):
        load_trace(p)


def test_a_trace_too_dense_for_its_unit_is_refused(tmp_path: Path) -> None:
    # microsecond-spaced values in a Mooncake file (ms by default): 1,000 requests in a millisecond
    p = write(tmp_path, "m.jsonl", jsonl([{"timestamp": i / 1000, "input_length": 1, "output_length": 1}
                                          for i in range(1000)]))
    with pytest.raises(TraceError, match=r"m\.jsonl: read 1,000 requests over 0\.000999 s .* with times in "
                                         r"milliseconds \(a Mooncake trace's default unit\): implausible "
                                         r".*faster than 100,000 requests/s on average\)\. The values look "
                                         r"like seconds \(in s: 0\.999 s"):
        load_trace(p)
    assert load_trace(p, time_unit="s")[-1].t == pytest.approx(0.999)


def test_a_rate_curve_takes_no_time_unit_and_its_lengths_no_plausibility_check(tmp_path: Path) -> None:
    curve = write(tmp_path, "r.csv", "model,window_start_s,total_rate_rps,req_per_min,active_clients\n"
                                     "m,0,1,60,1\n")
    with pytest.raises(TraceError, match=r"r\.csv: --time-unit s does not apply to a rate curve: its "
                                         r"window_start_s column is seconds by name"):
        load_trace(curve, lengths=ms_trap(tmp_path), time_unit="s")
    got = load_trace(curve, lengths=ms_trap(tmp_path), seed=1)  # only its lengths are used
    assert got and {(a.prompt_tokens, a.output_tokens) for a in got} == {(100, 10)}
    with pytest.raises(TraceError, match=r"burst\.csv:3: Response tokens is 0"):
        load_trace(curve, lengths=write(tmp_path, "burst.csv", BURST))
    assert load_trace(curve, lengths=tmp_path / "burst.csv", drop_failed=True, seed=1)
