"""``escaler simulate``: every flag documented, bad input named, the same inputs → the same bytes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from escaler.cli.main import build_parser, main


def _simulate_parser() -> argparse.ArgumentParser:
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["simulate"]


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    p = _simulate_parser()
    flags = [a for a in p._actions if a.option_strings and a.dest != "help"]
    assert len(flags) >= 20
    for a in flags:
        assert a.help and len(a.help) > 3, a.option_strings
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    for a in flags:
        assert a.option_strings[0] in out


def trace(tmp_path: Path, rows: int = 400) -> Path:
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens\n"
                 + "".join(f"{i * 0.25:.2f},{200 + 37 * i % 800},{5 + 11 * i % 60}\n" for i in range(rows)))
    return p


def test_a_malformed_line_fails_with_the_file_and_line(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,10\n1,ten,10\n")
    assert main(["simulate", "--trace", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: prompt_tokens must be a number, got 'ten'" in err


def test_a_bad_profile_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = tmp_path / "p.yaml"
    prof.write_text("max_batch: 0\nwarp_speed: 9\n")
    assert main(["simulate", "--trace", str(trace(tmp_path)), "--profile", str(prof),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "warp_speed: unknown field" in err


def test_a_bad_flag_value_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--policy", "apa,nope", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--policy: want a comma list of apa, slo, hpa, kpa, oracle, predictive, got 'apa,nope'" in err


def test_same_trace_seed_and_policy_give_byte_identical_json(tmp_path: Path) -> None:
    t = trace(tmp_path)
    args = ["simulate", "--trace", str(t), "--policy", "apa,hpa,kpa,slo,oracle", "--no-progress",
            "--target", "4", "--max-replicas", "8"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--no-plots", "--out", str(tmp_path / "b")]) == 0
    for name in ("summary.json", "apa.json", "hpa.json", "kpa.json", "slo.json", "oracle.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    for png in ("replicas.png", "ttft.png", "ttft_cdf.png"):
        assert (tmp_path / "a" / png).stat().st_size > 5_000
    summary = (tmp_path / "a" / "summary.md").read_text()
    assert "| policy | SLO attainment |" in summary and "beat" in summary


def test_time_unit_reaches_the_loader_and_the_settings(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    ms = tmp_path / "ms.jsonl"  # 400 requests 1.728 s apart, in milliseconds: 8 days read as seconds
    ms.write_text("".join(f'{{"timestamp": {i * 1728}, "prompt_tokens": 200, "output_tokens": 20}}\n'
                          for i in range(400)))
    args = ["simulate", "--trace", str(ms), "--policy", "apa", "--no-plots", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "The values look like milliseconds" in err and "pass --time-unit ms" in err
    assert main([*args, "--time-unit", "ms", "--out", str(tmp_path / "b")]) == 0
    settings = json.loads((tmp_path / "b" / "summary.json").read_text())["settings"]
    assert settings["time_unit"] == "ms" and settings["requests"] == 400
    with pytest.raises(SystemExit) as exc:
        main([*args, "--time-unit", "h", "--out", str(tmp_path / "c")])
    assert exc.value.code == 2
    assert "--time-unit: invalid choice: 'h'" in capsys.readouterr().err


def test_time_unit_on_an_azure_trace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--time-unit", "s", "--out", str(tmp_path / "o")]) == 2
    assert "--time-unit s does not apply to an Azure LLM inference trace" in capsys.readouterr().err


def test_drop_failed_reaches_the_loader_and_says_what_it_dropped(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    burst = tmp_path / "burst.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     + "".join(f"{i},ChatGPT,300,{0 if i == 7 else 25},325,Conversation log\n"
                               for i in range(200)))
    args = ["simulate", "--trace", str(burst), "--policy", "apa", "--no-plots", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 2
    assert f"{burst}:9: Response tokens is 0" in capsys.readouterr().err
    assert main([*args, "--drop-failed", "--out", str(tmp_path / "b")]) == 0
    note = f"escaler simulate: {burst}: dropped 1 failed request (Response tokens 0; line 9), kept 199"
    assert note in capsys.readouterr().err
