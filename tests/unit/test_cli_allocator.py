"""escaler.cli.allocator: the manager's malloc arena limit (and the operator's own setting wins)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from escaler.cli import allocator
from escaler.cli.allocator import ARENA_MAX, M_ARENA_MAX, glibc, tune_allocator

SRC = Path(__file__).resolve().parents[2]

# a child that (maybe) tunes, makes seven threads allocate a 4 KiB block each (glibc's malloc, not
# pymalloc's) at the same time, and prints how many arenas glibc's malloc_info reports
CHILD = textwrap.dedent("""
    import ctypes, re, sys, threading
    from escaler.cli.allocator import glibc, tune_allocator
    if sys.argv[1] == "tune":
        print(tune_allocator(environ={}), file=sys.stderr)
    libc = glibc()
    held, barrier = [], threading.Barrier(8)
    def work():
        held.append(bytearray(4096))
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(7)]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join()
    size, buf = ctypes.c_size_t(), ctypes.c_char_p()
    libc.open_memstream.restype = ctypes.c_void_p
    fp = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    libc.malloc_info(0, ctypes.c_void_p(fp))
    libc.fclose(ctypes.c_void_p(fp))
    print(len(re.findall(rb"<heap nr=", buf.value)))
""")


class FakeLibc:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def mallopt(self, param: Any, value: Any) -> int:
        self.calls.append((param.value, value.value))
        return self.answer


def arenas(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], cwd=SRC, capture_output=True, text=True,
                         check=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)})
    return int(out.stdout.strip())


def test_the_process_libc_is_glibc_here() -> None:
    # the manager's image and CI are glibc Linux: the tuning below is what they run
    assert sys.platform == "linux"
    assert glibc() is not None


def test_seven_threads_share_two_arenas_once_tuned() -> None:
    assert arenas("plain") > ARENA_MAX  # the default: an arena per thread (up to 8 per core)
    assert arenas("tune") <= ARENA_MAX


def test_sets_the_arena_limit() -> None:
    libc = FakeLibc()
    assert tune_allocator(environ={}, libc=libc) == f"arena_max={ARENA_MAX}"
    assert libc.calls == [(M_ARENA_MAX, ARENA_MAX)]


@pytest.mark.parametrize(("environ", "said"), [
    ({"MALLOC_ARENA_MAX": "4"}, "arena_max=4 (MALLOC_ARENA_MAX)"),
    ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=8"},
     "arena_max=8 (GLIBC_TUNABLES)"),
])
def test_the_operators_setting_wins(environ: dict[str, str], said: str) -> None:
    libc = FakeLibc()
    assert tune_allocator(environ=environ, libc=libc) == said
    assert libc.calls == []


def test_other_tunables_do_not_count_as_a_limit() -> None:
    libc = FakeLibc()
    tune_allocator(environ={"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0", "MALLOC_ARENA_MAX": ""},
                   libc=libc)
    assert libc.calls == [(M_ARENA_MAX, ARENA_MAX)]


def test_a_refusal_is_reported_not_raised() -> None:
    assert tune_allocator(environ={}, libc=FakeLibc(answer=0)) == \
        f"unchanged (mallopt refused arena_max={ARENA_MAX})"


def test_not_glibc_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "glibc", lambda: None)
    assert tune_allocator(environ={}) == "unchanged (not glibc)"


def test_the_manager_tunes_the_allocator_and_logs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    from escaler.cli.main import main

    class Built:
        def start(self) -> int:
            return 0

    calls: list[str] = []
    monkeypatch.setattr("escaler.cli.manager.tune_allocator", lambda: calls.append("tuned") or "arena_max=2")
    monkeypatch.setattr("escaler.cli.manager.build_manager", lambda flags: Built())
    monkeypatch.setattr("escaler.cli.manager.served_endpoints", lambda flags, mgr, reason: [])
    with caplog.at_level(logging.INFO):
        assert main(["manager", "--webhook-port=0", "--kubeconfig", str(tmp_path / "none")]) == 0
    assert calls == ["tuned"]
    messages = [r.getMessage() for r in caplog.records]
    assert messages.index("malloc: arena_max=2") == messages.index("starting manager") - 1

