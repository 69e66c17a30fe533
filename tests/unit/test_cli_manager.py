"""``python -m escaler manager``: flags (defaults, help, usage errors naming the flag), webhook
certificate flags, logging, and a manager built from flags serving its webhook."""

from __future__ import annotations

import argparse
import http.client
import io
import json
import logging
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from es_fakes import Cluster
from fakeapi import wait_until
from runtime_fakes import http_get
from webhook_samples import review_body, sample

from escaler.cli import manager as cli
from escaler.cli.flags import duration_seconds
from escaler.cli.logging_setup import setup_logging
from escaler.cli.main import build_parser, main
from escaler.runtime import (
    AccessDecision,
    Manager,
    ManagerOptions,
    ResourceAttributes,
    UserInfo,
)
from escaler.runtime.servingcerts import SecretRef

ROOT = Path(__file__).resolve().parents[2]
FLAGS = [
    "--kubeconfig",
    "--namespace",
    "--leader-elect",
    "--leader-election-id",
    "--leader-election-namespace",
    "--metrics-bind-address",
    "--health-probe-bind-address",
    "--metrics-trigger-poll-interval",
    "--min-poll-interval",
    "--status-refresh-seconds",
    "--malloc-trim-interval",
    "--max-concurrent-reconciles",
    "--webhook-port",
    "--webhook-cert-dir",
    "--webhook-cert-file",
    "--webhook-key-file",
    "--api-bind-address",
    "--api-cert-dir",
    "--allowed-endpoint-hosts",
    "--allow-endpoint-networks",
    "--controllers",
    "--serving-cert-secret",
    "--serving-cert-dns-names",
    "--webhook-configuration",
    "--serving-cert-ca-configmap",
    "--log-format",
    "--unsafe-test-clock-file",
]


pytestmark = pytest.mark.usefixtures("restore_logging")


def parse(*argv: str) -> argparse.Namespace:
    parser, _ = build_parser()
    return parser.parse_args(["manager", *argv])


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(
        ["bash", str(ROOT / "hack" / "webhook-certs.sh"), str(out)], check=True, capture_output=True
    )
    return out


def test_help_lists_every_flag_with_its_default() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "escaler", "manager", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    flat = " ".join(out.split())
    for flag in FLAGS:
        assert flag in out
    for default in (":8080", ":8081", ":8082", "30s", "9443", "escaler-manager", "json"):
        assert f"(default: {default})" in flat
    assert flat.count("(default:") >= len(FLAGS)


