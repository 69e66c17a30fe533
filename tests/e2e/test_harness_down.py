"""`hack/cluster.py up --detach` then `down`, as a user runs them (issue 25).

`down` used to print "stopped" for each process and return while kube-apiserver and etcd went on
running. Now, when `down` returns, no process `up` started is running (nor any process of their
process groups), and it printed one line per process, dependents first, saying it was stopped
(and how long that took) or killed.

This starts its own control plane on free ports in a temporary directory; the session's cluster
is not touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_PY = ROOT / "hack" / "cluster.py"
START_ORDER = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgid, start time) of pid, from /proc/PID/stat; None once it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[2]), int(fields[19])


def _running(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")  # a zombie has exited


def _group(pgid: int) -> list[int]:
    pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    return [p for p in pids if (st := _stat(p)) and st[1] == pgid and st[0] not in ("Z", "X")]


def test_down_returns_once_every_process_is_gone(tmp_path: Path) -> None:
    workdir = tmp_path / "cluster"
    up = subprocess.run([sys.executable, str(CLUSTER_PY), "up", "--detach", "--dir", str(workdir)],
                        capture_output=True, text=True, timeout=1800, check=False)
    info_path = workdir / "cluster.json"
    started: dict[int, int] = {}  # pid -> start time, for the clean-up below
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        info = json.loads(info_path.read_text())
        pids: dict[str, int] = info["pids"]
        assert list(pids) == START_ORDER
        for pid in pids.values():
            for member in _group(pid):
                st = _stat(member)
                if st:
                    started[member] = st[2]
        assert all(_running(pid) for pid in pids.values())

        down = subprocess.run([sys.executable, str(CLUSTER_PY), "down", "--dir", str(workdir)],
                              capture_output=True, text=True, timeout=120, check=False)

        left = {name: pid for name, pid in pids.items() if _running(pid)}
        assert not left, f"running after down returned: {left}\n{down.stdout}{down.stderr}"
        strays = {name: _group(pid) for name, pid in pids.items() if _group(pid)}
        assert not strays, f"process-group members running after down returned: {strays}"
        assert down.returncode == 0, down.stdout + down.stderr
        lines = down.stdout.splitlines()
        assert len(lines) == len(START_ORDER), down.stdout
        for line, name in zip(lines, reversed(START_ORDER), strict=True):  # dependents first
            pid = pids[name]
            assert re.fullmatch(
                rf"stopped {name} \({pid}\) in \d+\.\ds"
                rf"|killed {name} \({pid}\): .* \d+(\.\d+)?s after SIGTERM", line), down.stdout
    finally:
        for pid, started_at in started.items():  # whatever down left behind, if still ours
            st = _stat(pid)
            if st and st[2] == started_at and st[0] not in ("Z", "X"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
