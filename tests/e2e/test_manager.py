"""The runtime's manager as a user runs it: the ``examples/keycount`` operator as a real process
against the real API server — its reconciles, its graceful stop, and leader election between
two processes sharing one Lease (hand-over after ``kill -9``, audit log shows no double writer).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from escaler.runtime.leaderelection import DEFAULT_LEASE_DURATION

from .conftest import ROOT, Cluster, eventually

pytestmark = pytest.mark.e2e

ANNOTATION = "examples.escaler.io/key-count"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


@dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    log: Path
    identity: str

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def operators(tmp_path: Path) -> Iterator[list[Operator]]:
    started: list[Operator] = []
    yield started
    for op in started:
        if op.proc.poll() is None:
            op.proc.kill()
            op.proc.wait(10)


def start_operator(ops: list[Operator], tmp: Path, kubeconfig: Path, namespace: str, identity: str,
                   leader_elect: bool = True) -> Operator:
    log = tmp / f"{identity}.log"
    args = [sys.executable, "-m", "examples.keycount", f"--kubeconfig={kubeconfig}",
            f"--namespace={namespace}", f"--identity={identity}",
            "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0"]
    if leader_elect:
        args.append("--leader-elect")
    with open(log, "wb") as f:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    op = Operator(proc, log, identity)
    ops.append(op)
    return op


def configmap(name: str, n: int) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                       "data": {f"k{i}": str(i) for i in range(n)}})


def annotation(cluster: Cluster, namespace: str, name: str) -> str | None:
    obj = cluster.kubectl_json("get", "configmap", name, "-n", namespace)
    return (obj["metadata"].get("annotations") or {}).get(ANNOTATION)


def lease_holder(cluster: Cluster, namespace: str) -> str:
    out = cluster.kubectl("get", "lease", "keycount", "-n", namespace, "-o",
                          "jsonpath={.spec.holderIdentity}", check=False)
    return out.strip()


def audit_writes(log: Path, users: set[str], namespace: str) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text().splitlines():
        ev = json.loads(line)
        if (ev.get("stage") == "ResponseComplete" and ev.get("verb") in WRITE_VERBS
                and ev.get("user", {}).get("username") in users
                and ev.get("objectRef", {}).get("namespace") == namespace):
            out.append(ev)
    return out


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_example_operator_mirrors_key_count(cluster: Cluster, namespace: str, tmp_path: Path,
                                            operators: list[Operator]) -> None:
    local = cluster.require_local()
    kc = local.user_kubeconfig("keycount-solo")
    op = start_operator(operators, tmp_path, kc, namespace, "solo", leader_elect=False)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=configmap("three", 3))
    eventually(lambda: annotation(cluster, namespace, "three") == "3", timeout=30,
               what=f"key-count 3; operator log:\n{op.output()[-2000:]}")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=configmap("three", 5))
    eventually(lambda: annotation(cluster, namespace, "three") == "5", timeout=30, what="key-count 5")
    # level-based and writes only what changed: exactly one patch per change of the count
    time.sleep(3)  # give a (wrong) hot loop time to show itself
    patches = [e for e in audit_writes(local.audit_log, {"keycount-solo"}, namespace)
               if e["objectRef"].get("name") == "three"]
    assert [e["verb"] for e in patches] == ["patch", "patch"], patches
    # SIGTERM: graceful stop, exit 0
    op.proc.send_signal(signal.SIGTERM)
    assert op.proc.wait(30) == 0, op.output()[-3000:]


def test_leader_election_handover_after_kill_9(cluster: Cluster, namespace: str, tmp_path: Path,
                                               operators: list[Operator]) -> None:
    local = cluster.require_local()
    a = start_operator(operators, tmp_path, local.user_kubeconfig("keycount-a"), namespace, "keycount-a")
    eventually(lambda: lease_holder(cluster, namespace) == "keycount-a", timeout=30,
               what=f"a to lead; log:\n{a.output()[-2000:]}")
    b = start_operator(operators, tmp_path, local.user_kubeconfig("keycount-b"), namespace, "keycount-b")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=configmap("cm", 1))
    eventually(lambda: annotation(cluster, namespace, "cm") == "1", timeout=30, what="a annotates")
    time.sleep(3)  # b is a warm standby for a while: it must not write
    assert b.proc.poll() is None, b.output()[-2000:]

    a.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    a.proc.wait(10)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=configmap("cm", 2))
    eventually(lambda: lease_holder(cluster, namespace) == "keycount-b", timeout=30,
               interval=0.1, what="b to take the lease")
    handover = time.monotonic() - killed
    eventually(lambda: annotation(cluster, namespace, "cm") == "2", timeout=15, what="b annotates")
    sys.stderr.write(f"\n[e2e] leader hand-over after kill -9: {handover:.1f}s\n")
    # The standby takes over 15 s (leaseDuration) after it last *saw* a renewal, by its own clock.
    # It polls every 2 s with client-go's jitter (up to 2.2 x 2 s = 4.4 s), and the leader's last
    # renewal was at most one 2 s retry period before the kill, so the bound is 15 + 4.4 s (typical
    # 15-17 s, printed above); plus 0.6 s for this test's own polling through kubectl.
    assert handover <= 20.0, f"hand-over took {handover:.1f}s"

    writes = audit_writes(local.audit_log, {"keycount-a", "keycount-b"}, namespace)
    a_writes = [e for e in writes if e["user"]["username"] == "keycount-a"]
    b_writes = [e for e in writes if e["user"]["username"] == "keycount-b"]
    assert a_writes and b_writes
    assert max(ts(e["stageTimestamp"]) for e in a_writes) < min(ts(e["requestReceivedTimestamp"])
                                                                for e in b_writes), \
        "a window exists in which both processes wrote"
    assert b_writes[0]["objectRef"]["resource"] == "leases", "b's first write must be taking the lease"


def test_graceful_stop_releases_the_lease(cluster: Cluster, namespace: str, tmp_path: Path,
                                          operators: list[Operator]) -> None:
    local = cluster.require_local()
    a = start_operator(operators, tmp_path, local.user_kubeconfig("keycount-a"), namespace, "keycount-a")
    eventually(lambda: lease_holder(cluster, namespace) == "keycount-a", timeout=30, what="a to lead")
    b = start_operator(operators, tmp_path, local.user_kubeconfig("keycount-b"), namespace, "keycount-b")
    time.sleep(2)
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(30) == 0, a.output()[-3000:]
    exited = time.monotonic()
    # released on the way out: holderIdentity cleared with a 1 s duration (unless b already took it)
    lease = cluster.kubectl_json("get", "lease", "keycount", "-n", namespace)["spec"]
    assert lease.get("holderIdentity", "") == "keycount-b" or (
        lease.get("holderIdentity", "") == "" and lease.get("leaseDurationSeconds") == 1), lease
    eventually(lambda: lease_holder(cluster, namespace) == "keycount-b", timeout=10, interval=0.1,
               what="b to take the released lease")
    # so b leads sooner than a lease left to expire would let it (a's last renewal + 15 s); timed
    # from a's exit, not from the signal, so a slow shutdown on a loaded machine is not counted
    assert time.monotonic() - exited < DEFAULT_LEASE_DURATION
    assert b.proc.poll() is None
