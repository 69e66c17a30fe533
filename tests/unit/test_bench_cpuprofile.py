"""bench/cpuprofile.py: a module run under it is profiled only between SIGUSR1 and SIGUSR2, and the
report names the functions that used the CPU in that window (docs/performance.md's profiles)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SPIN = '''
import pathlib, sys, time

def busy_work():
    total = 0
    for i in range(20000):
        total += i * i
    return total

def idle_wait():
    time.sleep(0.002)

stop = pathlib.Path(sys.argv[1])
while not stop.exists():
    busy_work()
    idle_wait()
'''


def _wait_for(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def test_a_window_between_the_signals_is_profiled_and_reported(tmp_path: Path) -> None:
    (tmp_path / "spin.py").write_text(SPIN)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "cpuprofile.py"), str(tmp_path), "-m", "spin",
         str(tmp_path / "stop")],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    try:
        _wait_for(tmp_path / "cpuprofile.ready")
        assert not list(tmp_path.glob("cpu-*.txt")), "nothing is written before a window ends"
        (tmp_path / "cpuprofile.label").write_text("first")
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
        os.kill(proc.pid, signal.SIGUSR2)
        _wait_for(tmp_path / "cpu-first.txt")
        report = (tmp_path / "cpu-first.txt").read_text()
        head = re.match(r"cpu profile first: ([0-9.]+) CPU-s over the profiled threads", report)
        assert head is not None, report[:200]
        assert float(head[1]) > 0.1  # a spinning second of CPU, not wall time asleep
        inclusive, _, self_part = report.partition("self (share of")
        # the CPU clock: the sleeping helper costs next to nothing, the spinning one most of it
        shares = {m[2]: float(m[1]) for m in re.finditer(r"^\s+([0-9.]+)%\s+\d+\s+(\w+) \((?:\S*/)?spin\.py:",
                                                          self_part, re.M)}
        assert shares["busy_work"] > 50.0, shares  # the hot function is found, by self time
        assert shares.get("idle_wait", 0.0) < 10.0, shares
        # a second window gets its own label and file
        (tmp_path / "cpuprofile.label").write_text("second")
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGUSR2)
        _wait_for(tmp_path / "cpu-second.txt")
        assert inclusive.startswith("cpu profile first")
    finally:
        (tmp_path / "stop").write_text("")
        assert proc.wait(30) == 0
