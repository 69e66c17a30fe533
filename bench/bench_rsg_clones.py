"""GroupReplication as an amplifier (issue 27, item 3): what the manager holds for clones of a large template.

Two measurements:

1. **Cache bytes per clone** (in-process, ``tracemalloc``): ``BENCH_RSG_CLONES`` clones (default
   32) of a template of each size in ``BENCH_RSG_TEMPLATE_KIB`` (default ``256,1208``: the
   recipe's 1.18 MiB, a long container arg plus large annotations), each decoded from its own JSON
   text as the reflector decodes a list (``loads_frozen``), then cached as one informer holds it:
   ``full`` (the object as it came, the code before) or ``slim`` (``clonecache.slim_clone``, what
   every dynamic informer keeps of a clone now). ``MiB for 1024 clones x 2 caches`` scales the
   per-clone bytes to the recipe: 1,024 groups, each clone in the clone cache and the namespace-wide
   cache of its kind.
2. **The manager's RSS on the real control plane** (``BENCH_RSG_CLUSTER=0`` skips it): a fresh
   ``hack/cluster.py`` control plane, a LeaderWorkerSet CRD with a ``scale`` subresource and no
   controller (clones make no pods), one LWS member whose worker template carries a
   ``BENCH_RSG_E2E_KIB`` KiB container arg (default 200: under the default 256 KiB clone limit, so
   the bounded manager clones it too) and an RSG of ``BENCH_RSG_E2E_GROUPS`` groups (default 256:
   the default namespace cap). For each source tree in ``BENCH_RSG_SRCS`` (comma list of
   checkouts; default this one; e.g. a worktree at the commit before the bounds), ``python -m
   escaler manager`` with its defaults: ``VmRSS`` once its caches synced (``idle MiB``), once every
   clone exists plus 10 s (``clones MiB``), the peak (``VmHWM MiB``), then after a restart once its
   caches relisted the clones (``after restart MiB``, the "again at every relist" of the finding),
   and how long creating every clone took. The ``manager`` rows of commits measured before and
   not again now are kept from docs/benchmarks.md (``BENCH_RSG_KEEP=0``: not).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT))

from escaler.api.rsg import ResourceScalingGroup  # noqa: E402
from escaler.informers.frozen import freeze, loads_frozen  # noqa: E402
from escaler.informers.transform import strip_managed_fields  # noqa: E402
from escaler.reconcilers.rsg.clonecache import slim_clone  # noqa: E402
from escaler.reconcilers.rsg.clones import clone_of  # noqa: E402

TITLE = "GroupReplication: the manager's memory for clones of a large template (issue 27 item 3)"
NOTES = """
`cache` rows: bytes one informer cache holds per clone (tracemalloc, after `gc.collect()`), for
clones decoded from their own JSON text as a list page is: `full` is the object as it came (the code
before: every dynamic cache kept the clone whole, and each clone sat in two of them), `slim` what
`escaler.reconcilers.rsg.clonecache.slim_clone` keeps (no `spec.template`, no annotation over
256 bytes). The last column scales it to the finding's recipe (1,024 groups x 2 caches); the manager's
limit is 1 GiB. `manager` rows: the manager process's RSS on a real control plane (2 cores shared
with etcd, the API server, kube-controller-manager and kwok) with the recipe scaled to run in minutes
(LWS clones, no pods); `case` is the commit measured (5b78e5c: before the bounds), each with its
default flags (after: 16 clone writes per sync, 256 clones per namespace, 256 KiB per clone; the
scaled recipe stays within them, so both create every clone). `clones MiB` is the steady state with
every clone cached, 10 s after the last was created: before, the 51 MiB of clone JSON cost 106 to
156 MiB over idle (two whole copies; 168 and 218 MiB in two runs); after, 7 to 9 MiB. A restart
relists both caches that hold the clones: `restart VmHWM MiB` is the restarted process's peak, and
`after restart MiB` what it keeps 10 s after its caches synced. Up to 4c1b054 (a8e7453 included)
a list page was decoded whole before the transform stripped its clones: a page of 100 full clones
(~20 MiB of JSON, as bytes, text and objects) per cache: 202 to 225 MiB at the peak in three runs,
and glibc kept much of it afterwards (78 to 205 MiB in four runs, against 69 to 73 MiB steady).
Since then the reflector transforms each clone as it is decoded from the page's text
(`escaler/kube/listdecode.py`) and sizes pages by bytes (16 objects first, then about 4 MiB of
JSON): in two runs the restart's peak was 78 and 79 MiB against 74 and 72 MiB steady, and the
process kept 67 and 68 MiB after it, under its steady state; so the informers do not call glibc's
`malloc_trim` (there is nothing held to return). The finding's own recipe (1,024 groups of a
1.18 MiB template) creates nothing now: the template is above the 256 KiB clone limit, and 1,024
groups are above the 256 clones a namespace may hold.
"""

CLONES = int(os.environ.get("BENCH_RSG_CLONES", "32"))
SIZES_KIB = [int(x) for x in os.environ.get("BENCH_RSG_TEMPLATE_KIB", "256,1208").split(",") if x]
RUN_CLUSTER = os.environ.get("BENCH_RSG_CLUSTER", "1") not in ("", "0")
E2E_GROUPS = int(os.environ.get("BENCH_RSG_E2E_GROUPS", "256"))
E2E_KIB = int(os.environ.get("BENCH_RSG_E2E_KIB", "200"))
SRCS = [Path(p).resolve() for p in (os.environ.get("BENCH_RSG_SRCS") or str(ROOT)).split(",") if p]
USER = "escaler-rsg-bench"
NS = "rsg-bench"
LWS_API = "leaderworkerset.x-k8s.io/v1"
RSG_API = ResourceScalingGroup.API_VERSION
MIB = 1024 * 1024


# ------------------------------------------------------------------------------ 1. in-process


def template(kib: int) -> dict[str, Any]:
    """A Deployment of about ``kib`` KiB: annotations (at most 200 KiB of them) plus a long arg."""
    note = min(kib // 2, 200) * 1024
    arg = max(kib * 1024 - note, 0)
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "llama", "namespace": NS, "labels": {"app": "llama"},
                         "annotations": {"example.com/notes": "n" * note}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llama"}},
                     "template": {"metadata": {"labels": {"app": "llama"}},
                                  "spec": {"containers": [{"name": "main", "image": "llm:1",
                                                           "args": ["a" * arg]}]}}}}


def wire(kib: int, i: int) -> str:
    """Clone ``i`` as the API server would send it (server fields and status added)."""
    owner = ResourceScalingGroup.model_validate({
        "apiVersion": RSG_API, "kind": "ResourceScalingGroup",
        "metadata": {"name": "big", "namespace": NS, "uid": "rsg-uid"},
        "spec": {"strategy": "GroupReplication", "replicas": 1,
                 "members": [{"name": "llm", "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                           "name": "llama"}}]}})
    obj = clone_of(template(kib), owner, "llm", i, 1)
    obj["metadata"].update({"namespace": NS, "uid": f"uid-{i}", "resourceVersion": str(1000 + i),
                            "generation": 1, "creationTimestamp": "2026-12-06T00:00:00Z"})
    obj["status"] = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1}
    return json.dumps(obj)


def cache_bytes(kib: int, slim: bool) -> tuple[float, int]:
    """Bytes one cache holds per clone, and the JSON size of one clone."""
    texts = [wire(kib, i) for i in range(CLONES)]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    cache = []
    for text in texts:
        obj = strip_managed_fields(loads_frozen(text))
        cache.append(freeze(slim_clone(obj) if slim else obj))
    del obj  # the last decoded object is garbage once cached (slim)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del cache
    return held / CLONES, len(texts[0])


def cache_rows() -> list[dict[str, Any]]:
    rows = []
    for kib in SIZES_KIB:
        for slim in (False, True):
            per, size = cache_bytes(kib, slim)
            rows.append({"what": "cache", "case": "slim (after)" if slim else "full (before)",
                         "clone JSON KiB": round(size / 1024),
                         "KiB per clone per cache": round(per / 1024, 1),
                         "MiB for 1024 clones x 2 caches": round(per * 1024 * 2 / MIB, 1)})
    return rows


# ------------------------------------------------------------------------------ 2. the real manager


def proc_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k == field:
            return int(v.split()[0]) / 1024
    return 0.0


def lws_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "leaderworkersets.leaderworkerset.x-k8s.io"},
        "spec": {"group": "leaderworkerset.x-k8s.io", "scope": "Namespaced",
                 "names": {"kind": "LeaderWorkerSet", "listKind": "LeaderWorkerSetList",
                           "plural": "leaderworkersets", "singular": "leaderworkerset"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}},
                               "subresources": {"status": {}, "scale": {
                                   "specReplicasPath": ".spec.replicas",
                                   "statusReplicasPath": ".status.replicas",
                                   "labelSelectorPath": ".status.hpaPodSelector"}}}]},
    }


def member(kib: int) -> dict[str, Any]:
    return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": {"name": "llama", "namespace": NS},
            "spec": {"replicas": 0, "leaderWorkerTemplate": {"size": 1, "workerTemplate": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {"containers": [{"name": "main", "image": "llm:1", "args": ["a" * (kib * 1024)]}]}}}}}


def rsg(groups: int) -> dict[str, Any]:
    return {"apiVersion": RSG_API, "kind": "ResourceScalingGroup",
            "metadata": {"name": "big", "namespace": NS},
            "spec": {"strategy": "GroupReplication", "replicas": groups, "members": [
                {"name": "llm",
                 "targetRef": {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "name": "llama"},
                 "replicasPerGroup": 1}]}}


class ManagerRun:
    """One manager process of source tree ``src`` on ``cluster``."""

    def __init__(self, cluster: Any, src: Path, work: Path) -> None:
        self.cluster, self.src, self.work = cluster, src, work
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        kc = self.cluster.user_kubeconfig(USER)
        log = open(self.work / f"manager-{self.src.name}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "escaler", "manager", f"--kubeconfig={kc}", "--webhook-port=0",
             "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
             "--api-bind-address=0", f"--namespace={NS}"],
            cwd=self.src, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(self.src)})
        deadline = time.monotonic() + 120
        while b"caches synced" not in (self.work / f"manager-{self.src.name}.log").read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"manager of {self.src} did not sync")
            time.sleep(0.2)
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def clone_count(cluster: Any) -> int:
    out = cluster.kubectl("get", "leaderworkersets", "-n", NS, "-l", "autoscaling.openfuyao.com/rsg=big",
                          "--no-headers", check=False)
    return len([line for line in out.splitlines() if line.strip()])


def label(src: Path) -> str:
    r = subprocess.run(["git", "-C", str(src), "log", "-1", "--format=%h"], capture_output=True, text=True)
    return r.stdout.strip() or src.name


def manager_row(src: Path) -> dict[str, Any]:
    from cluster import LocalCluster

    work = Path(tempfile.mkdtemp(prefix="escaler-rsg-bench-"))
    cluster = LocalCluster(work / "cluster").start()
    m = ManagerRun(cluster, src, work)
    try:
        for f in sorted((ROOT / "manifests" / "crds").glob("*.yaml")):
            cluster.kubectl("apply", "--server-side", "-f", str(f))
        cluster.kubectl("create", "-f", "-", input=json.dumps(lws_crd()))
        cluster.kubectl("wait", "--for=condition=Established", "crd", "--all")
        cluster.kubectl("create", "namespace", NS)
        cluster.kubectl("create", "-f", "-", input=json.dumps(member(E2E_KIB)))
        pid = m.start()
        time.sleep(5)
        idle = proc_mib(pid, "VmRSS")
        t0 = time.monotonic()
        cluster.kubectl("create", "-f", "-", input=json.dumps(rsg(E2E_GROUPS)))
        deadline = t0 + 600
        while clone_count(cluster) < E2E_GROUPS:
            if time.monotonic() > deadline or m.proc is None or m.proc.poll() is not None:
                break
            time.sleep(1)
        created = time.monotonic() - t0
        made = clone_count(cluster)
        time.sleep(10)
        gc_rss, hwm = proc_mib(pid, "VmRSS"), proc_mib(pid, "VmHWM")
        m.stop()
        pid = m.start()
        time.sleep(10)
        again, hwm_again = proc_mib(pid, "VmRSS"), proc_mib(pid, "VmHWM")
        return {"what": "manager", "case": label(src), "groups x template KiB": f"{made} x {E2E_KIB}",
                "create all s": round(created, 1), "idle MiB": round(idle), "clones MiB": round(gc_rss),
                "VmHWM MiB": round(hwm), "after restart MiB": round(again),
                "restart VmHWM MiB": round(hwm_again)}
    finally:
        m.stop()
        cluster.stop()


def kept_rows(measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``manager`` rows of this section of docs/benchmarks.md whose commit is not measured again
    now (``BENCH_RSG_KEEP=0``: none): older commits stay in the table as they were measured."""
    doc = ROOT / "docs" / "benchmarks.md"
    if os.environ.get("BENCH_RSG_KEEP", "1") in ("", "0") or not doc.exists():
        return []
    text = doc.read_text()
    start = text.find(f"\n## {TITLE}\n")
    if start < 0:
        return []
    end = text.find("\n## ", start + 1)
    lines = [ln for ln in text[start:end if end > 0 else None].splitlines() if ln.startswith("|")]
    if len(lines) < 2:
        return []
    cols = [c.strip() for c in lines[0].strip("|").split("|")]
    cases = {r["case"] for r in measured}
    kept = []
    for ln in lines[2:]:
        row = dict(zip(cols, (c.strip() for c in ln.strip("|").split("|")), strict=False))
        if row.get("what") == "manager" and row.get("case") not in cases:
            kept.append({k: v for k, v in row.items() if v})
    return kept


def run() -> list[dict[str, Any]]:
    rows = cache_rows()
    if RUN_CLUSTER:
        measured = [manager_row(src) for src in SRCS]
        rows += kept_rows(measured) + measured
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