def test_defaults() -> None:
    flags = cli.flags_from_args(parse("--webhook-port=0"))
    assert flags == cli.ManagerFlags(
        kubeconfig=None,
        namespace="",
        leader_elect=False,
        leader_election_id="escaler-manager",
        leader_election_namespace="",
        metrics_bind_address=":8080",
        health_probe_bind_address=":8081",
        metrics_trigger_poll_interval=30.0,
        min_poll_interval=5.0,
        max_concurrent_reconciles=8,
        webhook_port=0,
        webhook_cert_file=None,
        webhook_key_file=None,
        api_bind_address=":8082",
        api_cert_file=None,
        api_key_file=None,
        allowed_endpoint_hosts=(),
        allow_endpoint_networks=(),
        log_format="json",
        log_level="info",
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("500ms", 0.5),
        ("0", 0.0),
        ("45", 45.0),
        ("1.5s", 1.5),
    ],
    ids=["seconds", "minutes", "compound", "millis", "zero-off", "plain-seconds", "fraction"],
)
def test_duration(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


BAD_FLAGS = [
    ("poll-interval-unit", ["--metrics-trigger-poll-interval", "3x"], "--metrics-trigger-poll-interval"),
    ("poll-interval-negative", ["--metrics-trigger-poll-interval=-5s"], "--metrics-trigger-poll-interval"),
    ("reconciles-zero", ["--max-concurrent-reconciles", "0"], "--max-concurrent-reconciles"),
    ("webhook-port-range", ["--webhook-port", "70000"], "--webhook-port"),
    ("metrics-bind", ["--metrics-bind-address", "8080"], "--metrics-bind-address"),
    ("probe-bind", ["--health-probe-bind-address", "localhost"], "--health-probe-bind-address"),
    ("api-bind", ["--api-bind-address", ":http"], "--api-bind-address"),
    ("allowed-hosts", ["--allowed-endpoint-hosts", "ok.example,bad host"], "--allowed-endpoint-hosts"),
    ("allow-networks", ["--allow-endpoint-networks", "127.0.0.1/8"], "--allow-endpoint-networks"),
    ("log-format", ["--log-format", "xml"], "--log-format"),
]


@pytest.mark.parametrize(("argv", "flag"), [c[1:] for c in BAD_FLAGS], ids=[c[0] for c in BAD_FLAGS])
def test_invalid_flag_exits_2_naming_it(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["manager", "--webhook-port=0", *argv])
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["manager", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("escaler manager: error: ")
    return err


def test_webhook_without_certificate_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # an explicit port only: the bare command runs without the webhook (test_manager_bare.py)
    err = _usage_error(["--webhook-port=9443"], capsys)
    assert "--webhook-port=9443 needs a serving certificate" in err and "--webhook-cert-dir" in err


def test_cert_file_without_key_refused(certs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--webhook-cert-file needs --webhook-key-file" in _usage_error(
        ["--webhook-cert-file", str(certs / "tls.crt")], capsys
    )


def test_cert_dir_and_files_exclusive(certs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "mutually exclusive" in _usage_error(
        [
            "--webhook-cert-dir",
            str(certs),
            "--webhook-cert-file",
            str(certs / "tls.crt"),
            "--webhook-key-file",
            str(certs / "tls.key"),
        ],
        capsys,
    )


def test_cert_dir_without_files_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert f"--webhook-cert-dir: {tmp_path}/tls.crt does not exist" in _usage_error(
        ["--webhook-cert-dir", str(tmp_path)], capsys
    )


def test_unloadable_cert_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tls.crt").write_text("x")
    (tmp_path / "tls.key").write_text("y")
    assert "--webhook-cert-dir: cannot load" in _usage_error(["--webhook-cert-dir", str(tmp_path)], capsys)


def test_leader_election_needs_namespace_outside_cluster(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _usage_error(
        [
            "--webhook-port=0",
            "--leader-elect",
            "--kubeconfig",
            str(tmp_path / "none"),
            "--log-format=console",
        ],
        capsys,
    )
    assert "--leader-election-namespace: required" in err


def test_missing_kubeconfig_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manager", "--webhook-port=0", "--kubeconfig", str(tmp_path / "none")]) == 1


def test_cert_dir_and_files_resolve(certs: Path) -> None:
    by_dir = cli.flags_from_args(parse("--webhook-cert-dir", str(certs)))
    by_files = cli.flags_from_args(
        parse("--webhook-cert-file", str(certs / "tls.crt"), "--webhook-key-file", str(certs / "tls.key"))
    )
    assert by_dir.webhook_cert_file == by_files.webhook_cert_file == str(certs / "tls.crt")
    assert by_dir.webhook_key_file == by_files.webhook_key_file == str(certs / "tls.key")


def test_allowed_hosts_parsed() -> None:
    flags = cli.flags_from_args(
        parse("--webhook-port=0", "--allowed-endpoint-hosts", "Prometheus.Monitoring, *.svc.cluster.local")
    )
    assert flags.allowed_endpoint_hosts == ("prometheus.monitoring", "*.svc.cluster.local")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_built_manager_serves_webhook_with_allowed_hosts(certs: Path) -> None:
    port = free_port()
    flags = cli.flags_from_args(
        parse(
            "--webhook-cert-dir",
            str(certs),
            f"--webhook-port={port}",
            "--health-probe-bind-address=127.0.0.1:0",
            "--metrics-bind-address=0",
            "--api-bind-address=0",
            "--allowed-endpoint-hosts=prometheus.monitoring",
        )
    )

    def factory(opts: ManagerOptions) -> Manager:
        cluster = Cluster()
        return Manager.for_testing(
            cluster.lw_factory, cluster.mapper, client=cluster.client,  # type: ignore[arg-type]
            health_probe_bind_address=opts.health_probe_bind_address,
        )

    mgr = cli.build_manager(flags, factory)
    stop = threading.Event()
    codes: list[int] = []
    t = threading.Thread(target=lambda: codes.append(mgr.start(stop)), daemon=True)
    t.start()
    try:
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))

        def post(obj: dict[str, Any]) -> dict[str, Any]:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
            conn.request("POST", "/validate-elasticscaler-io-v1alpha1-elasticscaler", body=review_body(obj))
            doc: dict[str, Any] = json.loads(conn.getresponse().read())
            conn.close()
            return doc["response"]

        deadline = time.monotonic() + 10
        while True:
            try:
                assert post(sample("elasticscaler"))["allowed"] is True
                break
            except (ConnectionRefusedError, ssl.SSLError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        other = sample(
            "elasticscaler",
            {"spec.trigger.metricsTrigger.metrics[3].externalServer.endpoint": "http://evil.example:9090"},
        )
        denied = post(other)
        assert denied["allowed"] is False and "--allowed-endpoint-hosts" in denied["status"]["message"]
        # the manager's PromQL confinement (default --promql-namespace-label) reaches its webhook
        query = "spec.trigger.metricsTrigger.metrics[3].externalServer.query"
        stolen = post(sample("elasticscaler", {query: 'sum(x{namespace="other"})'}))
        message = stolen["status"]["message"]
        assert stolen["allowed"] is False and query in message
        assert "every series selector must hold" in message
        probe_port = mgr.health_probe_port
        assert probe_port is not None
        status, _body, _ = http_get(probe_port, "/readyz/webhook")
        assert status == 200
    finally:
        stop.set()
        t.join(30)
    assert codes == [0]


def test_json_log_lines_carry_reconcile_context() -> None:
    out = io.StringIO()
    handler = setup_logging("json", "info", stream=out)
    try:
        log = logging.getLogger("escaler.test")
        log.info(
            "scaled %s",
            "up",
            extra={
                "controller": "elasticscaler",
                "namespace": "team",
                "object_name": "llama",
                "reconcile_id": "r-1",
                "replicas": 4,
            },
        )
        log.debug("hidden")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 2
    first = lines[0]
    assert first["level"] == "info" and first["logger"] == "escaler.test" and first["message"] == "scaled up"
    assert (
        first["controller"] == "elasticscaler" and first["namespace"] == "team" and first["name"] == "llama"
    )
    assert first["reconcileID"] == "r-1" and first["replicas"] == 4
    assert first["time"].endswith("Z")
    assert "RuntimeError: boom" in lines[1]["error"]


def test_console_log_lines() -> None:
    out = io.StringIO()
    handler = setup_logging("console", "debug", stream=out)
    try:
        logging.getLogger("escaler.test").debug("hello", extra={"namespace": "team"})
    finally:
        logging.getLogger().removeHandler(handler)
    line = out.getvalue().strip()
    assert " DEBUG   escaler.test hello namespace=team" in line


def _testing_factory(opts: ManagerOptions) -> Manager:
    # the reconcilers write through a client: a fake one over the in-process fake API
    cluster = Cluster()
    return Manager.for_testing(cluster.lw_factory, cluster.mapper, client=cluster.client)  # type: ignore[arg-type]


class _OneToken:
    def authenticate(self, token: str) -> UserInfo | None:
        return UserInfo("pusher") if token == "t" else None

    def authorize(self, user: UserInfo, attributes: ResourceAttributes) -> AccessDecision:
        return AccessDecision(attributes.namespace == "default", "only default")


def test_built_manager_serves_the_api_over_tls_with_registered_routes(certs: Path) -> None:
    flags = cli.flags_from_args(parse("--webhook-port=0", "--api-bind-address=127.0.0.1:0",
                                      "--api-cert-dir", str(certs)))
    assert flags.api_cert_file == str(certs / "tls.crt") and flags.api_key_file == str(certs / "tls.key")
    mgr = cli.build_manager(flags, _testing_factory, api_authenticator=lambda _m: _OneToken())
    server = mgr.api_server
    assert server is not None and server.tls
    # the ElasticScaler reconciler registered its SignalTrigger push route during setup
    assert ("POST", "/signal/v1/namespaces/{namespace}/elasticscalers/{name}") in server.routes
    stop = threading.Event()
    codes: list[int] = []
    t = threading.Thread(target=lambda: codes.append(mgr.start(stop)), daemon=True)
    t.start()
    try:
        assert server.serving.wait(10) and server.port is not None
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))

        def post(ns: str, token: str) -> tuple[int, Any]:
            assert server.port is not None
            conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
            conn.request("POST", f"/signal/v1/namespaces/{ns}/elasticscalers/llama", body=b'{"active":true}',
                         headers={"Authorization": f"Bearer {token}"})
            resp = conn.getresponse()
            doc = json.loads(resp.read())
            conn.close()
            return resp.status, doc

        # authenticated and authorized: the handler runs, and there is no such scaler
        status, doc = post("default", "t")
        assert status == 404 and "llama" in doc["error"]["message"]
        assert post("default", "x")[0] == 401
        assert post("prod", "t")[0] == 403
    finally:
        stop.set()
        t.join(30)
    assert codes == [0]


def test_api_disabled_means_no_api_server() -> None:
    flags = cli.flags_from_args(parse("--webhook-port=0", "--api-bind-address=0", "--api-cert-dir=/nope"))
    assert flags.api_cert_file is None
    assert cli.build_manager(flags, _testing_factory).api_server is None


def test_api_cert_dir_without_files_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert f"--api-cert-dir: {tmp_path}/tls.crt does not exist" in _usage_error(
        ["--webhook-port=0", "--api-cert-dir", str(tmp_path)], capsys
    )


def test_api_default_authenticator_needs_a_cluster_connection() -> None:
    flags = cli.flags_from_args(parse("--webhook-port=0", "--api-bind-address=127.0.0.1:0"))
    with pytest.raises(ValueError, match=r"--api-bind-address: .*TokenReview"):
        cli.build_manager(flags, _testing_factory)


def test_unreachable_api_server_at_setup_is_a_clear_error_not_a_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kc = tmp_path / "kubeconfig"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    cli.add_parser(sub)
    args = parser.parse_args(["manager", f"--kubeconfig={kc}", "--webhook-port=0", "--api-bind-address=0",
                              "--metrics-bind-address=0", "--health-probe-bind-address=0"])
    with caplog.at_level(logging.ERROR):
        assert cli.run(args) == 1
    assert "cannot reach the API server to set up the controllers" in caplog.text


def test_status_refresh_seconds_is_off_by_default_and_takes_a_duration() -> None:
    assert cli.flags_from_args(parse("--webhook-port=0")).status_refresh_seconds == 0.0
    flags = cli.flags_from_args(parse("--webhook-port=0", "--status-refresh-seconds=5m"))
    assert flags.status_refresh_seconds == 300.0


@pytest.mark.parametrize("text", ["0", "0s", "-1s", "soon"])
def test_min_poll_interval_must_be_a_positive_duration(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--webhook-port=0", f"--min-poll-interval={text}")
    assert "--min-poll-interval" in capsys.readouterr().err


def test_min_poll_interval_is_read() -> None:
    assert cli.flags_from_args(parse("--webhook-port=0", "--min-poll-interval=2s")).min_poll_interval == 2.0


# --- --unsafe-test-clock-file (escaler.testclock): tests only, never silent ------------------------


@pytest.fixture
def clock_file(tmp_path: Path) -> Path:
    path = tmp_path / "clock"
    path.write_text("90", encoding="utf-8")
    return path


def test_the_test_clock_is_off_by_default() -> None:
    flags = cli.flags_from_args(parse("--webhook-port=0"))
    assert flags.unsafe_test_clock_file is None
    assert flags.manager_options().clock is None


def test_the_test_clock_flag_names_its_file_and_says_it_is_for_tests_only() -> None:
    parser, _ = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["manager"].format_help().split())
    assert "--unsafe-test-clock-file PATH FOR TESTS ONLY, never in production" in text
    assert "a smaller one or garbage is refused" in text


def test_the_test_clock_file_is_read_into_the_flags(clock_file: Path) -> None:
    flags = cli.flags_from_args(parse("--webhook-port=0", f"--unsafe-test-clock-file={clock_file}"))
    assert flags.unsafe_test_clock_file == str(clock_file)


BAD_CLOCK_FILES = [
    ("missing", None, "cannot read the test clock file"),
    ("garbage", "in a minute", "'in a minute' is not a number of seconds"),
    ("negative", "-30", "negative"),
    ("nan", "nan", "not a finite number"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in BAD_CLOCK_FILES],
                         ids=[c[0] for c in BAD_CLOCK_FILES])
def test_a_test_clock_file_without_a_valid_offset_exits_2_naming_the_flag_and_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, message: str) -> None:
    path = tmp_path / "clock"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    err = _usage_error(["--webhook-port=0", f"--unsafe-test-clock-file={path}"], capsys)
    assert f"--unsafe-test-clock-file: {path}: " in err and message in err
    assert "only moves forward" in err


