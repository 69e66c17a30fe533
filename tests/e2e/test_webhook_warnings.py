"""Issue 28 item 6 on the real API server: an annotation value the reconciler falls back from is
accepted with an admission warning, as a kubectl user sees it.

The manager serves its webhook, registered for this test's namespace only (the parallel tier), and
runs as its own client-certificate user. ``kubectl create`` of an ElasticScaler whose
``elasticscaler.io/metrics.missingDataPolicy`` is ``bogus``:

* succeeds, and kubectl prints ``Warning: metadata.annotations[...missingDataPolicy]: must be one
  of Ignore, TreatAsZero, Fail, got 'bogus'; using the default Ignore`` (the webhook's
  ``response.warnings``, passed on by the API server as a ``Warning`` header);
* the object is stored with the annotation as written;
* the manager's Warning event ``InvalidAnnotation`` on it says the same words, and the scaler is
  reconciled (its conditions are written): the value fell back, nothing stopped.

What can never work is still refused: a ``metrics.*`` annotation with ``scalingAlgorithm: HPA``.
On the code before this change (``ESCALER_E2E_SRC`` pointing at it) the first create is denied.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import Cluster, eventually
from .es_helpers import apply, deployment, external_metric, metrics_trigger, scaler
from .webhook import manager_with_webhook, submit

pytestmark = pytest.mark.e2e

KEY = "elasticscaler.io/metrics.missingDataPolicy"
WARNING = (f"metadata.annotations[{KEY}]: must be one of Ignore, TreatAsZero, Fail, got 'bogus'; "
           "using the default Ignore")


def _live(cluster: Cluster, namespace: str) -> bool:
    """The webhook answers for this namespace: an unregistered algorithm (webhook-only) is refused."""
    probe = scaler("probe", "web", metrics_trigger(external_metric("queue"), algorithm="no-such-algorithm"))
    ok, _ = submit(cluster, namespace, probe)
    if ok:
        cluster.kubectl("delete", "es", "probe", "-n", namespace, check=False)
    return not ok


def _invalid_annotation_notes(cluster: Cluster, namespace: str, name: str) -> list[str]:
    events = cluster.kubectl_json("get", "events.events.k8s.io", "-n", namespace)["items"]
    return [str(e.get("note", "")) for e in events
            if e.get("reason") == "InvalidAnnotation" and (e.get("regarding") or {}).get("name") == name]


def test_fallback_annotation_is_accepted_with_a_warning_and_the_same_event(
        cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    apply(cluster, namespace, deployment("web", 1))
    with manager_with_webhook(cluster, tmp_path, namespace=namespace, user="webhook-warnings") as mgr:
        eventually(lambda: _live(cluster, namespace), timeout=30,
                   what=f"the webhook to take effect; manager log:\n{mgr.output()[-3000:]}")

        obj = scaler("bogus-policy", "web", metrics_trigger(external_metric("queue")),
                     annotations={KEY: "bogus"})
        ok, out = submit(cluster, namespace, obj)
        assert ok, f"the create was refused: {out}"
        warnings = re.findall(r"^Warning: (.*)$", out, re.M)
        assert warnings == [WARNING], out
        stored = cluster.kubectl_json("get", "es", "bogus-policy", "-n", namespace)
        assert stored["metadata"]["annotations"][KEY] == "bogus"

        # the manager says the same, once, and reconciles the scaler with the default
        notes = eventually(lambda: _invalid_annotation_notes(cluster, namespace, "bogus-policy"), timeout=60,
                           what=f"the InvalidAnnotation event; manager log:\n{mgr.output()[-3000:]}")
        assert notes == [WARNING], notes
        eventually(lambda: (cluster.kubectl_json("get", "es", "bogus-policy", "-n", namespace).get("status")
                            or {}).get("conditions"), timeout=60, what="the scaler's conditions")

        # a valid value: no warning
        fixed = scaler("good-policy", "web", metrics_trigger(external_metric("queue")),
                       annotations={KEY: "TreatAsZero"})
        ok, out = submit(cluster, namespace, fixed)
        assert ok and "Warning:" not in out, out

        # what can never work is still refused, naming the annotation
        hpa = scaler("hpa-mode", "web", metrics_trigger(external_metric("queue"), algorithm="HPA"),
                     annotations={"elasticscaler.io/metrics.windowSeconds": "60"})
        ok, out = submit(cluster, namespace, hpa)
        assert not ok and "metadata.annotations[elasticscaler.io/metrics.windowSeconds]" in out, out
