"""escaler.cli.allocator: the manager's malloc arena limit (and the operator's own setting wins), and
the periodic ``malloc_trim`` that gives a surge's freed heap pages back."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from escaler.cli import allocator
from escaler.cli.allocator import (
    ARENA_MAX,
    M_ARENA_MAX,
    M_MMAP_THRESHOLD,
    MMAP_THRESHOLD,
    TRIM_INTERVAL_SECONDS,
    MallocTrim,
    glibc,
    tune_allocator,
)
from escaler.clock import FakeClock

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
        self.trims: list[int] = []

    def mallopt(self, param: Any, value: Any) -> int:
        self.calls.append((param.value, value.value))
        return self.answer

    def malloc_trim(self, pad: Any) -> int:
        self.trims.append(pad.value)
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


def test_sets_the_arena_limit_and_the_mmap_threshold() -> None:
    libc = FakeLibc()
    assert tune_allocator(environ={}, libc=libc) == f"arena_max={ARENA_MAX}, mmap_threshold={MMAP_THRESHOLD}"
    assert libc.calls == [(M_ARENA_MAX, ARENA_MAX), (M_MMAP_THRESHOLD, MMAP_THRESHOLD)]


@pytest.mark.parametrize(("environ", "said", "calls"), [
    ({"MALLOC_ARENA_MAX": "4"}, f"arena_max=4 (MALLOC_ARENA_MAX), mmap_threshold={MMAP_THRESHOLD}",
     [(M_MMAP_THRESHOLD, MMAP_THRESHOLD)]),
    ({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.arena_max=8"},
     f"arena_max=8 (GLIBC_TUNABLES), mmap_threshold={MMAP_THRESHOLD}", [(M_MMAP_THRESHOLD, MMAP_THRESHOLD)]),
    ({"MALLOC_MMAP_THRESHOLD_": "65536"},
     f"arena_max={ARENA_MAX}, mmap_threshold=65536 (MALLOC_MMAP_THRESHOLD_)", [(M_ARENA_MAX, ARENA_MAX)]),
    ({"MALLOC_ARENA_MAX": "1", "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1048576"},
     "arena_max=1 (MALLOC_ARENA_MAX), mmap_threshold=1048576 (GLIBC_TUNABLES)", []),
])
def test_the_operators_setting_wins(environ: dict[str, str], said: str, calls: list[tuple[int, int]]) -> None:
    libc = FakeLibc()
    assert tune_allocator(environ=environ, libc=libc) == said
    assert libc.calls == calls


def test_other_tunables_do_not_count_as_a_limit() -> None:
    libc = FakeLibc()
    tune_allocator(environ={"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0", "MALLOC_ARENA_MAX": ""},
                   libc=libc)
    assert libc.calls == [(M_ARENA_MAX, ARENA_MAX), (M_MMAP_THRESHOLD, MMAP_THRESHOLD)]


def test_a_refusal_is_reported_not_raised() -> None:
    assert tune_allocator(environ={}, libc=FakeLibc(answer=0)) == \
        f"unchanged (mallopt refused arena_max={ARENA_MAX}), unchanged (mallopt refused " \
        f"mmap_threshold={MMAP_THRESHOLD})"


def test_not_glibc_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "glibc", lambda: None)
    assert tune_allocator(environ={}) == "unchanged (not glibc)"


# a child that (maybe) tunes, frees a 300 KiB block (glibc maps it on its own), then allocates
# another and says whether glibc mapped it too (its address far from the heap's) or took it from the
# heap (the threshold raised to 300 KiB by the first free)
MMAP_CHILD = textwrap.dedent("""
    import ctypes, sys
    from escaler.cli.allocator import glibc, tune_allocator
    if sys.argv[1] == "tune":
        tune_allocator(environ={})
    libc = glibc()
    libc.malloc.restype = ctypes.c_void_p
    libc.sbrk.restype = ctypes.c_void_p
    first = libc.malloc(300 * 1024)
    libc.free(ctypes.c_void_p(first))
    second = libc.malloc(300 * 1024)
    top = libc.sbrk(0)
    print("mapped" if abs(second - top) > (1 << 32) else "heap")