def _log_lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_the_test_clock_is_announced_by_a_warning_before_anything_else(
        tmp_path: Path, clock_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The manager gets as far as connecting (a missing kubeconfig: exit 1), and the first thing it
    logged is the WARNING naming the flag, the file and the offset."""
    code = main(["manager", "--webhook-port=0", "--kubeconfig", str(tmp_path / "none"),
                 f"--unsafe-test-clock-file={clock_file}"])
    assert code == 1
    lines = _log_lines(capsys.readouterr().err)
    first = lines[0]
    assert first["level"] == "warning" and first["message"].startswith("UNSAFE TEST CLOCK: ")
    assert f"--unsafe-test-clock-file={clock_file}" in first["message"]
    assert "90 s ahead of real time" in first["message"]
    assert "never run a production manager" in first["message"]
    assert (first["clockFile"], first["offset"]) == (str(clock_file), 90.0)


def test_without_the_flag_nothing_mentions_a_test_clock(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manager", "--webhook-port=0", "--kubeconfig", str(tmp_path / "none")]) == 1
    assert "TEST CLOCK" not in capsys.readouterr().err


def test_the_built_manager_runs_on_the_test_clock_and_a_file_step_moves_it(
        clock_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    flags = cli.flags_from_args(parse("--webhook-port=0", "--api-bind-address=0",
                                      f"--unsafe-test-clock-file={clock_file}"))
    with caplog.at_level(logging.WARNING, logger="escaler.manager"):
        watcher = cli.open_test_clock(flags)
    assert watcher is not None
    try:
        assert "UNSAFE TEST CLOCK" in caplog.text

        def factory(opts: ManagerOptions) -> Manager:
            cluster = Cluster()
            return Manager.for_testing(cluster.lw_factory, cluster.mapper, client=cluster.client,  # type: ignore[arg-type]
                                       clock=opts.clock)

        mgr = cli.build_manager(flags, factory, api_authenticator=lambda _m: None, clock=watcher.clock)
        assert mgr.clock is watcher.clock and watcher.clock.offset == 90.0
        before = mgr.clock.now()
        tmp = clock_file.with_suffix(".tmp")
        tmp.write_text("150", encoding="utf-8")
        tmp.replace(clock_file)
        deadline = time.monotonic() + 5.0  # the watcher thread polls every 50 ms (real time)
        while watcher.clock.offset != 150.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert watcher.clock.offset == 150.0
        assert (mgr.clock.now() - before).total_seconds() >= 60.0
    finally:
        watcher.stop()


def test_a_test_clock_file_spoiled_after_the_flags_were_checked_exits_2(
        tmp_path: Path, clock_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--webhook-port=0", "--kubeconfig", str(tmp_path / "none"),
                 f"--unsafe-test-clock-file={clock_file}")
    flags = cli.flags_from_args(args)
    clock_file.write_text("later", encoding="utf-8")
    with pytest.raises(cli.UsageError, match=r"--unsafe-test-clock-file: .*'later' is not a number"):
        cli.open_test_clock(flags)


# ------------------------------------------------------------------ --serving-cert-secret

SERVING = ("--serving-cert-secret=escaler-system/escaler-serving-cert",
           "--serving-cert-dns-names=escaler-manager.escaler-system.svc,escaler-webhook.escaler-system.svc")


@pytest.mark.parametrize(("argv", "message"), [
    (["--serving-cert-secret=escaler-system/x"], "--serving-cert-secret needs --serving-cert-dns-names"),
    (["--serving-cert-dns-names=a.b"], "--serving-cert-dns-names needs --serving-cert-secret"),
    (["--webhook-configuration=hook"], "--webhook-configuration needs --serving-cert-secret"),
    (["--serving-cert-ca-configmap=ca"], "--serving-cert-ca-configmap needs --serving-cert-secret"),
    (["--serving-cert-secret=x", "--serving-cert-dns-names=a"],
     "--serving-cert-secret: 'x' must be NAMESPACE/NAME"),
    ([SERVING[0], "--serving-cert-dns-names=a b"], "--serving-cert-dns-names: 'a b' is neither a DNS name"),
    ([*SERVING, "--webhook-configuration=Bad_Name"], "--webhook-configuration: 'Bad_Name' is not a valid"),
], ids=["secret-without-names", "names-without-secret", "configuration-without-secret",
        "configmap-without-secret", "bad-ref",
        "bad-name", "bad-configuration"])
def test_serving_cert_flags_are_checked_together(argv: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert message in _usage_error(["--webhook-port=0", *argv], capsys)


def test_the_serving_cert_secret_serves_the_webhook_unless_it_has_a_certificate(certs: Path) -> None:
    flags = cli.flags_from_args(parse(*SERVING, "--webhook-configuration=escaler-validating-webhook"))
    assert flags.serving_cert_secret == SecretRef("escaler-system", "escaler-serving-cert")
    assert flags.serving_cert_dns_names == ("escaler-manager.escaler-system.svc",
                                            "escaler-webhook.escaler-system.svc")
    assert flags.webhook_configuration == "escaler-validating-webhook"
    assert (flags.webhook_port, flags.webhook_cert_file) == (9443, None)
    # an explicit certificate wins
    own = cli.flags_from_args(parse(*SERVING, "--webhook-cert-dir", str(certs)))
    assert own.webhook_cert_file == str(certs / "tls.crt")
    assert cli.flags_from_args(parse(*SERVING, "--webhook-port=0")).webhook_port == 0


def test_the_serving_cert_secret_needs_a_cluster_connection() -> None:
    flags = cli.flags_from_args(parse(*SERVING, "--webhook-port=0", "--api-bind-address=0"))
    with pytest.raises(ValueError, match=r"--serving-cert-secret: .*needs a cluster connection"):
        cli.build_manager(flags, _testing_factory)


def test_the_ca_bundle_is_synced_only_while_this_replica_may_write(tmp_path: Path) -> None:
    from test_runtime_servingcerts import HOOK, HOOK_PATH, REF, FakeRest, _hook_config

    from escaler.clock import FakeClock
    from escaler.runtime.servingcerts import (
        CertPolicy,
        ServingCertFiles,
        ServingCerts,
        ServingCertSecret,
        WebhookCABundle,
    )

    rest, clock = FakeRest(), FakeClock()
    certs = ServingCerts(ServingCertSecret(rest, REF, CertPolicy(("escaler-webhook",)), clock),
                         ServingCertFiles(str(tmp_path / "certs")), webhook=WebhookCABundle(rest, HOOK))
    certs.provision()
    fence = threading.Event()
    sync = cli._CABundleSync(certs, fence, sharded=False)
    stop = threading.Event()
    t = threading.Thread(target=sync.start, args=(stop,), daemon=True)
    t.start()
    try:
        clock.block_until_waiters(1)
        assert not [c for c in rest.calls if c[1] == HOOK_PATH]  # a standby asks nothing
        fence.set()
        clock.step(cli.CA_BUNDLE_SYNC_INTERVAL)
        # elected: the configuration is not there yet, so it is asked for again sooner
        wait_until(lambda: ("GET", HOOK_PATH) in rest.calls)
        rest.put_object(HOOK_PATH, _hook_config("Cg=="))
        clock.block_until_waiters(1)
        clock.step(cli.CA_BUNDLE_RETRY_INTERVAL)
        wait_until(lambda: ("PATCH", HOOK_PATH) in rest.calls)
    finally:
        stop.set()
        t.join(5)
    assert not t.is_alive()
