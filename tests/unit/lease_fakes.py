"""In-memory Lease clients for leader-election tests (moved out of ``escaler.runtime``: only
tests use them).

* ``InMemoryLeaseClient``: a thread-safe Lease store with real resourceVersion semantics; several
  electors sharing one instance behave like replicas sharing a cluster. It accepts (and records,
  in ``timeouts``) the ``timeout`` budget every ``LeaseClient`` call carries.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from escaler.errors import StatusError


class InMemoryLeaseClient:
    """A ``LeaseClient`` over a dict; see the module docstring."""

    def __init__(self) -> None:
        # guards _objects, _rv and timeouts
        self._mu = threading.Lock()
        # (namespace, name) → stored Lease (deep copies in and out)
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}
        # last resourceVersion handed out; strictly increasing
        self._rv = 0
        # (method, timeout budget) of every call, in order
        self.timeouts: list[tuple[str, float | None]] = []

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _note(self, method: str, timeout: float | None) -> None:
        with self._mu:
            self.timeouts.append((method, timeout))

    def get(self, namespace: str, name: str, *, timeout: float | None = None) -> dict[str, Any] | None:
        self._note("get", timeout)
        with self._mu:
            obj = self._objects.get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def create(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        self._note("create", timeout)
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._mu:
            if key in self._objects:
                raise StatusError(409, "AlreadyExists", f'leases "{key[1]}" already exists')
            stored = copy.deepcopy(obj)
            stored["metadata"] = {**meta, "resourceVersion": self._next_rv()}
            self._objects[key] = stored
            return copy.deepcopy(stored)

    def update(self, obj: dict[str, Any], *, timeout: float | None = None) -> dict[str, Any]:
        self._note("update", timeout)
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        with self._mu:
            current = self._objects.get(key)
            if current is None:
                raise StatusError(404, "NotFound", f'leases "{key[1]}" not found')
            if meta.get("resourceVersion") != current["metadata"]["resourceVersion"]:
                raise StatusError(
                    409, "Conflict",
                    f'Operation cannot be fulfilled on leases "{key[1]}": the object has been modified',
                )
            stored = copy.deepcopy(obj)
            stored["metadata"] = {**meta, "resourceVersion": self._next_rv()}
            self._objects[key] = stored
            return copy.deepcopy(stored)
