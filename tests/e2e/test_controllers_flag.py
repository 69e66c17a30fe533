"""``escaler manager --controllers`` and a missing CRD (issue 28 item 5, "all or nothing at start").

* ``test_a_disabled_controller_leaves_its_kind_alone`` (parallel tier): a manager with
  ``--controllers=*,-tidal`` reconciles an ElasticScaler and never touches a Tidal; its start-up
  summary says which controllers run and which the flag turned off.
* ``test_b_a_missing_crd_waits_and_its_controller_starts_when_it_appears`` (serial tier: it deletes
  the shipped Tidal CRD, which every other test of a shared control plane may use): a manager started
  without the Tidal CRD stays up, logs one warning, serves ``/readyz`` 200 with the detail
  ``controller tidal: waiting for CRD tidals.tidal.io`` while its ElasticScaler controller works (a
  ``spec.floorFrom`` scaler: ``ScheduleFloor=False/TidalNotFound``), and once the CRD is applied again
  — without a restart — reconciles a Tidal and reads the scaler's floor from it
  (``True/FloorActive``). On the code before the change
  the manager exits 1 at start ("are escaler's CRDs installed?").

Every manager runs as a client-certificate user of its own (the audit log is shared) and watches only
its test's namespace.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Cluster, PrometheusServer, eventually, source_dir
from .es_helpers import Manager, apply, cond, deployment, hold, start_manager
from .webhook import free_port

pytestmark = pytest.mark.e2e

TIDAL_API = "tidal.io/v1alpha1"
TIDAL_CRD = "tidals.tidal.io"
WAITING = f"controller tidal: waiting for CRD {TIDAL_CRD}"


def readyz(port: int) -> tuple[int, str]:
    """GET /readyz on the manager's probe port: (status, body); (0, error) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def log_lines(mgr: Manager) -> list[dict[str, Any]]:
    out = []
    for line in mgr.output(tail=10**7).splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def alive(mgr: Manager) -> None:
    assert mgr.alive(), f"the manager exited ({mgr.proc.returncode}):\n{mgr.output(3000)}"


def bare_tidal(name: str) -> dict[str, Any]:
    """A Tidal without the follower labels: its controller answers Ready=False/MissingRequiredLabels."""
    return {"apiVersion": TIDAL_API, "kind": "Tidal", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "defaultReplicas": 1,
                     "rules": [{"name": "always", "start": "CRON_TZ=UTC 0 0 1 1 *",
                                "end": "CRON_TZ=UTC 0 0 31 12 *", "replicas": 2}]}}


def plain_scaler(name: str, target: str) -> dict[str, Any]:
    """An ElasticScaler on a Deployment, driven by an External metric nobody serves: it is reconciled
    (conditions written) without any metrics."""
    return {"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
            "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": 4,
                     "trigger": {"type": "MetricsTrigger", "metricsTrigger": {"metrics": [
                         {"type": "External", "external": {"metric": {"name": "nobody-serves-this"},
                                                           "target": {"type": "AverageValue",
                                                                      "averageValue": "10"}}}]}}}}


def floored_scaler(name: str, url: str, query: str, *, tidal: str) -> dict[str, Any]:
    """A MetricsTrigger ElasticScaler on a fake Prometheus series, floored by Tidal ``tidal``."""
    return {"apiVersion": "elasticscaler.io/v1alpha1", "kind": "ElasticScaler",
            "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": 1, "maxReplicas": 4, "floorFrom": {"name": tidal},
                     "trigger": {"type": "MetricsTrigger", "metricsTrigger": {"metrics": [
                         {"type": "ExternalServer",
                          "externalServer": {"endpoint": url, "query": query, "timeoutSeconds": 2,
                                             "target": {"type": "AverageValue", "averageValue": "10"}}}]}}}}


def floor(cluster: Cluster, ns: str, name: str) -> tuple[str, str, str]:
    return cond(dict(cluster.kubectl_json("get", "elasticscaler", name, "-n", ns)), "ScheduleFloor")


def reconciled(cluster: Cluster, ns: str, kind: str, name: str) -> dict[str, Any] | None:
    obj = dict(cluster.kubectl_json("get", kind, name, "-n", ns))
    return obj if (obj.get("status") or {}).get("conditions") else None


def es_reconciled(cluster: Cluster, ns: str, mgr: Manager) -> None:
    def done() -> dict[str, Any] | None:
        alive(mgr)
        return reconciled(cluster, ns, "elasticscaler", "es")

    eventually(done, timeout=60, interval=0.5, what="the ElasticScaler reconciled")


