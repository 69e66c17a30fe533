"""``CRDGate``: a controller whose CRD is not installed waits for it instead of stopping the manager.

Contract:

* ``gate.add(name, needs, setup)`` checks, through the manager's RESTMapper (discovery), whether
  every kind of ``needs`` is served. If so it calls ``setup()`` at once (what a manager without a
  gate does) and returns True. If not, the controller is *waiting*: ``setup`` is kept, one WARNING
  names the controller and the missing CRD(s) and says the controller is off until they appear,
  and ``add`` returns False. Only "not served" (discovery's 404) makes a controller wait; any other
  error (the API server unreachable, a 403) propagates, as it would without the gate.
* The first waiting controller adds the gate to the manager: as a *non-leader* runnable, and as the
  ``/readyz`` check ``controllers``, which **passes** and carries the detail ``controller tidal:
  waiting for CRD tidals.tidal.io`` (one clause per waiting controller, ``; ``-separated) — a missing
  optional component must not make the pod unready while the other controllers serve; a readiness
  gate that failed would also hold a rolling update forever on a cluster that never installs it.
* Running, the gate re-checks discovery every ``interval`` seconds of the manager's clock while a
  controller waits (one discovery GET per missing group-version and check, no RBAC beyond the
  discovery every authenticated user has: the manager's ClusterRole may only ``get`` CRDs, and a
  served kind — not a stored CRD object, which may not be Established yet — is what the controller's
  informer needs). When every kind of a controller is served, ``setup()`` runs on the gate's thread,
  the informers it asked for are started (``Manager.start_new_informers``), an INFO line says the
  controller started, and its detail goes. The gate's thread returns once none waits.
* **Leader election is kept**: ``setup`` registers controllers the usual way (``ControllerBuilder``,
  ``Manager.add``): leader runnables, started at once on the leader and on election on a standby —
  where the late setup still runs, so the standby's caches are warm when it takes over.
* ``optional=True`` (e.g. a controller's ``spec.floorFrom`` watch of Tidals, a feature of a running
  controller rather than a controller) waits the same way but quietly: an INFO line instead of the
  WARNING, and neither in ``waiting()`` nor on ``/readyz`` — a cluster that never installs the kind
  is not missing anything it asked for. ``label`` names an entry in the log (default ``controller
  <name>``).
* A ``setup`` that raises ends the gate's runnable with that error: the manager reports it and exits
  1 (as the same error at start would), rather than run with a half-registered controller.

Thread-safe: the waiting table is guarded by a lock, never held across discovery or a setup.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from escaler.errors import is_not_found
from escaler.runtime.manager import Manager

__all__ = ["DEFAULT_RECHECK_INTERVAL", "READYZ_CHECK", "CRDGate", "Needed"]

# seconds between discovery re-checks while a controller waits: a CRD applied after the manager is
# picked up within this (plus the RESTMapper's own 5 s miss throttle, which this is not below)
DEFAULT_RECHECK_INTERVAL = 5.0
# the /readyz check the waiting controllers are listed under
READYZ_CHECK = "controllers"

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Needed:
    """One kind a controller needs served, and the CRD that serves it (for messages)."""

    api_version: str
    kind: str
    # "<plural>.<group>", the CRD's metadata.name
    crd: str


@dataclass
class _Waiting:
    # the kinds the controller needs, all of them (re-checked each time)
    needs: tuple[Needed, ...]
    # what registers the controller on the manager
    setup: Callable[[], object]
    # the CRDs found missing at the last check, in ``needs`` order; never empty while waiting
    missing: tuple[str, ...]
    # how the log names it ("controller tidal")
    label: str
    # not a controller: logged at INFO, not listed by waiting() nor on /readyz
    optional: bool = False


class CRDGate:
    """Controllers set up once the kinds they need are served; see the module docstring."""

    def __init__(self, mgr: Manager, *, interval: float = DEFAULT_RECHECK_INTERVAL) -> None:
        if not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"CRDGate.interval: must be a finite number > 0, got {interval!r}")
        # the manager whose mapper answers and whose runnables the controllers become; fixed
        self._mgr = mgr
        # seconds of mgr.clock between re-checks; fixed
        self._interval = interval
        # guards _waiting and _installed
        self._mu = threading.Lock()
        # controller name → what it waits for, in add order; a controller leaves it once set up
        self._waiting: dict[str, _Waiting] = {}
        # True once the gate was added to the manager (runnable and readyz check), never reset
        self._installed = False

    def add(self, name: str, needs: Sequence[Needed], setup: Callable[[], object], *,
            optional: bool = False, label: str = "") -> bool:
        """Set ``name`` up now if every kind of ``needs`` is served (True), else wait for them (False)."""
        missing = self._missing(needs)
        if not missing:
            setup()
            return True
        label = label or f"controller {name}"
        with self._mu:
            if name in self._waiting:
                raise ValueError(f"CRDGate.add: {name!r} is already waiting")
            self._waiting[name] = _Waiting(tuple(needs), setup, missing, label, optional)
            install = not self._installed
            self._installed = True
        _log.log(logging.INFO if optional else logging.WARNING,
                 "%s is off: CRD %s not installed; it starts when %s", label,
                 " and ".join(missing), "it appears" if len(missing) == 1 else "they appear",
                 extra={"controller": name, "missingCRDs": list(missing)})
        if install:
            self._mgr.add_readyz_check(READYZ_CHECK, lambda: True, detail=self.detail)
            self._mgr.add(self, needs_leader_election=False)
        return False

    def waiting(self) -> dict[str, tuple[str, ...]]:
        """Controller name → the CRDs it waits for (as last checked); optional entries left out."""
        with self._mu:
            return {name: w.missing for name, w in self._waiting.items() if not w.optional}

    def detail(self) -> str:
        """The readiness detail: ``controller <name>: waiting for CRD <crd>`` per waiting controller."""
        return "; ".join(f"controller {name}: waiting for CRD {' and '.join(crds)}"
                         for name, crds in self.waiting().items())

    def check(self) -> list[str]:
        """One pass: set up every waiting controller whose kinds are all served now; their names."""
        with self._mu:
            pending = list(self._waiting.items())
        started: list[str] = []
        for name, w in pending:
            try:
                missing = self._missing(w.needs)
            except Exception as exc:  # discovery unreachable for now: the next pass retries
                _log.warning("%s: cannot check for CRD %s yet: %s", w.label, " and ".join(w.missing),
                             exc, extra={"controller": name})
                continue
            if missing:
                with self._mu:
                    w.missing = missing
                continue
            w.setup()
            with self._mu:
                del self._waiting[name]
            self._mgr.start_new_informers()
            _log.info("%s: CRD %s installed, %s", w.label, " and ".join(n.crd for n in w.needs),
                      "on" if w.optional else "controller started", extra={"controller": name})
            started.append(name)
        return started

    def start(self, stop: threading.Event) -> None:
        """Re-check every ``interval`` until nothing waits (optional entries too) or ``stop`` is set."""
        while self._pending() and not self._mgr.clock.sleep(self._interval, stop):
            self.check()

    def _pending(self) -> bool:
        with self._mu:
            return bool(self._waiting)

    def _missing(self, needs: Sequence[Needed]) -> tuple[str, ...]:
        missing: list[str] = []
        for n in needs:
            try:
                self._mgr.mapper.mapping_for(n.api_version, n.kind)
            except Exception as exc:
                if not is_not_found(exc):
                    raise
                missing.append(n.crd)
        return tuple(missing)
