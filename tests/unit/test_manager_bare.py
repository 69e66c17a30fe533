"""``python -m escaler manager`` bare (issue 14): the webhook is served only when a certificate is
configured; with no webhook flag the manager runs without it and says how to enable it; an
explicit ``--webhook-port`` without a certificate is still refused (exit 2, naming the flags); and
the start-up summary says what is served where."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
from pathlib import Path

import pytest
from es_fakes import Cluster
from lease_fakes import InMemoryLeaseClient

from escaler.cli import manager as cli
from escaler.cli.main import build_parser, main
from escaler.runtime import Manager, ManagerOptions

ROOT = Path(__file__).resolve().parents[2]
CERT_FLAGS = ("--webhook-cert-dir", "--webhook-cert-file", "--webhook-key-file")


pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["bash", str(ROOT / "hack" / "webhook-certs.sh"), str(out)], check=True,
                   capture_output=True)
    return out


def parse(*argv: str) -> argparse.Namespace:
    parser, _ = build_parser()
    return parser.parse_args(["manager", *argv])


# --- flag resolution ------------------------------------------------------------------------------

# (id, argv builder over the cert dir, expected port, expected off reason: the name of its constant)
SERVED = [
    ("bare", lambda d: [], 0, "WEBHOOK_OFF_NO_CERT"),
    ("port-zero", lambda d: ["--webhook-port=0"], 0, "WEBHOOK_OFF_BY_FLAG"),
    ("port-zero-with-certs", lambda d: ["--webhook-port=0", "--webhook-cert-dir", str(d)], 0,
     "WEBHOOK_OFF_BY_FLAG"),
    ("cert-dir", lambda d: ["--webhook-cert-dir", str(d)], 9443, ""),
    ("cert-dir-and-port", lambda d: ["--webhook-cert-dir", str(d), "--webhook-port=10443"], 10443, ""),
    ("cert-files", lambda d: ["--webhook-cert-file", str(d / "tls.crt"), "--webhook-key-file",
                              str(d / "tls.key")], 9443, ""),
]


@pytest.mark.parametrize(("argv", "port", "reason"), [c[1:] for c in SERVED], ids=[c[0] for c in SERVED])
def test_webhook_resolution(certs: Path, argv: object, port: int, reason: str) -> None:
    args = parse(*argv(certs))  # type: ignore[operator]
    flags = cli.flags_from_args(args)
    assert flags.webhook_port == port
    if port:
        assert flags.webhook_cert_file == str(certs / "tls.crt")
        assert flags.webhook_key_file == str(certs / "tls.key")
    got = cli.resolve_webhook(args.webhook_port, args.webhook_cert_dir, args.webhook_cert_file,
                              args.webhook_key_file)
    assert (got.port, got.off_reason) == (port, getattr(cli, reason) if reason else "")
    assert (got.cert_file is None) == (port == 0) and (got.key_file is None) == (port == 0)


def test_bare_off_reason_says_how_to_enable_it() -> None:
    reason = cli.WEBHOOK_OFF_NO_CERT
    assert "hack/webhook-certs.sh" in reason
    assert all(flag in reason for flag in (*CERT_FLAGS, "--webhook-port"))


@pytest.mark.parametrize("port", [9443, 10443])
def test_explicit_port_without_certificate_exits_2_naming_the_flags(
    port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["manager", f"--webhook-port={port}", "--kubeconfig", str(tmp_path / "none")])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE
    assert err.startswith("escaler manager: error: ")
    assert f"--webhook-port={port} needs a serving certificate" in err
    assert all(flag in err for flag in CERT_FLAGS)


def test_bare_command_gets_past_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bare (no webhook flag): not a usage error; it goes on to connect (a missing kubeconfig → 1)."""
    assert main(["manager", "--kubeconfig", str(tmp_path / "none")]) == 1
    assert "needs a serving certificate" not in capsys.readouterr().err


def test_help_documents_the_webhook_rule() -> None:
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["manager"].format_help().split())
    assert "served only with a certificate" in text and "(default: 9443)" in text


