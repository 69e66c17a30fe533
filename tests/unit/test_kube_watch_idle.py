"""A silently dead watch connection is noticed within ~2 min, whatever the watch's length.

The reflector asks the server for a 5-10 min watch (``timeoutSeconds``). kube-apiserver's watch
cache sends a watch that asked for bookmarks one about every 60 s, so a stream silent for longer is
a dead TCP connection (a NAT entry dropped, a node gone): ``ResourceListerWatcher`` bounds every
read by ``idle_timeout`` (110 s), not by ``timeoutSeconds + margin`` (up to 10.5 min).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_kube_fakeapi import STALL, FakeAPI, Stream, event_line

from escaler.errors import ConnectionFailure
from escaler.kube.discovery import ResourceMapping
from escaler.kube.dynamic import DEFAULT_WATCH_IDLE_TIMEOUT, ResourceListerWatcher

POD = ResourceMapping("", "v1", "pods", "Pod", True, frozenset({"status"}))


class RecordingRest:
    """Records the read timeout each watch is opened with; streams nothing."""

    def __init__(self) -> None:
        self.read_timeouts: list[float] = []

    def stream_lines(self, path: str, query: Any, read_timeout: float) -> tuple[Iterator[bytes],
                                                                                 Callable[[], None]]:
        self.read_timeouts.append(read_timeout)
        return iter(()), lambda: None


@pytest.mark.parametrize(("timeout_seconds", "read_timeout"),
                         [(300, DEFAULT_WATCH_IDLE_TIMEOUT), (599, DEFAULT_WATCH_IDLE_TIMEOUT), (60, 90.0),
                          (0, 30.0)],
                         ids=["5-min-watch", "10-min-watch", "short-watch-keeps-its-margin",
                              "no-server-timeout-margin-only"])
def test_watch_reads_wait_at_most_the_idle_timeout(timeout_seconds: int, read_timeout: float) -> None:
    rest = RecordingRest()
    lw = ResourceListerWatcher(rest, POD)  # type: ignore[arg-type]
    lw.watch(resource_version="1", timeout_seconds=timeout_seconds)
    assert rest.read_timeouts == [pytest.approx(read_timeout)]
    assert DEFAULT_WATCH_IDLE_TIMEOUT <= 120.0, "a dead connection must be noticed within two minutes"


def test_a_silent_long_watch_fails_at_the_idle_timeout() -> None:
    """Real HTTP: a 5 min watch whose server goes silent raises ConnectionFailure at the idle timeout."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "ns1",
                                                           "resourceVersion": "2"}}
    with FakeAPI() as api:
        api.on("GET", "/api/v1/pods", lambda r: Stream([event_line("ADDED", pod), STALL]))
        lw = ResourceListerWatcher(api.rest(), POD, idle_timeout=0.3)
        stream = lw.watch(resource_version="1", timeout_seconds=300)
        start = time.monotonic()
        seen = []
        with pytest.raises(ConnectionFailure):
            for ev in stream:
                seen.append(ev.type)
        assert seen == ["ADDED"]
        assert time.monotonic() - start < 5, "not the 330 s of timeoutSeconds + margin"


@pytest.mark.parametrize("idle", [0.0, -1.0, float("nan")], ids=["zero", "negative", "nan"])
def test_idle_timeout_is_validated(idle: float) -> None:
    with pytest.raises(ValueError, match="idle_timeout must be > 0"):
        ResourceListerWatcher(RecordingRest(), POD, idle_timeout=idle)  # type: ignore[arg-type]
