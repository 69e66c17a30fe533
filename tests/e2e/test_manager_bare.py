"""``python -m escaler manager`` as a new user runs it (issue 14): no webhook flag at all, the
kubeconfig from ``$KUBECONFIG``. It must stay up, become ready, serve its probes, metrics and API,
and log what it serves where — the webhook off, with how to enable it. (Before issue 14 it exited at
once, status 2, asking for the webhook's serving certificate.)

Only the three listen addresses are passed, as loopback ports picked for this test, so it can run
beside other tests and managers on one machine; everything else is the default.
``ESCALER_E2E_SRC`` runs another checkout's package (see ``conftest``).
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Cluster, eventually, source_dir
from .webhook import free_port

# serial tier (docs/testing.md): its manager runs with no flags, so it watches every namespace
pytestmark = [pytest.mark.e2e, pytest.mark.serial]

COMPONENTS = ["api", "probes", "metrics", "webhook", "leader-election"]


def get(url: str) -> tuple[int, str]:
    """One GET; (status, body), (0, error) when nothing answers. TLS unverified (self-signed)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def json_lines(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


Bare = tuple[subprocess.Popen[bytes], Path, dict[str, int]]


@pytest.fixture
def bare_manager(cluster: Cluster, tmp_path: Path) -> Iterator[Bare]:
    local = cluster.require_local()
    kubeconfig = local.user_kubeconfig("bare-manager")
    ports = {"probes": free_port(), "metrics": free_port(), "api": free_port()}
    src = source_dir()
    args = [sys.executable, "-m", "escaler", "manager",
            f"--health-probe-bind-address=127.0.0.1:{ports['probes']}",
            f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
            f"--api-bind-address=127.0.0.1:{ports['api']}"]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(src), os.environ.get("PYTHONPATH", "")) if p)}
    log = tmp_path / "manager.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(args, cwd=src, stdout=f, stderr=subprocess.STDOUT, env=env)
    try:
        yield proc, log, ports
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_bare_manager_runs_without_the_webhook_and_says_what_it_serves(bare_manager: Bare) -> None:
    proc, log, ports = bare_manager

    def ready() -> bool:
        assert proc.poll() is None, (f"the bare manager exited with {proc.returncode}:\n"
                                     f"{log.read_text(errors='replace')[-3000:]}")
        return get(f"http://127.0.0.1:{ports['probes']}/readyz")[0] == 200

    eventually(ready, timeout=90, interval=0.5, what="the bare manager's /readyz")

    # the summary: one "serving <component>: ..." line per component, before the manager started
    docs = json_lines(log)
    serving = {d["component"]: d["message"] for d in docs
               if d.get("logger") == "escaler.manager" and d["message"].startswith("serving ")}
    assert list(serving) == COMPONENTS, log.read_text(errors="replace")[-3000:]
    webhook = serving["webhook"]
    assert webhook.startswith("serving webhook: off: no serving certificate")
    assert "hack/webhook-certs.sh" in webhook and "--webhook-cert-dir" in webhook
    assert f"127.0.0.1:{ports['api']}" in serving["api"] and "decisions API" in serving["api"]
    assert "signals API" in serving["api"]
    assert f"127.0.0.1:{ports['probes']}" in serving["probes"]
    assert f"127.0.0.1:{ports['metrics']}" in serving["metrics"]
    assert serving["leader-election"].startswith("serving leader-election: off")

    # it serves what it said: metrics and the API (leader election off: it leads at once)
    status, body = get(f"http://127.0.0.1:{ports['metrics']}/metrics")
    assert status == 200 and 'controller_runtime_reconcile_total{controller="elasticscaler"' in body
    # (the unscoped route of 0.1: 410 without a token; the namespaced one needs one)
    eventually(lambda: get(f"https://127.0.0.1:{ports['api']}/decisions/no-such-service")[0] == 410,
               timeout=30, what="the decisions API answering")
    assert get(f"https://127.0.0.1:{ports['api']}/decisions/v1/namespaces/default/no-such-service")[0] == 401

    # and it stays up: no exit in the next seconds (the old code was gone within one)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=3)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
