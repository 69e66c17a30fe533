"""Trace readers: every format, the transforms, and an error naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from escaler.sim.trace import Arrival, TraceError, load_trace, shipped_trace_path

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