def test_a_disabled_controller_leaves_its_kind_alone(cluster: Cluster, namespace: str, tmp_path: Path,
                                                      managers: list[Manager]) -> None:
    ns = namespace
    mgr = start_manager(cluster, tmp_path, user="escaler-ctl-flag-a", namespace=ns,
                        extra_args=["--controllers=*,-tidal"])
    managers.append(mgr)
    apply(cluster, ns, deployment("web", 1))
    apply(cluster, ns, bare_tidal("plan"))
    apply(cluster, ns, plain_scaler("es", "web"))
    es_reconciled(cluster, ns, mgr)
    # the ElasticScaler controller has long reconciled; the Tidal must stay untouched all along
    hold(lambda: not (dict(cluster.kubectl_json("get", "tidal", "plan", "-n", ns)).get("status")),
         seconds=5, what="the Tidal without a status (its controller is off)")
    summary = [d["message"] for d in log_lines(mgr) if d["message"].startswith("controllers: ")]
    assert summary == ["controllers: running elasticscaler, rsg, slo, llmscaler; off by --controllers: "
                       "tidal"], mgr.output(3000)
    assert "workers for controller tidal" not in mgr.output(tail=10**7)


@pytest.mark.serial  # serial tier (docs/testing.md): it deletes the shipped Tidal CRD
def test_b_a_missing_crd_waits_and_its_controller_starts_when_it_appears(
    cluster: Cluster, namespace: str, tmp_path: Path, managers: list[Manager], prometheus: PrometheusServer,
) -> None:
    ns = namespace
    crd = source_dir() / "manifests" / "crds" / f"{TIDAL_CRD}.yaml"
    if not crd.exists():  # ESCALER_E2E_SRC may name an older tree; the shipped file is the same
        crd = ROOT / "manifests" / "crds" / f"{TIDAL_CRD}.yaml"
    cluster.kubectl("delete", "-f", str(crd), "--wait=true")
    try:
        probes = free_port()
        mgr = start_manager(cluster, tmp_path, user="escaler-ctl-late-crd", namespace=ns,
                            extra_args=[f"--health-probe-bind-address=127.0.0.1:{probes}"])
        managers.append(mgr)

        def ready() -> tuple[int, str] | None:
            alive(mgr)
            got = readyz(probes)
            return got if got[0] == 200 else None

        # (1) up and ready, the missing CRD named on /readyz and in one warning
        _status, body = eventually(ready, timeout=90, interval=0.5, what="the manager's /readyz 200")
        assert WAITING in body, body
        warnings = [d["message"] for d in log_lines(mgr)
                    if d.get("level") == "warning" and "tidals.tidal.io" in d["message"]]
        assert warnings == [f"controller tidal is off: CRD {TIDAL_CRD} not installed; it starts when it "
                            "appears"], mgr.output(3000)
        # the other controllers serve meanwhile
        apply(cluster, ns, deployment("web", 1))
        apply(cluster, ns, plain_scaler("es", "web"))
        es_reconciled(cluster, ns, mgr)
        # a scaler whose spec.floorFrom names a Tidal: no Tidal kind yet, so no floor
        query = f'requests{{ns="{ns}",app="fl"}}'
        prometheus.set(query, 5.0)
        apply(cluster, ns, deployment("fl", 1))
        apply(cluster, ns, floored_scaler("fl", prometheus.url, query, tidal="plan"))
        eventually(lambda: floor(cluster, ns, "fl")[:2] == ("False", "TidalNotFound"), timeout=60,
                   what=f"ScheduleFloor=False/TidalNotFound; log:\n{mgr.output(2000)}")

        # (2) the CRD appears: the Tidal controller starts, no restart
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
        cluster.wait_established(TIDAL_CRD)
        apply(cluster, ns, bare_tidal("plan"))

        def tidal_reconciled() -> bool:
            alive(mgr)
            obj = reconciled(cluster, ns, "tidal", "plan")
            return obj is not None and cond(obj, "Ready")[:2] == ("False", "MissingRequiredLabels")

        eventually(tidal_reconciled, timeout=60, interval=0.5,
                   what=f"the Tidal reconciled by the late controller; log:\n{mgr.output(3000)}")
        assert "controller tidal: CRD tidals.tidal.io installed, controller started" in mgr.output(10**7)
        # and the scaler controller's floorFrom watch of Tidals was added: the floor is read now
        eventually(lambda: floor(cluster, ns, "fl")[:2] == ("True", "FloorActive"), timeout=60,
                   what=f"ScheduleFloor=True/FloorActive; log:\n{mgr.output(3000)}")
        assert readyz(probes) == (200, "ok")
        assert mgr.proc.pid and mgr.alive()
    finally:
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
        cluster.wait_established(TIDAL_CRD)
