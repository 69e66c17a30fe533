"""escaler.runtime: controllers, their wiring, and the leader-elected manager that runs them.

The public API an embedding operator uses (controller-runtime's shape, in Python):

* ``Request``/``Result``/``Reconciler``/``TerminalError``/``ReconcileError`` — the reconcile
  contract (``types.py``);
* ``Controller`` — a rate-limited queue drained by N workers (``controller.py``);
* ``ControllerBuilder`` — ``for_``/``owns``/``watches`` wiring onto a manager (``builder.py``);
* ``handlers`` and ``predicates`` — event → request mapping and event filters;
* ``Manager``/``ManagerOptions`` — shared clients and caches, probes, metrics, leader election
  and graceful shutdown (``manager.py``);
* ``LeaderElector``/``LeaderElectionConfig`` — the elector (``leaderelection.py``) over the Lease
  lock ``LeaseLock``/``KubeLeaseClient`` (``leaselock.py``); ``WriteFence`` — time-based write
  permission from the lease (``fence.py``);
* ``MetricsRegistry`` — controller-runtime's metric names on a per-manager registry;
* ``crdgate.CRDGate`` — a controller whose CRD is not installed waits for it (a ``/readyz`` detail)
  and is set up when discovery serves the kind, instead of failing the manager's start;
* ``ApiServer`` (``apiserver.py``) — the authenticated JSON API routes register on
  (``Manager.api_server``), with ``KubeAuthenticator``/``ResourceAttributes`` (``authn.py``).

Minimal use::

    mgr = Manager(ManagerOptions(leader_election=True, leader_election_namespace="ops"))
    ControllerBuilder(mgr).for_("apps/v1", "Deployment").complete(MyReconciler(mgr))
    sys.exit(mgr.start())
"""

from escaler.runtime import handlers, predicates
from escaler.runtime.apiserver import ApiError, ApiRequest, ApiResponse, ApiServer
from escaler.runtime.authn import (
    AccessDecision,
    Authenticator,
    KubeAuthenticator,
    ResourceAttributes,
    UserInfo,
)
from escaler.runtime.builder import ControllerBuilder
from escaler.runtime.controller import Controller, ReconcileContextFilter, current_reconcile
from escaler.runtime.fence import WriteFence
from escaler.runtime.leaderelection import LeaderElectionConfig, LeaderElector
from escaler.runtime.leaselock import KubeLeaseClient, LeaseClient, LeaseLock
from escaler.runtime.manager import Manager, ManagerOptions, Runnable
from escaler.runtime.metrics import MetricsRegistry
from escaler.runtime.types import ReconcileError, Reconciler, Request, Result, TerminalError

__all__ = [
    "AccessDecision",
    "ApiError",
    "ApiRequest",
    "ApiResponse",
    "ApiServer",
    "Authenticator",
    "Controller",
    "ControllerBuilder",
    "KubeAuthenticator",
    "KubeLeaseClient",
    "LeaderElectionConfig",
    "LeaderElector",
    "LeaseClient",
    "LeaseLock",
    "Manager",
    "ManagerOptions",
    "MetricsRegistry",
    "ReconcileContextFilter",
    "ReconcileError",
    "Reconciler",
    "Request",
    "ResourceAttributes",
    "Result",
    "Runnable",
    "TerminalError",
    "UserInfo",
    "WriteFence",
    "current_reconcile",
    "handlers",
    "predicates",
]
