"""``KubeSLOClient``: the SLO API's calls to the Kubernetes API server.

Contract:

* ``informer_for(kind)`` → a ``SharedInformer`` (not started) over the kind, in every namespace
  or in ``namespace`` only, with the ``SERVICE_ID_INDEX``; list and watch go through
  ``escaler.kube.dynamic.ResourceListerWatcher`` (the reflector's list + watch + bookmarks +
  relist + backoff, as the manager's informers). The mapping is static (group, version and
  plural are the project's own), so no discovery call is made.
* ``probe(kind)`` → whether the kind is served: a list with ``limit=1``; ``False`` on 404,
  ``StatusError``/``ConnectionFailure`` for anything else.
* ``patch(kind, namespace, name, patch)`` → the object the API server returns for a JSON merge
  patch (``application/merge-patch+json``, ``fieldManager=escaler-slo-api``); the server applies
  the CRD's schema and CEL rules to the merged object.
* Every call has a total deadline (``DEFAULT_CALL_TIMEOUT`` seconds, one attempt, no transport
  retries: ``RestClient.request(retries=False)``), so a request handler never waits longer.
  Writes are not fenced by a lease: the SLO API is not leader-elected; the API server's
  validation and the caller's RBAC (SubjectAccessReview) guard them.
"""

from __future__ import annotations

from typing import Any

from escaler.clock import Clock
from escaler.errors import StatusError
from escaler.informers.shared import SharedInformer
from escaler.kube.discovery import ResourceMapping
from escaler.kube.dynamic import ResourceListerWatcher
from escaler.kube.rest import RestClient
from escaler.sloapi.index import SERVICE_ID_INDEX, service_id_index
from escaler.sloapi.kinds import GROUP, VERSION, SLOKind

__all__ = ["DEFAULT_CALL_TIMEOUT", "FIELD_MANAGER", "KubeSLOClient"]

# Total seconds one probe or patch may take.
DEFAULT_CALL_TIMEOUT = 10.0
FIELD_MANAGER = "escaler-slo-api"
MERGE_PATCH = "application/merge-patch+json"


class KubeSLOClient:
    """See the module docstring."""

    def __init__(self, rest: RestClient, *, namespace: str = "", clock: Clock | None = None,
                 timeout: float = DEFAULT_CALL_TIMEOUT) -> None:
        if not timeout > 0:
            raise ValueError(f"KubeSLOClient.timeout: must be > 0 seconds, got {timeout!r}")
        # the SLO API's own credentials; fixed
        self._rest = rest
        # "" = every namespace; fixed
        self.namespace = namespace
        # given to the informers (None: the real clock); fixed
        self._clock = clock
        # total seconds per call
        self._timeout = timeout

    @staticmethod
    def mapping(kind: SLOKind) -> ResourceMapping:
        return ResourceMapping(GROUP, VERSION, kind.plural, kind.kind, True, frozenset({"status"}))

    def informer_for(self, kind: SLOKind) -> SharedInformer:
        lw = ResourceListerWatcher(self._rest, self.mapping(kind), namespace=self.namespace or None)
        return SharedInformer(lw, name=kind.plural, clock=self._clock,
                              indexers={SERVICE_ID_INDEX: service_id_index})

    def probe(self, kind: SLOKind) -> bool:
        try:
            self._rest.request("GET", kind.path(self.namespace), query=[("limit", "1")],
                               timeout=self._timeout, retries=False)
        except StatusError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def patch(self, kind: SLOKind, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._rest.request("PATCH", kind.path(namespace, name),
                                  query=[("fieldManager", FIELD_MANAGER)], body=patch,
                                  content_type=MERGE_PATCH, timeout=self._timeout, retries=False)
