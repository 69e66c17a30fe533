"""``manager_client(mgr)``: the manager's API client for a reconciler's setup, looked up lazily.

Contract: a manager built on injected fakes (unit tests, embedders wiring only some controllers)
may have no API client when the setups run. ``manager_client`` returns the client when the
manager has one, else a ``LazyManagerClient`` that resolves ``mgr.client`` at each use — so only
a sync that writes fails (a reconcile error), never the wiring of every controller. Every scaler
kind's setup uses this one helper.
"""

from __future__ import annotations

from typing import Any

from escaler.runtime import Manager

__all__ = ["LazyManagerClient", "manager_client"]


class LazyManagerClient:
    """``mgr.client``, looked up at each use (attribute access and ``patch_status``)."""

    def __init__(self, mgr: Manager) -> None:
        # the manager whose client is used; fixed
        self._mgr = mgr

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mgr.client, name)

    def patch_status(self, m: Any, name: str, patch: Any, namespace: str | None = None,
                     patch_type: Any = "merge") -> dict[str, Any]:
        # spelled out so the StatusPatcher port is met structurally (mypy does not see __getattr__)
        client = self._mgr.client
        result: dict[str, Any] = client.patch_status(m, name, patch, namespace, patch_type=patch_type)
        return result


def manager_client(mgr: Manager) -> Any:
    """The manager's client now, or a ``LazyManagerClient`` when it has none yet."""
    try:
        return mgr.client
    except RuntimeError:  # built on injected fakes without a client
        return LazyManagerClient(mgr)