""")


def placed(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", MMAP_CHILD, mode], cwd=SRC, capture_output=True, text=True,
                         check=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)})
    return out.stdout.strip()


def test_a_freed_large_block_does_not_move_the_threshold_once_tuned() -> None:
    assert placed("plain") == "heap"  # glibc's default: the first free raised the threshold
    assert placed("tune") == "mapped"


def test_the_manager_tunes_the_allocator_and_logs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    from escaler.cli.main import main

    class Built:
        def __init__(self) -> None:
            self.added: list[tuple[Any, bool]] = []

        def add(self, runnable: Any, *, needs_leader_election: bool = True) -> None:
            self.added.append((runnable, needs_leader_election))

        def start(self) -> int:
            return 0

    calls: list[str] = []
    monkeypatch.setattr("escaler.cli.manager.tune_allocator", lambda: calls.append("tuned") or "arena_max=2")
    built = Built()
    monkeypatch.setattr("escaler.cli.manager.build_manager", lambda flags: built)
    monkeypatch.setattr("escaler.cli.manager.served_endpoints", lambda flags, mgr, reason: [])
    with caplog.at_level(logging.INFO):
        assert main(["manager", "--webhook-port=0", "--kubeconfig", str(tmp_path / "none")]) == 0
    assert calls == ["tuned"]
    messages = [r.getMessage() for r in caplog.records]
    said = "malloc: arena_max=2, trim every 10s"
    assert messages.index(said) == messages.index("starting manager") - 1
    # the trim runs on every replica, leader or not
    ((trim, needs_leader),) = built.added
    assert isinstance(trim, MallocTrim) and trim.interval == TRIM_INTERVAL_SECONDS and not needs_leader


def test_the_trim_interval_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                caplog: pytest.LogCaptureFixture) -> None:
    from escaler.cli.main import main

    added: list[Any] = []

    class Built:
        def add(self, runnable: Any, *, needs_leader_election: bool = True) -> None:
            added.append(runnable)

        def start(self) -> int:
            return 0

    monkeypatch.setattr("escaler.cli.manager.tune_allocator", lambda: "arena_max=2")
    monkeypatch.setattr("escaler.cli.manager.build_manager", lambda flags: Built())
    monkeypatch.setattr("escaler.cli.manager.served_endpoints", lambda flags, mgr, reason: [])
    base = ["manager", "--webhook-port=0", "--kubeconfig", str(tmp_path / "none")]
    with caplog.at_level(logging.INFO):
        assert main([*base, "--malloc-trim-interval=0"]) == 0
        assert main([*base, "--malloc-trim-interval=2m"]) == 0
    messages = [r.getMessage() for r in caplog.records]
    assert "malloc: arena_max=2, no trim" in messages and "malloc: arena_max=2, trim every 120s" in messages
    assert [t.interval for t in added] == [120.0]


def test_a_negative_trim_interval_is_refused_naming_the_flag(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from escaler.cli.main import main

    with pytest.raises(SystemExit) as exited:
        main(["manager", "--webhook-port=0", "--malloc-trim-interval=-5s"])
    assert exited.value.code != 0
    err = capsys.readouterr().err
    assert "--malloc-trim-interval: invalid duration '-5s'" in err, err
    with pytest.raises(ValueError, match=r"MallocTrim.interval: must be >= 0"):
        MallocTrim(-1.0, libc=FakeLibc())


def test_the_trim_runs_every_interval_until_stopped() -> None:
    libc, clock, stop = FakeLibc(), FakeClock(), threading.Event()
    trim = MallocTrim(10.0, libc=libc, clock=clock)
    runner = threading.Thread(target=trim.start, args=(stop,), daemon=True)
    runner.start()
    for expected in (1, 2, 3):
        clock.step(10.0)
        deadline = threading.Event()
        for _ in range(500):  # the runner wakes within its stop poll (10 ms) of each step
            if len(libc.trims) >= expected:
                break
            deadline.wait(0.01)
        assert libc.trims == [0] * expected
    clock.step(9.0)  # not yet due
    deadline.wait(0.1)
    assert len(libc.trims) == 3 and (trim.trims, trim.released) == (3, 3)
    stop.set()
    runner.join(5)
    assert not runner.is_alive()


@pytest.mark.parametrize("trim", [
    MallocTrim(0.0, libc=FakeLibc()),   # turned off
    MallocTrim(10.0, libc=object()),    # a C library without malloc_trim
])
def test_a_trim_turned_off_or_without_glibc_never_calls(trim: MallocTrim) -> None:
    stop = threading.Event()
    runner = threading.Thread(target=trim.start, args=(stop,), daemon=True)
    runner.start()
    assert not trim.enabled
    stop.set()
    runner.join(5)
    assert not runner.is_alive() and trim.trims == 0


# a child that frees seven of every eight 2 KiB blocks of ~100 MB (glibc's heap, not pymalloc's: > 512
# bytes)
# and prints its RSS (KiB) before and after one MallocTrim.trim()
TRIM_CHILD = textwrap.dedent("""
    from escaler.cli.allocator import MallocTrim
    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    blocks = [bytes(2000) for _ in range(50_000)]
    blocks = blocks[::8]
    before = rss()
    released = MallocTrim(10.0).trim()
    print(before, rss(), released)
""")


def test_a_trim_gives_freed_heap_pages_back() -> None:
    out = subprocess.run([sys.executable, "-c", TRIM_CHILD], cwd=SRC, capture_output=True, text=True,
                         check=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)})
    before, after, released = out.stdout.split()
    # ~87 MB was freed in the middle of the heap, where glibc keeps it; the trim returns it
    assert released == "True" and int(before) - int(after) > 50_000, out.stdout

