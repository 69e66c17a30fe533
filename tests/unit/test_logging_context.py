"""Structured logs of a reconcile (docs/operations.md, issue 14): every line a reconciler logs carries the
controller, the object's namespace/name and a reconcile id unique per reconcile call — as fields
in ``--log-format=json``, as a compact ``[controller ns/name id]`` prefix in ``console`` — with no
change to the reconciler (the runtime's controller sets the context around each call)."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from fakeapi import wait_until
from runtime_fakes import SpyQueue

from escaler.cli.logging_setup import SHORT_ID, setup_logging
from escaler.clock import FakeClock
from escaler.runtime.controller import Controller
from escaler.runtime.metrics import MetricsRegistry
from escaler.runtime.types import ReconcileError, Request, Result

_reconciler_log = logging.getLogger("escaler.test.plainreconciler")


class PlainReconciler:
    """A reconciler that knows nothing of log context: it logs its message and nothing else."""

    def __init__(self, fail_on: str = "") -> None:
        self.calls = 0
        self._fail_on = fail_on
        self._mu = threading.Lock()

    def reconcile(self, request: Request) -> Result:
        _reconciler_log.info("reconciling")
        with self._mu:
            self.calls += 1
        if request.name == self._fail_on:
            raise ReconcileError("target unreachable")
        return Result()

    def reached(self, n: int) -> Callable[[], bool]:
        def done() -> bool:
            with self._mu:
                return self.calls >= n
        return done


pytestmark = pytest.mark.usefixtures("restore_logging")


def run_reconciles(rec: PlainReconciler, requests: list[Request], fmt: str) -> list[str]:
    """Reconcile ``requests`` one after the other on a real controller; the log lines written."""
    out = io.StringIO()
    setup_logging(fmt, "info", stream=out)
    clock = FakeClock()
    ctrl = Controller("widgets", rec, queue=SpyQueue(clock, "widgets"), max_concurrent_reconciles=1,
                      clock=clock, metrics=MetricsRegistry().controller("widgets"), shutdown_timeout=10.0)
    stop = threading.Event()
    worker = threading.Thread(target=ctrl.start, args=(stop,), daemon=True)
    worker.start()
    try:
        for n, req in enumerate(requests, start=1):
            ctrl.enqueue(req)
            wait_until(rec.reached(n), what=f"reconcile {n}")
    finally:
        stop.set()
        worker.join(10)
    assert not worker.is_alive()
    return out.getvalue().splitlines()


def test_json_lines_of_two_reconciles_carry_context_and_distinct_ids() -> None:
    rec = PlainReconciler()
    lines = run_reconciles(rec, [Request("team-a", "llama"), Request("team-a", "llama")], "json")
    docs: list[dict[str, Any]] = [json.loads(line) for line in lines]
    mine = [d for d in docs if d["logger"] == _reconciler_log.name]
    assert len(mine) == 2
    for d in mine:
        assert d["message"] == "reconciling"
        assert (d["controller"], d["namespace"], d["name"]) == ("widgets", "team-a", "llama")
    ids = [d["reconcileID"] for d in mine]
    assert all(isinstance(i, str) and len(i) >= SHORT_ID for i in ids)
    assert ids[0] != ids[1]


def test_the_controllers_own_error_line_has_the_same_id_as_the_reconcilers_line() -> None:
    rec = PlainReconciler(fail_on="broken")
    lines = run_reconciles(rec, [Request("team-b", "broken")], "json")
    docs = [json.loads(line) for line in lines]
    mine = next(d for d in docs if d["logger"] == _reconciler_log.name)
    error = next(d for d in docs if d["level"] == "error")
    assert "target unreachable" in error["message"]
    assert error["reconcileID"] == mine["reconcileID"]
    assert (error["controller"], error["namespace"], error["name"]) == ("widgets", "team-b", "broken")


def test_console_lines_carry_a_compact_prefix() -> None:
    rec = PlainReconciler()
    lines = run_reconciles(rec, [Request("team-a", "llama"), Request("team-a", "qwen")], "console")
    mine = [line for line in lines if f" {_reconciler_log.name} reconciling" in line]
    assert len(mine) == 2
    prefixes = []
    for line, name in zip(mine, ("llama", "qwen"), strict=True):
        start = line.index("[")
        prefix = line[start:line.index("]", start) + 1]
        controller, obj, rid = prefix.strip("[]").split(" ")
        assert (controller, obj) == ("widgets", f"team-a/{name}")
        assert len(rid) == SHORT_ID and all(c in "0123456789abcdef" for c in rid)
        # the context is in the prefix only, not repeated as key=value pairs
        assert "reconcileID=" not in line and "controller=" not in line
        prefixes.append(rid)
    assert prefixes[0] != prefixes[1]


def test_lines_outside_a_reconcile_have_no_context() -> None:
    out = io.StringIO()
    setup_logging("json", "info", stream=out)
    logging.getLogger("escaler.test.outside").info("hello")
    doc = json.loads(out.getvalue())
    assert not {"controller", "namespace", "name", "reconcileID"} & doc.keys()
