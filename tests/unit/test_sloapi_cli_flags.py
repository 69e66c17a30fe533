"""``escaler slo-api`` flags of issue 27 item 8: its own token audience and self-signed TLS."""

from __future__ import annotations

import pytest

from escaler.cli.main import build_parser
from escaler.cli.sloapi import SLO_API_AUDIENCE, UsageError, flags_from_args


def _flags(*args: str):  # type: ignore[no-untyped-def]
    parser, _ = build_parser()
    return flags_from_args(parser.parse_args(["slo-api", *args]))


def test_tokens_are_for_the_slo_apis_own_audience_by_default() -> None:
    assert _flags().token_audience == SLO_API_AUDIENCE == "escaler-slo-api"
    assert _flags("--token-audience", "escaler").token_audience == "escaler"  # while clients move
    with pytest.raises(UsageError, match="--token-audience: must not be empty"):
        _flags("--token-audience", "")


def test_self_signed_tls_is_asked_for_and_excludes_a_given_pair(tmp_path: object) -> None:
    flags = _flags("--self-signed-tls")
    assert flags.self_signed_tls and flags.cert_file is None  # the pair is made by run(), after logging
    with pytest.raises(UsageError, match="--self-signed-tls: only without --cert-dir"):
        _flags("--self-signed-tls", "--cert-dir", str(tmp_path))
