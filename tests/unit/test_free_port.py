"""``hack/cluster.py``'s ``free_port`` never hands one port to two callers within its reservation.

The e2e tiers run side by side (four parallel workers and the serial tier), each picking loopback
ports for the servers it starts. A port nothing has bound yet looked free to every process until its
user bound it, so two of them could be handed the same port, and a test then talked to another
test's server (CI of f78e1b0: an SLO API's ``/readyz`` answered 200, its ``/config`` a body without
routes). Here the range is cut to three ports, so a repeat would be likely without the reservation.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cluster_module(reservations: Path, monkeypatch: pytest.MonkeyPatch, low: int) -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_cluster_free_port", ROOT / "hack" / "cluster.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(ROOT / "hack"))
    monkeypatch.setitem(sys.modules, spec.name, mod)  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "PORT_RESERVATIONS", reservations, raising=False)
    monkeypatch.setattr(mod, "FREE_PORT_RANGE", (low, low + 3))
    return mod


def _low_free_range() -> int:
    """The first of three consecutive loopback ports in the free range that nothing listens on."""
    import socket

    for low in range(29000, 32700, 7):
        try:
            for port in range(low, low + 3):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return low
    raise AssertionError("no three free consecutive ports in 29000-32700")


def test_a_port_is_handed_out_once_within_its_reservation(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    low = _low_free_range()
    mod = _cluster_module(tmp_path / "ports", monkeypatch, low)
    got = [mod.free_port() for _ in range(3)]
    assert sorted(got) == [low, low + 1, low + 2]
    with pytest.raises(RuntimeError, match=r"no free port in \(\d+, \d+\) after 200 tries"):
        mod.free_port()
    # a reservation older than PORT_RESERVATION_SECONDS is taken over, once
    old = time.time() - mod.PORT_RESERVATION_SECONDS - 1
    os.utime(tmp_path / "ports" / str(got[1]), (old, old))
    assert mod.free_port() == got[1]
    with pytest.raises(RuntimeError):
        mod.free_port()
    assert sorted(p.name for p in (tmp_path / "ports").iterdir()) == sorted(str(p) for p in got)


def test_processes_picking_at_once_get_distinct_ports(tmp_path: Path) -> None:
    low = _low_free_range()
    script = (f"import sys; sys.path.insert(0, {str(ROOT / 'hack')!r}); import cluster; "
              f"from pathlib import Path; cluster.PORT_RESERVATIONS = Path({str(tmp_path / 'ports')!r}); "
              f"cluster.FREE_PORT_RANGE = ({low}, {low + 3})\n"
              "try:\n    print(cluster.free_port())\nexcept RuntimeError:\n    print('none')\n")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    out = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert out == sorted([str(low), str(low + 1), str(low + 2), "none"]), out
