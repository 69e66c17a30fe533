"""``--controllers`` and the CRD gate (issue 28 item 5): the flag's parsing (kube-controller-manager's
rule; every refusal names the flag), a disabled controller not registered, a controller whose CRD is
missing waiting for it — the manager built, /readyz ready with the detail — and set up once it appears."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from es_fakes import Cluster
from runtime_fakes import FakeMapper, step_until

from escaler.cli import manager as cli
from escaler.cli.controllers import CONTROLLERS, enabled_controllers
from escaler.cli.main import main
from escaler.clock import FakeClock
from escaler.errors import ConnectionFailure, StatusError
from escaler.kube.discovery import ResourceMapping
from escaler.runtime import Manager
from escaler.runtime.crdgate import READYZ_CHECK, CRDGate, Needed

pytestmark = pytest.mark.usefixtures("restore_logging")

ALL = frozenset(CONTROLLERS)
TIDAL = Needed("tidal.io/v1alpha1", "Tidal", "tidals.tidal.io")


# --- the flag -----------------------------------------------------------------------------------

PARSED = [
    ("default-star", "*", ALL),
    ("star-minus-rsg", "*,-rsg", ALL - {"rsg"}),
    ("two-names", "elasticscaler,tidal", frozenset({"elasticscaler", "tidal"})),
    ("one-name", "slo", frozenset({"slo"})),
    ("first-match-wins-disable", "-tidal,*", ALL - {"tidal"}),
    ("spaces-trimmed", " elasticscaler , llmscaler ", frozenset({"elasticscaler", "llmscaler"})),
    ("star-minus-two", "*,-slo,-llmscaler", frozenset({"elasticscaler", "tidal", "rsg"})),
]


@pytest.mark.parametrize(("value", "want"), [c[1:] for c in PARSED], ids=[c[0] for c in PARSED])
def test_enabled_controllers(value: str, want: frozenset[str]) -> None:
    assert enabled_controllers(value) == want


REFUSED = [
    ("unknown-name", "elasticscaler,hpa", "unknown controller 'hpa': valid names are elasticscaler, tidal, "
                                          "rsg, slo, llmscaler"),
    ("unknown-disabled", "*,-resourcescalinggroup", "unknown controller 'resourcescalinggroup'"),
    ("minus-star", "-*", "unknown controller '*'"),
    ("empty-item", "elasticscaler,,tidal", "empty item"),
    ("empty-value", "", "empty item"),
    ("both", "tidal,-tidal", "tidal is both enabled and disabled"),
    ("nothing-enabled", "-tidal", "enables no controller"),
    ("everything-disabled", "*,-elasticscaler,-tidal,-rsg,-slo,-llmscaler", "enables no controller"),
]


@pytest.mark.parametrize(("value", "message"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_values_exit_2_naming_the_flag(value: str, message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manager", "--webhook-port=0", f"--controllers={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("escaler manager: error: --controllers: "), err
    assert message in err


def test_flags_default_to_every_controller() -> None:
    from escaler.cli.main import build_parser
    parser, _ = build_parser()
    flags = cli.flags_from_args(parser.parse_args(["manager", "--webhook-port=0"]))
    assert flags.controllers == ALL


def test_help_lists_the_names_and_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["manager", "--help"])
    flat = " ".join(capsys.readouterr().out.split())
    assert "--controllers LIST" in flat and "(default: *)" in flat
    for name in CONTROLLERS:
        assert f"{name} (" in flat
    assert "'*,-rsg'" in flat


# --- registration -------------------------------------------------------------------------------


class HidingMapper(FakeMapper):
    """The fake RESTMapper with some kinds not served (their CRD not installed) until ``serve``."""

    def __init__(self, mappings: tuple[ResourceMapping, ...], hidden: set[str]) -> None:
        super().__init__(mappings)
        self.hidden = set(hidden)
        self.error: Exception | None = None

    def mapping_for(self, api_version: str, kind: str) -> ResourceMapping:
        if self.error is not None:
            raise self.error
        if kind in self.hidden:
            raise StatusError(404, "NotFound", f"no resource for kind {kind} in apiVersion {api_version}")
        return super().mapping_for(api_version, kind)


def _flags(*argv: str) -> cli.ManagerFlags:
    from escaler.cli.main import build_parser
    parser, _ = build_parser()
    return cli.flags_from_args(parser.parse_args(["manager", "--webhook-port=0", "--api-bind-address=0",
                                                  *argv]))


def _manager(hidden: set[str]) -> tuple[Manager, HidingMapper]:
    cluster = Cluster()
    mapper = HidingMapper(tuple(cluster.mapper._by_kind.values()), hidden)
    return Manager.for_testing(cluster.lw_factory, mapper, client=cluster.client), mapper  # type: ignore[arg-type]


def _controller(mgr: Manager, name: str) -> Any:
    return next(r for r in mgr._leaders.runnables if getattr(r, "name", None) == name)


def _controller_names(mgr: Manager) -> set[str]:
    return set(mgr._controller_names)


def test_disabled_controller_is_not_registered() -> None:
    mgr, _ = _manager(set())
    gate = cli.register_reconcilers(mgr, _flags("--controllers=*,-rsg,-slo"))
    assert gate.waiting() == {}
    assert _controller_names(mgr) == {"elasticscaler", "tidal", "llmscaler"}
    assert READYZ_CHECK not in mgr.readyz.names()  # nothing waits: no check, /readyz says "ok"
    assert mgr.readyz.evaluate() is not None


def test_missing_crd_waits_with_one_warning_and_a_ready_detail(caplog: pytest.LogCaptureFixture) -> None:
    mgr, mapper = _manager({"Tidal"})  # not started: its informers stay unstarted, no thread leaks
    with caplog.at_level(logging.WARNING, logger="escaler.runtime.crdgate"):
        gate = cli.register_reconcilers(mgr, _flags())
    assert gate.waiting() == {"tidal": ("tidals.tidal.io",)}
    assert "tidal" not in _controller_names(mgr)
    assert _controller_names(mgr) >= {"elasticscaler", "resourcescalinggroup", "llmscaler"}
    warnings = [r.getMessage() for r in caplog.records if r.name == "escaler.runtime.crdgate"]
    assert warnings == ["controller tidal is off: CRD tidals.tidal.io not installed; it starts when it "
                        "appears"]
    assert mgr.readyz.evaluate(only="controllers") == (
        True, "[+]controllers ok: controller tidal: waiting for CRD tidals.tidal.io\nreadyz check passed\n")
    assert "waiting for their CRD: tidal (tidals.tidal.io)" in cli.controllers_line(_flags(), gate)

    assert gate.check() == []  # still missing: nothing happens
    mapper.hidden.clear()  # the CRD was applied
    # the Tidal controller starts, and the scaler controllers' spec.floorFrom watch of Tidals is added
    assert gate.check() == ["elasticscaler-floors", "tidal", "llmscaler-floors"]
    assert "tidal" in _controller_names(mgr)
    for name in ("elasticscaler", "llmscaler"):
        sources = [repr(src) for src in _controller(mgr, name)._sources]
        assert "Kind(floors tidal.io/v1alpha1 Tidal)" in sources, sources
    assert gate.waiting() == {}
    assert mgr.readyz.evaluate(only="controllers") == (True, "ok")


def test_an_slo_engine_waiting_for_one_of_its_crds_does_not_hold_back_the_llmscaler() -> None:
    mgr, _ = _manager({"JobSLORequirement"})
    gate = cli.register_reconcilers(mgr, _flags())
    assert gate.waiting() == {"slo": ("jobslorequirements.llm.escaler.io",)}
    assert "llmscaler" in _controller_names(mgr)
    assert gate.detail() == "controller slo: waiting for CRD jobslorequirements.llm.escaler.io"


@pytest.mark.parametrize(("hidden", "argv", "want"), [
    (set(), (), "no LLMSLORequirement or JobSLORequirement in namespace ns defines serviceId chat"),
    ({"JobSLORequirement"}, (), "the SLO decision engine of this manager waits for CRD "
                                "jobslorequirements.llm.escaler.io"),
    (set(), ("--controllers=*,-slo",), None),
], ids=["engine-running", "engine-waiting", "engine-disabled"])
def test_the_llmscaler_reads_the_engines_decisions_or_why_there_are_none(
        hidden: set[str], argv: tuple[str, ...], want: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "setup_llmscaler", lambda mgr, **kw: seen.update(kw))
    mgr, _ = _manager(hidden)
    cli.register_reconcilers(mgr, _flags(*argv))
    lookup = seen["decisions"]
    assert (None if lookup is None else lookup("ns", "chat")) == want


def test_controllers_needing_elasticscalers_wait_for_that_crd() -> None:
    mgr, _ = _manager({"ElasticScaler"})
    gate = cli.register_reconcilers(mgr, _flags())
    assert gate.waiting() == {"elasticscaler": ("elasticscalers.elasticscaler.io",),
                              "rsg": ("elasticscalers.elasticscaler.io",),
                              "llmscaler": ("elasticscalers.elasticscaler.io",)}
    assert _controller_names(mgr) == {"tidal", "llmslorequirement", "jobslorequirement"}


def test_other_discovery_errors_still_fail_the_start() -> None:
    mgr, mapper = _manager(set())
    mapper.error = ConnectionFailure("connection refused")
    with pytest.raises(ConnectionFailure):
        cli.register_reconcilers(mgr, _flags())


# --- the gate's loop ----------------------------------------------------------------------------


@pytest.fixture
def clock() -> Iterator[FakeClock]:
    yield FakeClock()


def test_gate_rechecks_on_its_interval_and_returns_once_none_waits(clock: FakeClock) -> None:
    cluster = Cluster()
    mapper = HidingMapper(tuple(cluster.mapper._by_kind.values()), {"Tidal"})
    mgr = Manager.for_testing(cluster.lw_factory, mapper, clock=clock)
    gate = CRDGate(mgr, interval=5.0)
    calls: list[str] = []
    assert gate.add("tidal", [TIDAL], lambda: calls.append("setup")) is False
    stop = threading.Event()
    t = threading.Thread(target=gate.start, args=(stop,), daemon=True)
    t.start()
    try:
        clock.block_until_waiters(1)
        clock.step(5.0)
        clock.block_until_waiters(1)  # checked, still missing: parked for the next interval
        assert calls == []
        mapper.hidden.clear()
        step_until(clock, lambda: calls == ["setup"], step=5.0, what="the late setup")
        t.join(5)
        assert not t.is_alive()  # none waits any more: the runnable returned
    finally:
        stop.set()
        t.join(5)


def test_gate_keeps_waiting_through_a_discovery_outage(clock: FakeClock) -> None:
    cluster = Cluster()
    mapper = HidingMapper(tuple(cluster.mapper._by_kind.values()), {"Tidal"})
    mgr = Manager.for_testing(cluster.lw_factory, mapper, clock=clock)
    gate = CRDGate(mgr)
    calls: list[str] = []
    gate.add("tidal", [TIDAL], lambda: calls.append("setup"))
    mapper.error = ConnectionFailure("connection refused")
    assert gate.check() == [] and gate.waiting() == {"tidal": ("tidals.tidal.io",)}
    mapper.error = None
    mapper.hidden.clear()
    assert gate.check() == ["tidal"] and calls == ["setup"]


def test_an_optional_entry_waits_quietly(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster()
    mapper = HidingMapper(tuple(cluster.mapper._by_kind.values()), {"Tidal"})
    mgr = Manager.for_testing(cluster.lw_factory, mapper, clock=clock)
    gate = CRDGate(mgr)
    calls: list[str] = []
    with caplog.at_level(logging.INFO, logger="escaler.runtime.crdgate"):
        assert gate.add("es-floors", [TIDAL], lambda: calls.append("wired"), optional=True,
                        label="spec.floorFrom of controller elasticscaler") is False
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "spec.floorFrom of controller elasticscaler is off: CRD tidals.tidal.io not installed; it "
                 "starts when it appears")]
    assert gate.waiting() == {} and gate.detail() == ""
    assert mgr.readyz.evaluate(only=READYZ_CHECK) == (True, "ok")
    mapper.hidden.clear()
    assert gate.check() == ["es-floors"] and calls == ["wired"]


@pytest.mark.parametrize("interval", [0.0, -1.0, float("inf"), float("nan")],
                         ids=["zero", "negative", "inf", "nan"])
def test_gate_interval_must_be_positive(interval: float) -> None:
    cluster = Cluster()
    with pytest.raises(ValueError, match=r"CRDGate\.interval"):
        CRDGate(Manager.for_testing(cluster.lw_factory, cluster.mapper), interval=interval)


# --- a readiness check's detail (escaler.runtime.health) ---------------------------------------


def _boom() -> str:
    raise RuntimeError("detail broke")


DETAILS = [
    ("passing-no-detail", True, lambda: "", (True, "ok")),
    ("passing-with-detail", True, lambda: "controller tidal: waiting",
     (True, "[+]a ok\n[+]b ok: controller tidal: waiting\nreadyz check passed\n")),
    ("failing-with-detail", False, lambda: "why\nsplit",
     (False, "[+]a ok\n[-]b failed: why split\nreadyz check failed\n")),
    ("detail-raises", True, _boom, (True, "ok")),
]


@pytest.mark.parametrize(("passes", "detail", "want"), [c[1:] for c in DETAILS], ids=[c[0] for c in DETAILS])
def test_readyz_detail(passes: bool, detail: Any, want: tuple[bool, str]) -> None:
    from escaler.runtime.health import HealthChecks
    checks = HealthChecks("readyz")
    checks.add("a", lambda: True)
    checks.add("b", lambda: passes, detail=detail)
    assert checks.evaluate() == want
