"""Names on the wire that more than one scaler kind reads or writes.

* ``LABEL_NAME`` / ``LABEL_NAMESPACE`` — the binding labels a StateTrigger source carries to name the
  ElasticScaler that reads it (docs/guide/elasticscaler.md#the-triggers): the ElasticScaler's source informer
  selects on them, and a Tidal (a state source) reports whether it has them.
* ``HPA_API_VERSION`` / ``HPA_KIND`` — the HorizontalPodAutoscaler API every workload-writing kind
  watches (a foreign HPA on a target is a conflict; the ElasticScaler also owns a companion HPA).
"""

from __future__ import annotations

__all__ = ["HPA_API_VERSION", "HPA_KIND", "LABEL_NAME", "LABEL_NAMESPACE"]

LABEL_NAME = "elasticscaler.io/name"
LABEL_NAMESPACE = "elasticscaler.io/namespace"

HPA_API_VERSION = "autoscaling/v2"
HPA_KIND = "HorizontalPodAutoscaler"
