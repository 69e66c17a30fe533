"""Named health checks behind ``/healthz`` and ``/readyz`` (controller-runtime's ``healthz``).

Contract:

* A check is a callable of no arguments returning ``True`` when healthy. Returning ``False`` or
  raising marks it failing (the exception text is logged, never served: probe endpoints are
  often reachable from outside the pod). Checks must be fast and non-blocking.
* ``HealthChecks.evaluate()`` runs every check, in registration order, and returns
  ``(ok, body)``: ``ok`` is True when every check passes (and vacuously when none is registered);
  the body is ``"ok"`` on success, otherwise one line per check, ``[+]name ok`` or
  ``[-]name failed``, followed by ``"<kind> check failed"`` — Kubernetes' healthz format. The
  server answers 200 or 500 accordingly. ``evaluate(only=name)`` serves ``/healthz/<name>``.
* A check may carry a *detail* (``add(name, check, detail=fn)``): ``fn()`` returns a line of
  text, or ``""`` when there is nothing to say. A detail is information, not a verdict (e.g. the
  manager's ``controllers`` check: which controller waits for which CRD, while the others serve).
  While any detail is non-empty the body is verbose even when every check passes: one line per
  check, the detail after it (``[+]name ok: <detail>``), then ``"<kind> check passed"``; with no
  detail a passing body stays ``"ok"``.
* Names are unique per set; adding a duplicate is a ``ValueError``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["Check", "Detail", "HealthChecks", "ping"]

Check = Callable[[], bool]
# a check's detail: a line of text, "" when there is nothing to say
Detail = Callable[[], str]

_log = logging.getLogger(__name__)


def ping() -> bool:
    """The always-passing liveness check (controller-runtime's ``healthz.Ping``)."""
    return True


class HealthChecks:
    """An ordered, thread-safe set of named checks for one endpoint."""

    def __init__(self, kind: str) -> None:
        # the endpoint's name ("healthz" / "readyz"), used in the failure body
        self.kind = kind
        # guards _checks
        self._mu = threading.Lock()
        # name → (check, detail or None), in registration order; names are unique and non-empty,
        # without "/"
        self._checks: dict[str, tuple[Check, Detail | None]] = {}

    def add(self, name: str, check: Check, detail: Detail | None = None) -> None:
        if not name or "/" in name:
            raise ValueError(f"{self.kind} check name: must be non-empty and contain no '/', got {name!r}")
        with self._mu:
            if name in self._checks:
                raise ValueError(f"{self.kind} check {name!r}: already registered")
            self._checks[name] = (check, detail)

    def names(self) -> list[str]:
        with self._mu:
            return list(self._checks)

    def evaluate(self, only: str | None = None) -> tuple[bool, str] | None:
        """Run the checks (or just ``only``); ``None`` when ``only`` names no check."""
        with self._mu:
            checks = list(self._checks.items())
        if only is not None:
            checks = [(n, c) for n, c in checks if n == only]
            if not checks:
                return None
        lines: list[str] = []
        ok = True
        detailed = False
        for name, (check, detail) in checks:
            try:
                passed = bool(check())
            except Exception as exc:
                _log.warning("%s check %s failed: %s", self.kind, name, exc)
                passed = False
            ok = ok and passed
            line = f"[+]{name} ok" if passed else f"[-]{name} failed"
            note = _detail_of(self.kind, name, detail)
            if note:
                detailed = True
                line += f": {note}"
            lines.append(line)
        if ok and not detailed:
            return True, "ok"
        return ok, "\n".join([*lines, f"{self.kind} check {'passed' if ok else 'failed'}"]) + "\n"


def _detail_of(kind: str, name: str, detail: Detail | None) -> str:
    """The detail's text, on one line; "" without one (or when it raises: logged, never served)."""
    if detail is None:
        return ""
    try:
        return " ".join(str(detail()).split())
    except Exception as exc:
        _log.warning("%s check %s: detail failed: %s", kind, name, exc)
        return ""
