"""``escaler simulate``: every flag documented, bad input named, the same inputs → the same bytes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from escaler.cli.main import build_parser, main
from escaler.sim.runner import POLICIES


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
    assert ("--policy: want a comma list of apa, slo, flow, hpa, kpa, oracle, predictive, flow-standby, "
            "flow-standby-wake, got 'apa,nope'") in err


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
    assert "| policy | SLO attainment |" in summary
    heads = ("apa beats", "apa does NOT beat", "no verdict on apa vs")
    assert any(f"{head} hpa" in summary for head in heads)


def test_a_shipped_trace_by_short_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--trace code`` (docs/simulator.md's commands) replays the shipped Azure code trace."""
    monkeypatch.chdir(tmp_path)
    args = ["simulate", "--trace", "code", "--duration", "120", "--policy", "hpa", "--no-plots",
            "--no-progress", "--out", str(tmp_path / "o")]
    assert main(args) == 0
    settings = json.loads((tmp_path / "o" / "summary.json").read_text())["settings"]
    assert settings["trace"] == "AzureLLMInferenceTrace_code.csv"


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


def busy_trace(tmp_path: Path, rows: int) -> Path:
    """8 requests/s of 6,000-token prompts: more than one replica of work from the start (the default
    profile prefills 25,000 tokens/s)."""
    t = tmp_path / "busy.csv"
    t.write_text("arrival_s,prompt_tokens,output_tokens\n"
                 + "".join(f"{i * 0.125:.3f},6000,{40 + i % 80}\n" for i in range(rows)))
    return t


def test_a_report_carries_the_fixed_fleet_and_the_bound_and_starts_in_steady_state(tmp_path: Path) -> None:
    t = busy_trace(tmp_path, 800)
    args = ["simulate", "--trace", str(t), "--policy", "apa,hpa", "--no-progress", "--no-plots",
            "--target", "4", "--max-replicas", "16"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    settings, refs = summary["settings"], summary["references"]
    assert settings["initial_fleet"].startswith("steady state") and settings["initial_replicas"] > 1
    fixed, bound = refs["cheapest_fixed"], refs["lower_bound"]
    assert fixed["n"] is not None and fixed["attainment"] >= 0.99 and fixed["tried"][str(fixed["n"])] >= 0.99
    assert str(fixed["n"] - 1) in fixed["tried"] and fixed["tried"][str(fixed["n"] - 1)] < 0.99
    assert bound["reachable"] and 0 < bound["replica_hours"] <= fixed["replica_hours"]
    for row in summary["policies"]:
        assert row["x_bound"] == pytest.approx(row["replica_hours"] / bound["replica_hours"], abs=2e-3)
    assert any("the cheapest fixed fleet" in v for v in summary["verdicts"])
    md = (tmp_path / "a" / "summary.md").read_text()
    assert f"- cheapest fixed fleet: {fixed['n']} replicas" in md and "- lower bound (no policy" in md
    # a given initial fleet is said so
    assert main([*args, "--initial-replicas", "1", "--out", str(tmp_path / "b")]) == 0
    given = json.loads((tmp_path / "b" / "summary.json").read_text())["settings"]
    assert given["initial_fleet"] == "given (--initial-replicas)" and given["initial_replicas"] == 1


def test_an_unreachable_goal_is_said_and_no_ratio_printed(tmp_path: Path) -> None:
    t = tmp_path / "heavy.csv"  # 40 requests/s of 0.25 s prefill: 10 replicas of work, capped at 2
    t.write_text("arrival_s,prompt_tokens,output_tokens\n"
                 + "".join(f"{i * 0.025:.3f},3000,5\n" for i in range(2400)))
    out = tmp_path / "o"
    assert main(["simulate", "--trace", str(t), "--policy", "apa", "--no-progress", "--no-plots",
                 "--max-replicas", "2", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["references"]["lower_bound"] == {**summary["references"]["lower_bound"],
                                                    "reachable": False, "replica_hours": None}
    assert summary["references"]["cheapest_fixed"]["n"] is None
    assert summary["policies"][0]["x_bound"] is None
    said = summary["verdicts"]
    assert any(v.startswith("the 99 % goal is out of reach even for the lower bound") for v in said)
    assert "out of reach for any policy" in (out / "summary.md").read_text()


def test_tuned_baselines_report_the_best_point_of_their_sweep(tmp_path: Path) -> None:
    t = busy_trace(tmp_path, 400)
    out = tmp_path / "o"
    assert main(["simulate", "--trace", str(t), "--policy", "hpa,kpa", "--tune-baselines", "--no-progress",
                 "--no-plots", "--max-replicas", "16", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["tuned_baselines"] == ["hpa", "kpa", "apa"]
    for name, per_target in (("hpa", 1), ("kpa", 3)):
        detail = json.loads((out / f"{name}.json").read_text())
        sweep, row = detail["sweep"], detail["summary"]
        # six targets (fractions of the max batch 256), kpa x 3 delays; then halves of the smallest
        # while the best run sits on it
        assert {p["target"] for p in sweep[:6 * per_target]} == {32, 64, 96, 128, 192, 256}
        below = [p["target"] for p in sweep[6 * per_target:]]
        assert len(below) % per_target == 0 and set(below) <= {16, 8, 4, 2, 1}
        met = [p for p in sweep if p["attainment"] >= 0.99]
        best = (min(met, key=lambda p: p["replica_hours"]) if met
                else max(sweep, key=lambda p: (p["attainment"], -p["replica_hours"])))
        assert row["replica_hours"] == best["replica_hours"] and row["attainment"] == best["attainment"]
        assert row["tuned"]["target"] == best["target"]
    kpa_sweep = json.loads((out / "kpa.json").read_text())["sweep"]
    assert {p["scale_down_delay_s"] for p in kpa_sweep} == {0, 120, 300}


def test_flow_runs_in_the_default_set_and_writes_every_decision_in_words(tmp_path: Path) -> None:
    t = busy_trace(tmp_path, 2400)  # 300 s at 8 requests/s
    args = ["simulate", "--trace", str(t), "--policy", "flow,hpa", "--no-progress", "--no-plots",
            "--target", "4", "--max-replicas", "16", "--out", str(tmp_path / "a")]
    assert main(args) == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    flow = next(r for r in summary["policies"] if r["policy"] == "flow")
    assert flow["unfinished"] == 0 and flow["oscillations"] == 0
    assert any(v.startswith("flow ") and "hpa" in v for v in summary["verdicts"])
    lines = (tmp_path / "a" / "flow-decisions.jsonl").read_text().splitlines()
    decisions = [json.loads(x) for x in lines]
    assert [d["t"] for d in decisions][:3] == [30.0, 60.0, 90.0]
    # the first poll holds (no full minute of rates yet); then every step is said
    assert decisions[0]["held"] and "token rates missing" in decisions[0]["steps"][0]
    later = decisions[-1]
    assert later["steps"][0].startswith("work: ") and any(s.startswith("need: ") for s in later["steps"])
    assert set(later["signals"]) >= {"work", "backlog", "planned", "utilization", "headroom", "need"}
    assert "flow" in POLICIES
