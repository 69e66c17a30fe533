"""The Lease lock of leader election (client-go's ``resourcelock.LeaseLock``).

What the elector (``escaler.runtime.leaderelection``) stands on, split out as client-go splits
``resourcelock`` from ``leaderelection``:

* ``LeaderElectionRecord`` — the election state kept in a ``coordination.k8s.io/v1`` Lease's
  spec; ``renewTime``/``acquireTime`` are ``metav1.MicroTime`` (RFC 3339, UTC, 6 fraction
  digits: ``format_micro_time``/``parse_micro_time``) and informative only — expiry is judged on
  each candidate's own monotonic clock.
* ``LeaseClient`` — the three Lease calls (get/create/update). Every call takes ``timeout``: the
  caller's *remaining budget* in seconds (``None``: no budget, the client's own per-call bound
  applies). A client never spends more than ``min(its per-call timeout, timeout)`` on one call,
  connect, retries and reading included.
* ``LeaseLock`` — optimistic concurrency over one Lease: every update carries the
  ``resourceVersion`` last read or written, so a 409 means another candidate wrote first.
* ``KubeLeaseClient`` — ``LeaseClient`` over the API server. Its requests are sent *without*
  urllib3 retries (``RestClient.request(retries=False)``) and with one total timeout per call, so
  a renewal can never outlive the elector's deadline by a connect retry or a second read timeout.
  ``stream`` watches the one Lease for a waiting candidate (``escaler.runtime.leasewatch``).

The in-memory ``LeaseClient`` used by tests lives in ``tests/unit/lease_fakes.py``.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from escaler.errors import StatusError, is_not_found
from escaler.kube.discovery import ResourceMapping
from escaler.kube.dynamic import DynamicClient, resource_path
from escaler.kube.rest import RestClient

__all__ = [
    "LEASE_API_VERSION",
    "LEASE_MAPPING",
    "KubeLeaseClient",
    "LeaderElectionRecord",
    "LeaseClient",
    "LeaseLock",
    "format_micro_time",
    "parse_micro_time",
]

LEASE_API_VERSION = "coordination.k8s.io/v1"
# Fixed: Leases need no discovery round trip (and must work while discovery is failing).
LEASE_MAPPING = ResourceMapping("coordination.k8s.io", "v1", "leases", "Lease", True, frozenset())


def format_micro_time(when: datetime) -> str:
    """``metav1.MicroTime``: RFC 3339 in UTC with exactly 6 fraction digits."""
    if when.tzinfo is None:
        raise ValueError("format_micro_time: datetime must be timezone-aware")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: object) -> datetime | None:
    """Parse a MicroTime/Time string; ``None`` for absent or malformed values (they are informative only)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LeaderElectionRecord:
    """The election state kept in a Lease's spec (client-go's ``LeaderElectionRecord``)."""

    # who holds the lease; "" when released or never held
    holder_identity: str = ""
    # how long, from when a candidate observes this record, the holder's claim stays live
    lease_duration_seconds: int = 0
    # when the current holder acquired the lease (informative)
    acquire_time: datetime | None = None
    # when the holder last renewed (informative: expiry uses the observer's monotonic clock)
    renew_time: datetime | None = None
    # how many times the holder changed
    leader_transitions: int = 0

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "leaseTransitions": self.leader_transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = format_micro_time(self.acquire_time)
        if self.renew_time is not None:
            spec["renewTime"] = format_micro_time(self.renew_time)
        return spec

    @classmethod
    def from_spec(cls, spec: object) -> LeaderElectionRecord:
        s = spec if isinstance(spec, dict) else {}
        duration = s.get("leaseDurationSeconds")
        transitions = s.get("leaseTransitions")
        return cls(
            holder_identity=str(s.get("holderIdentity") or ""),
            lease_duration_seconds=int(duration) if isinstance(duration, int | float) else 0,
            acquire_time=parse_micro_time(s.get("acquireTime")),
            renew_time=parse_micro_time(s.get("renewTime")),
            leader_transitions=int(transitions) if isinstance(transitions, int | float) else 0,
        )


