"""Pure pieces of the SLO API: merge patch, the 422 → 400 translation, DELETE's patch, the CLI flags."""

from __future__ import annotations

from typing import Any

import pytest

from escaler.cli.main import build_parser, main
from escaler.cli.sloapi import flags_from_args
from escaler.errors import ConnectionFailure, StatusError
from escaler.sloapi.errors import from_upstream, strip_spec
from escaler.sloapi.kinds import JOB, LLM
from escaler.sloapi.translate import clear_patch, merge
from tests.unit.sloapi_fakes import job_slo, llm_slo


@pytest.mark.parametrize("target, patch, want", [
    ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": 5}}, {"a": 1, "b": {"c": 5, "d": 3}}),
    ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
    ({"a": {"b": 1}}, {"a": [1, 2]}, {"a": [1, 2]}),
    ({"a": 1}, {"n": {"x": None, "y": 1}}, {"a": 1, "n": {"y": 1}}),
    (None, {"a": 1}, {"a": 1}),
], ids=["nested", "null-removes", "array-replaces", "new-object-drops-nulls", "no-target"])
def test_merge_is_rfc7396(target: Any, patch: Any, want: Any) -> None:
    assert merge(target, patch) == want


@pytest.mark.parametrize("text, want", [
    ("spec.bounds.max.type", "bounds.max.type"),
    ("Invalid value: 0: spec.ttft.targetMs in body should be greater than 0",
     "Invalid value: 0: ttft.targetMs in body should be greater than 0"),
    ("spec", ""),
    ("inspec.x", "inspec.x"),
], ids=["field", "message", "bare-spec", "not-a-prefix"])
def test_strip_spec(text: str, want: str) -> None:
    assert strip_spec(text) == want


@pytest.mark.parametrize("exc, status, message", [
    (StatusError(422, "Invalid", 'LLMSLORequirement.llm.escaler.io "cr-x" is invalid: spec.bounds: bad',
                 {"name": "cr-x", "causes": [{"field": "spec.bounds", "message": "bad"}]}),
     400, "bounds: bad"),
    (StatusError(422, "Invalid", '"cr-x" is invalid',
                 {"causes": [{"message": "Forbidden: spec is immutable"}]}),
     400, "Forbidden: spec is immutable"),
    (StatusError(422, "Invalid", '"cr-x" is invalid', {"causes": [{"field": f"spec.f{i}", "message": "m"}
                                                                  for i in range(12)]}),
     400, "; ".join([f"f{i}: m" for i in range(10)] + ["and 2 more"])),
    (StatusError(503, "ServiceUnavailable", '"cr-x"'), 502,
     "the Kubernetes API server answered 503 ServiceUnavailable"),
    (ConnectionFailure("reset"), 502, "the Kubernetes API server could not be reached; retry later"),
], ids=["one-cause", "no-field", "many-causes", "503", "connection"])
def test_from_upstream(exc: Exception, status: int, message: str) -> None:
    err = from_upstream(exc, "chat")  # type: ignore[arg-type]
    assert (err.status, err.message) == (status, message)
    assert "cr-x" not in err.message


def test_clear_patch() -> None:
    assert clear_patch(LLM, llm_slo("a", "r")) == {"spec": {"ttft": None, "otps": None}}
    assert clear_patch(LLM, llm_slo("a", "r", otps=None)) == {"spec": {"ttft": None}}
    assert clear_patch(LLM, llm_slo("a", "r", otps=None, ttft=None)) is None
    assert clear_patch(JOB, job_slo("a", "r")) is None


def test_cli_registered_with_defaults() -> None:
    parser, _ = build_parser()
    args = parser.parse_args(["slo-api"])
    flags = flags_from_args(args)
    assert (flags.host, flags.port, flags.auth, flags.namespace) == ("0.0.0.0", 8080, "token", "")
    assert flags.cert_file is None


@pytest.mark.parametrize("argv, message", [
    (["--bind-address=0"], "--bind-address: the SLO API cannot be disabled"),
    (["--cert-dir=/nonexistent"], "--cert-dir: /nonexistent/tls.crt does not exist"),
], ids=["disabled", "cert-dir"])
def test_cli_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slo-api", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--auth=basic"], ["--bind-address=nohost"]], ids=["auth", "bind"])
def test_cli_rejects_bad_values(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["slo-api", *argv])
    assert exc.value.code == 2
    assert argv[0].split("=")[0] in capsys.readouterr().err
