"""keycount: a small operator built only on escaler's toolkit, with no escaler kind.

It mirrors the number of keys of every ConfigMap (``data`` plus ``binaryData``) into the
annotation ``examples.escaler.io/key-count``. Level-based: it reads the ConfigMap from the
manager's informer cache, computes the count, and patches the annotation only when it differs;
an unchanged ConfigMap costs no API write. With ``--leader-elect`` several replicas share one
Lease and only the leader writes.

Run: ``python -m examples.keycount --kubeconfig KUBECONFIG [--namespace NS] [--leader-elect]``.
"""

from __future__ import annotations

import logging

from escaler.informers import ResourceKey
from escaler.runtime import ControllerBuilder, Manager, Request, Result

ANNOTATION = "examples.escaler.io/key-count"

log = logging.getLogger("keycount")


class KeyCountReconciler:
    """Converges one ConfigMap's annotation to its key count."""

    def __init__(self, mgr: Manager) -> None:
        self._mgr = mgr
        # the ConfigMap cache shared with the controller's own watch (same ResourceKey)
        self._cache = mgr.informers.informer_for(
            ResourceKey("", "v1", "configmaps", namespace=mgr.options.namespace)).store

    def reconcile(self, request: Request) -> Result:
        cm = self._cache.get_by_key(str(request))
        if cm is None:  # deleted: nothing to converge
            return Result()
        count = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
        annotations = cm["metadata"].get("annotations") or {}
        if annotations.get(ANNOTATION) == str(count):
            return Result()
        self._mgr.client.patch(("v1", "ConfigMap"), request.name,
                               {"metadata": {"annotations": {ANNOTATION: str(count)}}},
                               namespace=request.namespace)
        log.info("annotated %s with %s=%d", request, ANNOTATION, count)
        return Result()


def setup(mgr: Manager) -> None:
    ControllerBuilder(mgr).named("keycount").for_("v1", "ConfigMap").complete(KeyCountReconciler(mgr))