class LeaseClient(Protocol):
    """The three Lease calls the lock needs. Errors are ``StatusError`` (404, 409, ...) or
    ``ConnectionFailure``. ``timeout``: the caller's remaining budget (see the module docstring)."""

    def get(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        """The Lease, or ``None`` when it does not exist."""
        ...

    def create(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        """Create; 409 AlreadyExists if another candidate created it first."""
        ...

    def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        """Replace, conditional on ``metadata.resourceVersion``; 409 Conflict when it is stale."""
        ...


class LeaseLock:
    """A resource lock on one Lease (client-go's ``resourcelock.LeaseLock``). Not thread-safe:
    owned by one ``LeaderElector``. ``timeout`` on each call is passed to the ``LeaseClient``."""

    def __init__(self, client: LeaseClient, namespace: str, name: str) -> None:
        if not namespace:
            raise ValueError("LeaseLock.namespace: must not be empty")
        if not name:
            raise ValueError("LeaseLock.name: must not be empty")
        # the API access; never None
        self._client = client
        # the Lease's coordinates; fixed
        self.namespace = namespace
        self.name = name
        # the Lease as last read or written (its resourceVersion guards our next update);
        # None until the first successful get/create
        self._lease: dict[str, Any] | None = None

    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    def get(self, *, timeout: float | None = None) -> LeaderElectionRecord | None:
        """Read the record; ``None`` when the Lease does not exist."""
        lease = self._client.get(self.namespace, self.name, timeout=timeout)
        if lease is None:
            return None
        self._lease = copy.deepcopy(lease)
        return LeaderElectionRecord.from_spec(lease.get("spec"))

    def create(self, record: LeaderElectionRecord, *, timeout: float | None = None) -> None:
        obj = {
            "apiVersion": LEASE_API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.to_spec(),
        }
        self._lease = copy.deepcopy(self._client.create(obj, timeout=timeout))

    def update(self, record: LeaderElectionRecord, *, timeout: float | None = None) -> None:
        """Write ``record`` over the Lease last seen; 409 if it changed since."""
        if self._lease is None:
            raise RuntimeError("LeaseLock.update: lease not initialised, call get or create first")
        obj = copy.deepcopy(self._lease)
        obj["spec"] = {**(obj.get("spec") or {}), **record.to_spec()}
        self._lease = copy.deepcopy(self._client.update(obj, timeout=timeout))


class KubeLeaseClient:
    """``LeaseClient`` over the API server.

    Every request is bounded by ``min(timeout, the caller's budget)`` seconds *in total* (one
    urllib3 total timeout, no transport retries): an attempt that hangs must not outlive the renew
    deadline, or a leader could keep believing it leads after a standby took over. The manager
    passes ``renew_deadline / 2``, as controller-runtime does.
    """

    def __init__(self, client: DynamicClient | RestClient, *, timeout: float) -> None:
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"KubeLeaseClient.timeout: must be > 0, got {timeout}")
        # the manager's REST client (a DynamicClient's); fixed
        self._rest: RestClient = client.rest if isinstance(client, DynamicClient) else client
        # the per-call bound in seconds (connect + response); fixed
        self._timeout = timeout

    def _bound(self, budget: float | None) -> float:
        if budget is None:
            return self._timeout
        if not budget > 0:  # also NaN
            raise ValueError(f"KubeLeaseClient: the caller's timeout budget must be > 0, got {budget}")
        return min(self._timeout, budget)

    def get(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        try:
            return self._rest.request("GET", resource_path(LEASE_MAPPING, namespace, name),
                                      timeout=self._bound(timeout), retries=False)
        except StatusError as exc:
            if is_not_found(exc):
                return None
            raise

    def create(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        ns = str((obj.get("metadata") or {}).get("namespace") or "")
        return self._rest.request("POST", resource_path(LEASE_MAPPING, ns), body=obj,
                                  timeout=self._bound(timeout), retries=False)

    def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        md = obj.get("metadata") or {}
        path = resource_path(LEASE_MAPPING, str(md.get("namespace") or ""), str(md.get("name") or ""))
        return self._rest.request("PUT", path, body=obj, timeout=self._bound(timeout), retries=False)

    def stream(self, namespace: str, name: str, *,
               timeout_seconds: int) -> tuple[Iterator[dict[str, Any]], Callable[[], None]]:
        """Watch the one Lease (``escaler.runtime.leasewatch.LeaseStreamer``): decoded events, close."""
        query = [("watch", "1"), ("fieldSelector", f"metadata.name={name}"),
                 ("timeoutSeconds", str(timeout_seconds))]
        # the server ends the request after timeout_seconds; a silent connection past that is dead
        lines, close = self._rest.stream_lines(resource_path(LEASE_MAPPING, namespace), query,
                                               timeout_seconds + self._timeout)
        return _decoded(lines), close


def _decoded(lines: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    for line in lines:
        event = json.loads(line)
        if isinstance(event, dict):
            yield event
