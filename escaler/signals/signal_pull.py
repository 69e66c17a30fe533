"""SignalTrigger pull (docs/guide/elasticscaler.md#the-triggers): ``GET endpoint`` → ``{"active": bool,
"replicas": int?}``.

``pull_signal(client, endpoint, timeout=...)`` returns a ``SignalReading``:

* ``active``: the endpoint's ``active``, a JSON boolean (required; ``1``/``"true"`` are refused);
* ``replicas``: the endpoint's ``replicas`` when present and not null, a JSON integer >= 0 (a bool
  or a float such as ``2.0`` is refused);
* other keys are ignored (an endpoint may say more than escaler reads);
* ``error``: set, with ``active`` and ``replicas`` both ``None``, when the request failed (refused
  host or address, timeout, connection failure, HTTP status other than 200, or a body larger
  than ``MAX_SIGNAL_BYTES``) or the body is not such an object.

**No echo**: an error names the HTTP status, the body's size and the rule a value broke (with
the JSON type it had), never bytes of the body: the endpoint is user-named and may be any server
the manager can reach, and these messages reach status and Events.

An error is never "inactive": ``active is None`` then, so a caller cannot mistake an unreachable
gateway for an idle one and scale a service to zero because of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from escaler.clock import Clock
from escaler.errors import cap_body
from escaler.signals.fetch import FetchError, HostAllowed, HttpClient, fetch

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
    client: HttpClient,
    endpoint: str,
    *,
    timeout: float = DEFAULT_SIGNAL_PULL_TIMEOUT_SECONDS,
    bearer_token: str | None = None,
    allowed: HostAllowed | None = None,
    clock: Clock | None = None,
) -> SignalReading:
    """Poll one signal endpoint; never raises for what the endpoint does."""
    try:
        resp = fetch(client, endpoint, timeout=timeout, bearer_token=bearer_token, allowed=allowed,
                     max_bytes=MAX_SIGNAL_BYTES, clock=clock)
    except FetchError as err:
        return SignalReading.fail(f"signal endpoint: {err}")
    if resp.status != 200:
        return SignalReading.fail(f"signal endpoint {endpoint}: HTTP {resp.status}, {len(resp.body)} bytes")
    return parse_signal(resp.body, where=f"signal endpoint {endpoint}")


def parse_signal(body: bytes | str, *, where: str = "signal") -> SignalReading:
    """Strictly parse ``{"active": bool, "replicas": int?}``; pure."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # a body nested 100k deep is not a signal either
        return SignalReading.fail(f'{where}: the body is not JSON (want {{"active": true|false}}; got '
                                  f"{len(body)} bytes)")
    if not isinstance(doc, Mapping):
        return SignalReading.fail(f'{where}: the body is not a JSON object (want {{"active": true|false}})')
    active = doc.get("active")
    if not isinstance(active, bool):
        return SignalReading.fail(f"{where}: \"active\" must be a JSON boolean, got {_json_type(active)}")
    replicas = doc.get("replicas")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0):
        what = "a negative integer" if isinstance(replicas, int) and not isinstance(replicas, bool) \
            else _json_type(replicas)
        return SignalReading.fail(f"{where}: \"replicas\" must be an integer >= 0, got {what}")
    return SignalReading(active, replicas)


def _json_type(value: object) -> str:
    """The JSON type of a parsed value, never the value itself (no echo)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number that is not an integer"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
