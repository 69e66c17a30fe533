"""SignalTrigger pull (SPEC §5.5): ``GET endpoint`` → ``{"active": bool, "replicas": int?}``.

``pull_signal(session, endpoint, timeout=...)`` returns a ``SignalReading``:

* ``active``: the endpoint's ``active``, a JSON boolean (required; ``1``/``"true"`` are refused);
* ``replicas``: the endpoint's ``replicas`` when present and not null, a JSON integer >= 0 (a bool
  or a float such as ``2.0`` is refused);
* other keys are ignored (an endpoint may say more than escaler reads);
* ``error``: set, with ``active`` and ``replicas`` both ``None``, when the request failed (refused
  host, timeout, connection failure, HTTP status other than 200 — its body capped at 1 KiB — or a
  body larger than ``MAX_SIGNAL_BYTES``) or the body is not such an object.

An error is never "inactive": ``active is None`` then, so a caller cannot mistake an unreachable
gateway for an idle one and scale a service to zero because of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import requests

from escaler.clock import Clock
from escaler.errors import cap_body
from escaler.signals.fetch import FetchError, HostAllowed, fetch

__all__ = ["DEFAULT_SIGNAL_PULL_TIMEOUT_SECONDS", "MAX_SIGNAL_BYTES", "SignalReading", "parse_signal",
           "pull_signal"]

DEFAULT_SIGNAL_PULL_TIMEOUT_SECONDS = 5.0
# a signal is a few dozen bytes; anything much larger is not one
MAX_SIGNAL_BYTES = 64 * 1024


@dataclass(frozen=True)
class SignalReading:
    # whether the service has activity; None exactly when error is set
    active: bool | None
    # replicas the endpoint asks for; None when it names none (or on error)
    replicas: int | None = None
    # why there is no reading, capped at 1 KiB; None on success
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.active is None) == (self.error is None):
            raise ValueError(f"SignalReading: exactly one of active and error must be set, got {self!r}")
        if self.error is not None:
            object.__setattr__(self, "error", cap_body(self.error))

    @classmethod
    def fail(cls, message: str) -> SignalReading:
        return cls(None, None, message or "unknown error")


def pull_signal(
    session: requests.Session,
    endpoint: str,
    *,
    timeout: float = DEFAULT_SIGNAL_PULL_TIMEOUT_SECONDS,
    bearer_token: str | None = None,
    allowed: HostAllowed | None = None,
    clock: Clock | None = None,
) -> SignalReading:
    """Poll one signal endpoint; never raises for what the endpoint does."""
    try:
        resp = fetch(session, endpoint, timeout=timeout, bearer_token=bearer_token, allowed=allowed,
                     max_bytes=MAX_SIGNAL_BYTES, clock=clock)
    except FetchError as err:
        return SignalReading.fail(f"signal endpoint: {err}")
    if resp.status != 200:
        return SignalReading.fail(f"signal endpoint {endpoint}: HTTP {resp.status}: "
                                  f"{cap_body(resp.body) or '(empty body)'}")
    return parse_signal(resp.body, where=f"signal endpoint {endpoint}")


def parse_signal(body: bytes | str, *, where: str = "signal") -> SignalReading:
    """Strictly parse ``{"active": bool, "replicas": int?}``; pure."""
    try:
        doc = json.loads(body)
    except ValueError:
        return SignalReading.fail(f'{where}: the body is not JSON (want {{"active": true|false}}): '
                                  f"{cap_body(body)}")
    if not isinstance(doc, Mapping):
        return SignalReading.fail(f'{where}: the body is not a JSON object (want {{"active": true|false}})')
    active = doc.get("active")
    if not isinstance(active, bool):
        return SignalReading.fail(f"{where}: \"active\" must be a JSON boolean, "
                                  f"got {json.dumps(active)[:100]}")
    replicas = doc.get("replicas")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0):
        return SignalReading.fail(f"{where}: \"replicas\" must be an integer >= 0, "
                                  f"got {json.dumps(replicas)[:100]}")
    return SignalReading(active, replicas)
