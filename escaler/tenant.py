"""The tenant an outbound call is made for: a context variable, set by whoever runs the call.

Shared pools a call draws on (the host-name lookup threads of ``escaler.signals.fetch``) bound
each tenant's share; they learn the tenant from here, not from every caller's arguments.

Contract:

* ``for_tenant(name)`` is a context manager: inside it (in this thread or task), ``current()``
  is ``name``; outside any, ``current()`` is None (the manager's own calls: no tenant's budget).
* The outbound executor (``escaler.runtime.executor.KeyedExecutor``) runs every job inside
  ``for_tenant(<the job's group>)``: a namespace, for every reconciler's reads.

This module imports nothing of escaler.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["current", "for_tenant"]

_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("escaler_tenant", default=None)


def current() -> str | None:
    """The tenant of the running call, or None."""
    return _TENANT.get()


@contextmanager
def for_tenant(name: str | None) -> Iterator[None]:
    """Run the block as a call made for ``name`` (None: for no tenant)."""
    token = _TENANT.set(name)
    try:
        yield
    finally:
        _TENANT.reset(token)
