"""`hack/cluster.py down --dir DIR` waits for every process and says what it did (issue 25).

`up --detach` leaves etcd, kube-apiserver, ... running as orphans, each leading its own process
group; `down` used to send SIGTERM and print "stopped" at once, while the API server and etcd
went on running. Here stand-in processes are started the way `up --detach` leaves them (by a
launcher that exits, each in a new session), a cluster.json names them, and `down` runs as a user
runs it: afterwards none of ours is running, each line says what happened to it, and a PID that by
now belongs to another process is left alone.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_PY = ROOT / "hack" / "cluster.py"

# What each stand-in does on SIGTERM. Each writes READY once its handler is installed.
_PRELUDE = "import os, signal, subprocess, sys, time\n"
_READY = "open(sys.argv[1], 'w').write('ok')\nwhile True:\n    time.sleep(60)\n"
STANDINS = {
    # exits on SIGTERM, after 0.3 s of "graceful shutdown": down must wait for it
    "slow-exit": "signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.3), os._exit(0)))\n",
    # exits at once on SIGTERM (the default action)
    "exit": "",
    # ignores SIGTERM: down must SIGKILL it after --grace
    "ignore": "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n",
    # exits on SIGTERM but leaves a child in its process group that ignores SIGTERM
    "leaves-child": textwrap.dedent("""\
        subprocess.Popen([sys.executable, '-c', 'import signal, time\\n'
                          'signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n'
                          'open(%r, "w").write("ok")\\n'
                          'time.sleep(600)' % (sys.argv[1] + '.child')])
        while not os.path.exists(sys.argv[1] + '.child'):
            time.sleep(0.01)
        """),
}

LAUNCHER = textwrap.dedent("""\
    # starts each stand-in in its own session, waits until it is ready, then exits (as `up --detach`)
    import json, os, subprocess, sys, time
    plan = json.loads(sys.argv[1])
    out = {}
    for name, (code, ready, argv0) in plan.items():
        p = subprocess.Popen([argv0 or sys.executable, '-c', code, ready], executable=sys.executable,
                             start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out[name] = p.pid
    for name, (code, ready, argv0) in plan.items():
        if ready:
            while not os.path.exists(ready):
                time.sleep(0.01)
    print(json.dumps(out))
    """)


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
    return st is not None and st[0] not in ("Z", "X")


def _group(pgid: int) -> list[int]:
    pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    return [p for p in pids if (st := _stat(p)) and st[1] == pgid and st[0] not in ("Z", "X")]


class Started:
    """Processes a test started; whatever still runs at the end is killed (only if still ours)."""

    def __init__(self) -> None:
        self.procs: dict[int, int] = {}  # pid -> start time

    def add(self, pid: int) -> None:
        st = _stat(pid)
        if st:
            self.procs[pid] = st[2]

    def cleanup(self) -> None:
        for pid, started in self.procs.items():
            st = _stat(pid)
            if st and st[2] == started:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL) if st[1] == pid else os.kill(pid, signal.SIGKILL)


@pytest.fixture
def started() -> Iterator[Started]:
    s = Started()
    yield s
    s.cleanup()


def _launch(tmp_path: Path, started: Started, argv0: dict[str, str] | None = None) -> dict[str, int]:
    """Start every stand-in (argv[0] the Python interpreter, or ``argv0[name]``) as `up --detach` does."""
    plan: dict[str, tuple[str, str, str]] = {
        name: (_PRELUDE + body + _READY, str(tmp_path / f"{name}.ready"), (argv0 or {}).get(name, ""))
        for name, body in STANDINS.items()}
    plan["dead"] = ("pass", "", "")  # exits at once: down finds it not running
    out = subprocess.run([sys.executable, "-c", LAUNCHER, json.dumps(plan)], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    pids: dict[str, int] = json.loads(out)
    for pid in pids.values():
        started.add(pid)
        for member in _group(pid):
            started.add(member)
    deadline = time.monotonic() + 10
    while _running(pids["dead"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pids


def _record(pid: int, exe: str = sys.executable, starttime: int | None = None) -> dict[str, object]:
    st = _stat(pid)
    return {"pid": pid, "exe": exe, "starttime": starttime if starttime is not None else (st[2] if st else 0)}


def _down(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CLUSTER_PY), "down", "--dir", str(workdir), *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_down_waits_escalates_and_says_what_it_did(tmp_path: Path, started: Started) -> None:
    pids = _launch(tmp_path, started)
    children = [p for p in _group(pids["leaves-child"]) if p != pids["leaves-child"]]
    assert len(children) == 1
    # two PIDs cluster.json names that now belong to other processes: a different program, and
    # the same program started later (the recorded start time differs)
    other = subprocess.Popen(["sleep", "600"], start_new_session=True)
    same_exe = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                start_new_session=True)
    started.add(other.pid)
    started.add(same_exe.pid)
    try:
        stat = _stat(same_exe.pid)
        assert stat is not None
        procs = {  # start order; down goes in reverse
            "reused-other": _record(other.pid, exe="/nonexistent/bin/kube-apiserver", starttime=1),
            "reused-same-exe": _record(same_exe.pid, starttime=stat[2] - 1),
            "dead": _record(pids["dead"]),
            **{name: _record(pids[name]) for name in STANDINS},
        }
        (tmp_path / "cluster.json").write_text(json.dumps({
            "pids": {n: r["pid"] for n, r in procs.items()}, "procs": procs}))

        t0 = time.monotonic()
        done = _down(tmp_path, "--grace", "1")
        took = time.monotonic() - t0

        ours = [*(pids[n] for n in ("slow-exit", "exit", "ignore", "leaves-child")), *children]
        still = [p for p in ours if _running(p)]
        assert not still, f"still running after down returned: {still}\n{done.stdout}{done.stderr}"
        lines = done.stdout.splitlines()
        assert lines == [  # reverse start order, one line each, saying what happened
            f"killed leaves-child ({pids['leaves-child']}): exited, but its process group "
            f"({children[0]}) was still running 1s after SIGTERM",
            f"killed ignore ({pids['ignore']}): still running 1s after SIGTERM",
            lines[2],
            lines[3],
            f"dead ({pids['dead']}) was not running",
            lines[5],
            lines[6],
        ], done.stdout
        assert re.fullmatch(rf"stopped exit \({pids['exit']}\) in 0\.\ds", lines[2])
        m = re.fullmatch(rf"stopped slow-exit \({pids['slow-exit']}\) in (\d+\.\d)s", lines[3])
        assert m and 0.3 <= float(m.group(1)) < 1.0, lines[3]
        assert lines[5].startswith(f"reused-same-exe ({same_exe.pid}) was not running (PID "), lines[5]
        assert lines[6].startswith(f"reused-other ({other.pid}) was not running (PID "), lines[6]
        assert "left it alone" in lines[5] and "left it alone" in lines[6]
        assert done.returncode == 0, done.stderr
        assert took < 1 + 5, took  # grace, plus less than the SIGKILL wait
        # the PIDs that are no longer ours were not signalled
        assert other.poll() is None and same_exe.poll() is None
    finally:
        for p in (other, same_exe):
            p.kill()
            p.wait()


def test_down_twice_says_nothing_was_running(tmp_path: Path, started: Started) -> None:
    pids = _launch(tmp_path, started)
    names = [n for n in STANDINS if n != "leaves-child"]
    (tmp_path / "cluster.json").write_text(json.dumps({
        "pids": {n: pids[n] for n in names}, "procs": {n: _record(pids[n]) for n in names}}))
    first = _down(tmp_path, "--grace", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    second = _down(tmp_path, "--grace", "1")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [f"{n} ({pids[n]}) was not running" for n in reversed(names)]


def test_down_reads_a_cluster_json_without_procs(tmp_path: Path, started: Started) -> None:
    """A cluster.json written before `procs` existed: the PID's binary must be named like the process."""
    pids = _launch(tmp_path, started, argv0={"ignore": "/opt/bin/etcd"})
    (tmp_path / "cluster.json").write_text(json.dumps({"pids": {"etcd": pids["ignore"],
                                                                "kube-apiserver": pids["exit"]}}))
    done = _down(tmp_path, "--grace", "0.5")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # a stand-in run as "python" is not kube-apiserver: left alone; one run as .../etcd is stopped
    assert lines[0].startswith(f"kube-apiserver ({pids['exit']}) was not running (PID "), lines
    assert lines[1] == f"killed etcd ({pids['ignore']}): still running 0.5s after SIGTERM", lines
    assert not _running(pids["ignore"])
    assert _running(pids["exit"])


def test_down_exits_nonzero_when_a_process_outlives_sigkill(
        tmp_path: Path, started: Started, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that no signal stops (here: SIGKILL is not delivered) fails `down`, and says so."""
    sys.path.insert(0, str(ROOT / "hack"))
    try:
        import cluster
    finally:
        sys.path.remove(str(ROOT / "hack"))
    pids = _launch(tmp_path, started)
    (tmp_path / "cluster.json").write_text(json.dumps({
        "pids": {"ignore": pids["ignore"], "exit": pids["exit"]},
        "procs": {"ignore": _record(pids["ignore"]), "exit": _record(pids["exit"])}}))
    real = cluster._signal

    def no_sigkill(pid: int, group: bool, sig: int) -> None:
        if sig != signal.SIGKILL:
            real(pid, group, sig)

    monkeypatch.setattr(cluster, "_signal", no_sigkill)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cluster.down_cluster(tmp_path, grace=0.3, kill_wait=0.3)
    lines = out.getvalue().splitlines()
    assert rc == 1
    assert lines[0] == f"stopped exit ({pids['exit']}) in {lines[0].rsplit(' ', 1)[1]}"
    assert lines[1] == (f"could not stop ignore ({pids['ignore']}): still running 0.3s after SIGTERM "
                        f"and still running 0.3s after SIGKILL")
    assert _running(pids["ignore"])