# --- the start-up summary -------------------------------------------------------------------------


def _factory(opts: ManagerOptions) -> Manager:
    """The manager the flags ask for, on the in-process fake API (nothing is started)."""
    cluster = Cluster()
    lease = InMemoryLeaseClient() if opts.leader_election else None
    return Manager.for_testing(cluster.lw_factory, cluster.mapper, client=cluster.client,  # type: ignore[arg-type]
                               lease_client=lease, leader_election=opts.leader_election,
                               leader_election_namespace=opts.leader_election_namespace,
                               metrics_bind_address=opts.metrics_bind_address,
                               health_probe_bind_address=opts.health_probe_bind_address)


def summary(argv: list[str]) -> dict[str, str]:
    args = parse(*argv)
    flags = cli.flags_from_args(args)
    mgr = cli.build_manager(flags, _factory, api_authenticator=lambda _m: None)
    reason = cli.WEBHOOK_OFF_BY_FLAG if args.webhook_port == 0 else cli.WEBHOOK_OFF_NO_CERT
    return dict(cli.served_endpoints(flags, mgr, reason))


def test_summary_of_the_bare_manager() -> None:
    lines = summary([])
    assert list(lines) == ["api", "probes", "metrics", "webhook", "leader-election"]
    api = lines["api"]
    assert api.startswith("on :8082 (all interfaces), HTTPS with a self-signed certificate")
    assert "decisions API GET /decisions/{serviceId}" in api
    assert "signals API POST /signal/v1/namespaces/{namespace}/elasticscalers/{name}" in api
    assert lines["probes"] == "on :8081 (all interfaces): GET /healthz, GET /readyz"
    assert lines["metrics"] == "on :8080 (all interfaces): GET /metrics"
    assert lines["webhook"] == f"off: {cli.WEBHOOK_OFF_NO_CERT}"
    assert lines["leader-election"].startswith("off: ")


def test_summary_with_everything_configured(certs: Path) -> None:
    lines = summary(["--webhook-cert-dir", str(certs), "--api-bind-address=127.0.0.1:0", "--api-insecure",
                     "--metrics-bind-address=127.0.0.1:9090", "--metrics-secure",
                     "--health-probe-bind-address=0", "--leader-elect",
                     "--leader-election-namespace=escaler-system"])
    assert lines["api"].startswith("on 127.0.0.1:0 (an ephemeral port), plain HTTP (--api-insecure)")
    assert lines["probes"] == "off (--health-probe-bind-address=0)"
    assert lines["metrics"].startswith("on 127.0.0.1:9090: GET /metrics over HTTPS behind TokenReview")
    assert lines["webhook"].startswith(f"on :9443 (all interfaces), HTTPS with {certs / 'tls.crt'}")
    assert lines["leader-election"].startswith("on: Lease escaler-system/escaler-manager ")


def test_summary_with_the_api_off_and_webhook_off_by_flag() -> None:
    lines = summary(["--webhook-port=0", "--api-bind-address=0"])
    assert lines["api"] == "off (--api-bind-address=0)"
    assert lines["webhook"] == "off: --webhook-port=0"


def test_run_logs_the_summary_before_starting(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    started: list[Manager] = []
    real_build = cli.build_manager

    def build(flags: cli.ManagerFlags) -> Manager:
        mgr = real_build(flags, _factory, api_authenticator=lambda _m: None)
        monkeypatch.setattr(mgr, "start", lambda: started.append(mgr) or 0)
        return mgr

    monkeypatch.setattr(cli, "build_manager", build)
    assert main(["manager", "--log-format=json"]) == 0
    assert len(started) == 1
    docs = [json.loads(line) for line in io.StringIO(capsys.readouterr().err)]
    serving = {d["component"]: d["message"] for d in docs if d["message"].startswith("serving ")}
    assert list(serving) == ["api", "probes", "metrics", "webhook", "leader-election"]
    assert serving["webhook"] == f"serving webhook: off: {cli.WEBHOOK_OFF_NO_CERT}"
