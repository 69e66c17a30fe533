"""The reconcile contract: ``Request`` in, ``Result`` (or an exception) out.

A ``Reconciler`` is level-based: it is told only *which* object to look at (``Request``), never
what happened to it, reads the world from informer caches and converges it. What the controller
does with the outcome (exactly controller-runtime's ``reconcileHandler``):

* returns ``Result()``                    → success: the item's rate-limit history is forgotten;
* returns ``Result(requeue_after=d > 0)`` → forgotten, then re-added after ``d`` seconds;
* returns ``Result(requeue=True)``        → re-added rate-limited (backoff grows per item);
* raises ``TerminalError``                → not retried, counted as an error (and as a terminal
  error); its backoff history is forgotten too (controller-runtime keeps it), so the next
  event for the object starts from the base delay;
* raises an *expected* error              → re-added rate-limited, counted as an error; this is
  Go's ``return ctrl.Result{}, err``. Expected errors are ``ReconcileError`` (raise it, or a
  subclass, deliberately), ``escaler.errors.StatusError``/``ConnectionFailure`` and ``OSError``;
* raises anything else (``KeyError``, ``TypeError``, ...) → a bug, Go's *panic*: recovered,
  logged with its traceback, counted as a panic *and* an error, re-added rate-limited. The
  worker thread survives.

``requeue_after`` wins over ``requeue`` when both are set, as in controller-runtime.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ReconcileError", "Reconciler", "Request", "Result", "TerminalError"]

_intern = sys.intern
_set = object.__setattr__


@dataclass(frozen=True, order=True, slots=True)
class Request:
    """The key of one object to reconcile (``types.NamespacedName``)."""

    # the object's namespace; "" for a cluster-scoped object
    namespace: str
    # the object's metadata.name; never empty
    name: str

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("Request.name: must not be empty")
        # One copy of each name in the process: a Request is made from a store key or an event,
        # each a new string, and several are kept per scaler (the workqueue, the poller, the
        # per-scaler maps); the informer cache holds the interned name already (issue 30).
        if type(self.namespace) is str:
            _set(self, "namespace", _intern(self.namespace))
        if type(self.name) is str:
            _set(self, "name", _intern(self.name))

    def __str__(self) -> str:
        # The informer store's key format (cache.MetaNamespaceKeyFunc): "ns/name", or "name"
        # for a cluster-scoped object, so a Request can be looked up in a store directly.
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def from_key(cls, key: str) -> Request:
        """Parse a store key ("ns/name" or "name")."""
        ns, sep, name = key.partition("/")
        return cls(ns, name) if sep else cls("", ns)


@dataclass(frozen=True)
class Result:
    """What the reconciler wants next; see the module docstring."""

    # re-add the request through the rate limiter (exponential per-item backoff)
    requeue: bool = False
    # seconds after which to reconcile again (0 = do not schedule); wins over ``requeue``
    requeue_after: float = 0.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.requeue_after) or self.requeue_after < 0:
            raise ValueError(f"Result.requeue_after: must be a finite number >= 0, got {self.requeue_after}")


class Reconciler(Protocol):
    """Converges the object named by ``request``; raise to retry with backoff."""

    def reconcile(self, request: Request) -> Result: ...


class TerminalError(Exception):
    """An error retrying cannot fix (e.g. an invalid spec): logged and counted, never requeued.

    The object is reconciled again only when a new event for it arrives.
    """


class ReconcileError(Exception):
    """A deliberate, retryable failure (Go's returned ``error``): requeued rate-limited, no traceback."""
