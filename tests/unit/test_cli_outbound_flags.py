"""``--outbound-workers`` and ``--outbound-per-namespace``: defaults, refusals naming the flag, and
the values reaching the ElasticScaler controller's outbound executor."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from es_fakes import Cluster

from escaler.cli import manager as cli
from escaler.cli.main import build_parser
from escaler.runtime import Manager
from escaler.runtime.executor import KeyedExecutor


def parse(*argv: str) -> argparse.Namespace:
    parser, _ = build_parser()
    return parser.parse_args(["manager", "--webhook-port=0", *argv])


def test_defaults() -> None:
    flags = cli.flags_from_args(parse())
    assert (flags.outbound_workers, flags.outbound_per_namespace) == (16, 4)


@pytest.mark.parametrize("flag", ["--outbound-workers", "--outbound-per-namespace"])
@pytest.mark.parametrize("value", ["0", "-1", "x"], ids=["zero", "negative", "not-a-number"])
def test_bad_values_exit_2_naming_the_flag(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(f"{flag}={value}")
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


def test_values_reach_the_elasticscaler_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "setup_elasticscaler", lambda mgr, **kw: seen.update(kw))
    flags = cli.flags_from_args(parse("--outbound-workers=3", "--outbound-per-namespace=2"))
    cluster = Cluster()
    cli.register_reconcilers(Manager.for_testing(cluster.lw_factory, cluster.mapper), flags)
    outbound = seen["outbound"]
    assert isinstance(outbound, KeyedExecutor)
    assert (outbound.workers, outbound.per_group) == (3, 2)


def test_help_shows_both_flags_with_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--help")
    flat = " ".join(capsys.readouterr().out.split())
    assert "--outbound-workers N" in flat and "(default: 16)" in flat
    assert "--outbound-per-namespace N" in flat and "(default: 4)" in flat
