#!/usr/bin/env python3
"""``make demo``: escaler scaling four LLM workloads on a real local control plane, live.

1. starts the local control plane of ``hack/cluster.py`` (etcd, kube-apiserver,
   kube-controller-manager, kube-scheduler, kwok with two fake nodes), installs the CRDs
   (``manifests/crds``) and the manager's RBAC (``manifests/rbac``), and runs
   ``python -m escaler manager`` as a user holding only the shipped ClusterRole (webhook off, 2 s
   polling, the SLO engine on the fake Prometheus);
2. serves a fake Prometheus whose answers follow the shipped Azure conversation trace, an hour of
   traffic played in ``--duration`` seconds (``hack/demo/load.py``), and creates four scaling
   stories (``hack/demo/objects.py``): a model server under an ElasticScaler on requests in
   flight, a Tidal schedule followed by a StateTrigger ElasticScaler, a prefill/decode
   ResourceScalingGroup whose groups an ElasticScaler sets on prompt tokens/s, and an LLMScaler on
   tokens/s;
3. prints a live view every ``--interval`` seconds (time, load, per scaler desired/current/ready
   replicas and its state with the condition reason: ``hack/demo/view.py``), redrawn in place on a
   terminal and appended otherwise; then a summary (per scaler min/max replicas, scale events,
   final state), ``escaler explain`` of the model server, and where to look next;
4. tears everything down (manager, fake Prometheus, control-plane processes, the work directory).

Exit status: 0 when every story happened; 1 naming the step that did not (e.g. no scale-up
within its deadline; the work directory is then kept for its logs); 130 on Ctrl-C (SIGINT) at any
moment, 143 on SIGTERM, both after the same teardown. ``--keep-running`` leaves it all up after
the summary until Ctrl-C (then exit 0), for the ``kubectl`` commands it prints.

On a cluster of the user's (``--kubeconfig``, or ``$ESCALER_E2E_KUBECONFIG`` as ``make demo
E2E_CLUSTER=kind`` sets it, with kubectl from ``$KUBECTL``): no control plane is started, CRDs it
lacks are applied (those it has, e.g. a chart's, are kept), its RBAC is left alone and the manager
runs with that kubeconfig, watching only namespace ``escaler-demo``, where the objects go (refused
if it exists; deleted at teardown).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack"))
from cluster import LocalCluster, free_port  # noqa: E402
from demo import objects, view  # noqa: E402
from demo.load import MEAN_LATENCY_S, TraceLoad  # noqa: E402
from fake_metrics import PrometheusServer  # noqa: E402

# the namespace of the demo's objects: on the local control plane, and on a cluster of the user's
NS = "demo"
EXTERNAL_NS = "escaler-demo"
MANAGER_USER = "escaler-demo-manager"
MANAGER_GROUP = "escaler:managers"
MANAGER_CLUSTERROLE = "escaler-manager"
RBAC_NAMESPACE = "escaler-system"
DEFAULT_DURATION = 120.0
MIN_DURATION = 45.0


class DemoFailed(Exception):
    """A step that did not happen; the message names it."""


def bold(msg: str) -> str:
    return f"\033[1m{msg}\033[0m" if sys.stdout.isatty() else msg


def say(msg: str = "") -> None:
    print(msg, flush=True)


def step(msg: str) -> None:
    say(f"\n{bold('==> ' + msg)}")


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """Turn any error of a step (not Ctrl-C) into ``DemoFailed`` naming the step."""
    try:
        yield
    except (DemoFailed, KeyboardInterrupt):
        raise
    except Exception as e:  # a failed step, whatever raised it
        raise DemoFailed(f"{what}: {type(e).__name__}: {e}") from e


class Demo:
    """One run: what it started (so ``teardown`` stops exactly that) and what it saw."""

    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        # the work directory: the cluster's files, the manager's log; removed at teardown
        self.work = work
        self.args = args
        # set once started, in this order; teardown stops them in reverse
        self.cluster: LocalCluster | None = None
        # the cluster used: the local control plane's, or --kubeconfig's (then cluster stays None)
        self.kube: Kube | None = None
        self.ns = EXTERNAL_NS if args.kubeconfig else NS
        # the namespace was created by this run (an external cluster's is deleted at teardown)
        self.ns_created = False
        self.prom: PrometheusServer | None = None
        self.manager: subprocess.Popen[bytes] | None = None
        self.manager_log = work / "manager.log"
        self.load = TraceLoad.from_trace(args.duration)
        # time.monotonic() at the scenario's start (the fake Prometheus answers t=0 before it)
        self.t0: float | None = None
        self.tracker = view.Tracker()
        self.api: Any = None

    # --- helpers ------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def kubectl(self, *args: str, input: str | None = None) -> str:
        assert self.kube is not None
        return self.kube.kubectl(*args, input=input)

    def apply(self, docs: list[dict[str, Any]], namespace: str | None = None) -> str:
        ns = ["-n", namespace] if namespace else []
        return self.kubectl("apply", *ns, "-f", "-",
                            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))

    def prometheus_answer(self, query: str) -> float | None:
        load = self.load.at(self.elapsed())
        ns = self.ns
        return {objects.q_in_flight(ns): load.in_flight, objects.q_prompt_tps(ns): load.prompt_tps,
                objects.q_tokens_tps(ns): load.total_tps}.get(query)

    def manager_tail(self, n: int = 1500) -> str:
        text = self.manager_log.read_text(errors="replace") if self.manager_log.exists() else ""
        return text[-n:]

    # --- steps --------------------------------------------------------------------------------

    def start_cluster(self) -> None:
        if self.args.kubeconfig:
            step(f"using the cluster of {self.args.kubeconfig} (--kubeconfig / ESCALER_E2E_KUBECONFIG)")
            with doing("reaching the cluster"):
                self.kube = Kube(Path(self.args.kubeconfig), os.environ.get("KUBECTL") or kubectl_path())
                self.kubectl("get", "--raw", "/readyz")
            return
        step("starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
        self.cluster = LocalCluster(self.work / "cluster")
        with doing("starting the local control plane"):
            self.cluster.start()
        self.kube = Kube(self.cluster.kubeconfig, self.cluster.bins["kubectl"])
        say(f"ready in {self.cluster.startup_seconds:.1f}s, 2 kwok nodes; while the demo runs:")
        say(f"  export KUBECONFIG={self.cluster.kubeconfig}")

    def install(self) -> None:
        step("installing the CRDs (manifests/crds) and the manager's RBAC (manifests/rbac)")
        with doing("installing the CRDs"):
            # the CRD files only (the directory may also hold a kustomization)
            crds = [f for f in sorted((ROOT / "manifests" / "crds").glob("*.yaml"))
                    if "kind: CustomResourceDefinition" in f.read_text()]
            if self.cluster is None:  # a cluster of the user's: keep the CRDs it has (a chart's)
                have = set(self.kubectl("get", "crd", "-o", "name").split())
                crds = [f for f in crds
                        if f"customresourcedefinition.apiextensions.k8s.io/{f.stem}" not in have]
            if crds:
                self.kubectl("apply", "--server-side", *(a for f in crds for a in ("-f", str(f))))
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
            names = [n.rsplit("/", 1)[-1] for n in self.kubectl("get", "crd", "-o", "name").split()]
            say(textwrap.fill(" ".join(names), 100, initial_indent="  ", subsequent_indent="  "))
        if self.cluster is None:
            say("  RBAC: left as the cluster has it; the manager runs with the given kubeconfig")
            return
        with doing("installing the RBAC"):
            self.kubectl("create", "namespace", RBAC_NAMESPACE)
            applied, skipped, role_found = [], [], False
            docs = []
            for f in rbac_files():
                docs += [d for d in yaml.safe_load_all(f.read_text()) if d and "metadata" in d]
            for d in docs:
                ns = d["metadata"].get("namespace")
                name = f"{d['kind']}/{d['metadata']['name']}" + (f" -n {ns}" if ns else "")
                if ns not in (None, RBAC_NAMESPACE):
                    skipped.append(name)  # an example for a namespace the demo does not have
                    continue
                applied.append(name)
                role_found |= d["kind"] == "ClusterRole" and d["metadata"]["name"] == MANAGER_CLUSTERROLE
            self.apply([d for d in docs if d["metadata"].get("namespace") in (None, RBAC_NAMESPACE)])
            files = ", ".join(f"manifests/rbac/{f.name}" for f in rbac_files())
            say(textwrap.fill(f"applied from {files}: {', '.join(applied)}", 100, initial_indent="  ",
                              subsequent_indent="    ", break_on_hyphens=False))
            if skipped:
                say(textwrap.fill(f"skipped (examples for namespaces the demo does not have): "
                                  f"{', '.join(skipped)}", 100, initial_indent="  ",
                                  subsequent_indent="    ", break_on_hyphens=False))
            if not role_found:
                raise DemoFailed(f"installing the RBAC: no ClusterRole {MANAGER_CLUSTERROLE} in "
                                 "manifests/rbac")
            self.apply([{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                         "metadata": {"name": "escaler-manager-demo"},
                         "subjects": [{"kind": "Group", "name": MANAGER_GROUP,
                                       "apiGroup": "rbac.authorization.k8s.io"}],
                         "roleRef": {"kind": "ClusterRole", "name": MANAGER_CLUSTERROLE,
                                     "apiGroup": "rbac.authorization.k8s.io"}}])
            say(f"  bound ClusterRole {MANAGER_CLUSTERROLE} to group {MANAGER_GROUP}: the manager runs as\n"
                f"  user {MANAGER_USER}, in that group only (not system:masters)")

    def start_prometheus(self) -> None:
        step("starting a fake Prometheus that plays the shipped Azure conversation trace")
        self.prom = PrometheusServer(value_fn=self.prometheus_answer, record=False).start()
        span = self.load.times[-1]
        say(f"  {self.prom.url}: escaler/sim/data/AzureLLMInferenceTrace_conv.csv, {len(self.load.times)} "
            f"requests over {span / 60:.0f} min,\n  played {self.load.speedup:.0f}x faster in "
            f"{self.args.duration:.0f}s; rates over a trailing {self.load.window_s:.0f}s of trace time, "
            f"in flight = rate x {MEAN_LATENCY_S:g}s")

    def start_manager(self) -> None:
        assert self.kube is not None and self.prom is not None
        step("starting `python -m escaler manager` (webhook off, 2 s metric polling)")
        with doing("starting the manager"):
            kubeconfig = (self.kube.kubeconfig if self.cluster is None
                          else self.cluster.user_kubeconfig(MANAGER_USER, (MANAGER_GROUP,)))
            health = free_port()
            args = [sys.executable, "-m", "escaler", "manager", f"--kubeconfig={kubeconfig}",
                    "--webhook-port=0", "--metrics-trigger-poll-interval=2s",
                    f"--slo-prometheus-endpoint={self.prom.url}",
                    "--allow-endpoint-networks=127.0.0.0/8",  # the fake Prometheus is on loopback
                    "--api-bind-address=0", "--metrics-bind-address=127.0.0.1:0",
                    f"--health-probe-bind-address=127.0.0.1:{health}"]
            if self.cluster is None:  # a cluster of the user's: leave every other scaler alone
                args.append(f"--namespace={self.ns}")
            with open(self.manager_log, "wb") as log:
                self.manager = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True,
                                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
            say("  $ python -m escaler manager " + " ".join(a for a in args[4:] if "kubeconfig" not in a))
            t0 = time.monotonic()
            while not _http_ok(f"http://127.0.0.1:{health}/readyz"):
                self.check_manager()
                if time.monotonic() - t0 > 60:
                    raise DemoFailed(f"the manager was not ready within 60s; log:\n{self.manager_tail()}")
                time.sleep(0.3)
            say(f"  ready in {time.monotonic() - t0:.1f}s (pid {self.manager.pid}; log {self.manager_log})")

    def check_manager(self) -> None:
        if self.manager is not None and self.manager.poll() is not None:
            raise DemoFailed(f"the manager exited with code {self.manager.returncode}; log:\n"
                             f"{self.manager_tail()}")

    def create_objects(self) -> None:
        assert self.prom is not None
        pods = " (kwok runs their pods)" if self.cluster is not None else ""
        step(f"namespace {self.ns}: five Deployments{pods} and an RSG over two of them")
        with doing(f"creating namespace {self.ns}"):
            self.kubectl("create", "namespace", self.ns)
            self.ns_created = True
        with doing("creating the demo's Deployments"):
            self.apply(objects.workloads(), self.ns)
        window = self.scale_down_window()
        say("  rsg/llama-pd         InplaceScaling: 2 llama-prefill + 1 llama-decode replicas per group")
        say("and the scalers, created right after the live view's first refresh:")
        for line in (
            f"es/model-server      apa on requests in flight, {objects.IN_FLIGHT_PER_REPLICA} per replica, "
            f"scale-down window {window}s",
            "tidal/llama-office-hours  4 replicas on even minutes (UTC), 2 on odd minutes (Asia/Kolkata)",
            "es/llama-es          StateTrigger: puts the Tidal's status.desiredReplicas on deploy/llama",
            f"es/llama-pd          apa on prompt tokens/s, {objects.PROMPT_TPS_PER_GROUP} per group, "
            "through rsg/llama-pd's /scale",
            f"llmscaler/chat-llama Prometheus provider: tokens/s, {objects.TOKENS_TPS_PER_REPLICA} "
            "per replica",
        ):
            say(f"  {line}")

    def scale_down_window(self) -> int:
        """Scale-down stabilization of the demo's scalers: 300 s by default, a few seconds here,
        so that a scale-down shows within the compressed hour."""
        return int(min(20, max(5, self.args.duration / 12)))

    def play(self) -> None:
        """The scenario: refresh the live view until ``--duration`` has passed, checking the
        stories that have deadlines on the way."""
        from kubernetes import config as k8s_config

        assert self.kube is not None
        step(f"live view, every {self.args.interval:g}s for {self.args.duration:.0f}s (Ctrl-C stops and "
             "tears down)")
        self.api = k8s_config.new_client_from_config(config_file=str(self.kube.kubeconfig))
        tty = sys.stdout.isatty()
        up_deadline = max(20.0, 0.4 * self.args.duration)
        tidal_created = datetime.now(UTC)
        self.t0 = time.monotonic()
        drawn = 0
        created = False
        while True:
            elapsed = self.elapsed()
            self.check_manager()
            rows = view.read_rows(self.api, self.ns)
            self.tracker.add(rows)
            block = view.render_block(elapsed, self.load.at(elapsed), self.load.speedup, rows)
            if tty and drawn:
                sys.stdout.write(f"\033[{drawn}F\033[J")
            say("\n".join(block) + ("" if tty else "\n"))
            drawn = _screen_lines(block) if tty else 0
            if not created:  # after a first view of the Deployments as they were
                assert self.prom is not None
                with doing("creating the scalers"):
                    self.apply(objects.scalers(self.ns, self.prom.url, self.scale_down_window()), self.ns)
                tidal_created, created = datetime.now(UTC), True
            ms = self.tracker.seen.get("es/model-server")
            if elapsed >= up_deadline and (ms is None or (ms.hi or 0) <= 1):
                raise DemoFailed(f"es/model-server: no scale-up within {up_deadline:.0f}s of rising traffic "
                                 f"(now {rows[0].state}); manager log:\n{self.manager_tail()}")
            if elapsed >= self.args.duration - self.args.interval / 2:
                break
            time.sleep(max(0.0, min(self.args.interval, self.args.duration - elapsed)))
        self.check_stories(rows, tidal_created)

    def check_stories(self, rows: list[view.RowState], tidal_created: datetime) -> None:
        seen = self.tracker.seen
        missing = []
        ms = seen["es/model-server"]
        final = {r.row.label: r for r in rows}
        if ms.hi is None or final["es/model-server"].current is None or \
                final["es/model-server"].current >= ms.hi:
            missing.append(f"es/model-server did not scale down after the traffic peak (seen {ms.values})")
        # a minute boundary inside the run, with margins: the Tidal must have transitioned
        first = math.ceil((tidal_created.timestamp() + 3) / 60) * 60
        if first < time.time() - 5 and seen["tidal/llama-office-hours"].events == 0:
            missing.append("tidal/llama-office-hours: no rule transition at the minute boundary")
        follow = final["es/llama-es"]
        tidal = final["tidal/llama-office-hours"]
        if tidal.desired is not None and follow.current != tidal.desired:
            missing.append(f"es/llama-es: deploy/llama at {follow.current}, not the Tidal's {tidal.desired}")
        for label in ("rsg/llama-pd", "llmscaler/chat-llama"):
            if len(seen[label].values) < 2:
                missing.append(f"{label}: replicas never changed (seen {seen[label].values})")
        if missing:
            raise DemoFailed("; ".join(missing) + f"; manager log:\n{self.manager_tail()}")

    def summarize(self) -> None:
        assert self.kube is not None
        step("summary (current replicas over the run)")
        say("\n".join(self.tracker.summary()))
        ns = self.ns
        step(f"why es/model-server is where it is: python -m escaler explain -n {ns} model-server")
        r = subprocess.run([sys.executable, "-m", "escaler", "explain", "-n", ns, "model-server",
                            f"--kubeconfig={self.kube.kubeconfig}"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        say(r.stdout.rstrip() or r.stderr.rstrip())
        step("where to look next" + (" (everything stays up until Ctrl-C)" if self.args.keep_running else
                                     " (with --keep-running, everything stays up until Ctrl-C)"))
        say(f"  export KUBECONFIG={self.kube.kubeconfig}")
        say("  kubectl get es,tidal,rsg,llmscaler -A")
        say(f"  kubectl get es model-server -n {ns} -o yaml     # conditions, recentDecisions")
        say(f"  python -m escaler explain -n {ns} model-server")
        say(f"  python -m escaler explain -n {ns} --kind LLMScaler chat-llama")
        say(f"  manager log: {self.manager_log}")

    def hold(self) -> None:
        while True:
            self.check_manager()
            time.sleep(1)

    # --- teardown -----------------------------------------------------------------------------

    def teardown(self, keep_work: bool) -> None:
        """Stop what was started, in reverse order; every step runs even if one before failed."""
        stopped = []
        if self.manager is not None and self.manager.poll() is None:
            self.manager.terminate()
            try:
                self.manager.wait(20)
            except subprocess.TimeoutExpired:
                self.manager.kill()
                self.manager.wait(5)
            stopped.append("manager")
        if self.api is not None:
            with contextlib.suppress(Exception):
                self.api.close()
        if self.prom is not None:
            with contextlib.suppress(Exception):
                self.prom.stop()
            stopped.append("fake Prometheus")
        if self.cluster is None and self.kube is not None and self.ns_created:
            with contextlib.suppress(Exception):
                self.kubectl("delete", "namespace", self.ns, "--wait=false")
                stopped.append(f"namespace {self.ns} deleted")
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.stop()
            stopped.append(f"control plane ({len(self.cluster.procs)} processes)")
        stray = reap(self.work)
        if stray:
            stopped.append(f"{stray} stray process(es)")
        if keep_work:
            say(f"torn down: {', '.join(stopped) or 'nothing was running'}; logs kept in {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)
            say(f"torn down: {', '.join(stopped) or 'nothing was running'}; {self.work} removed")


@dataclass(frozen=True)
class Kube:
    """The cluster the demo talks to: a kubeconfig and a kubectl."""

    kubeconfig: Path
    kubectl_bin: str

    def kubectl(self, *args: str, input: str | None = None) -> str:
        r = subprocess.run([self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", *args], input=input,
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout


def kubectl_path() -> str:
    """kubectl from hack/build.sh's cache (built on first use)."""
    out = subprocess.run(["bash", str(ROOT / "hack" / "build.sh"), "--print", "k8s"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    paths = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return paths["kubectl"]


def rbac_files() -> list[Path]:
    """The files of manifests/rbac: those its kustomization lists, or every YAML file in it."""
    d = ROOT / "manifests" / "rbac"
    kust = next((d / n for n in ("kustomization.yaml", "kustomization.yml") if (d / n).exists()), None)
    if kust is not None:
        return [d / r for r in yaml.safe_load(kust.read_text()).get("resources") or [] if (d / r).is_file()]
    return sorted(d.glob("*.yaml"))


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ssl.create_default_context()) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _screen_lines(block: list[str]) -> int:
    cols = max(20, shutil.get_terminal_size().columns)
    return sum(max(1, math.ceil(len(line) / cols)) for line in block)


def reap(work: Path) -> int:
    """Kill (by pid) any process still running with this run's work directory in its command line:
    a child started in the instant a Ctrl-C landed, before it was recorded. Returns how many."""
    me, n = os.getuid(), 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes().decode(errors="replace")
            if d.stat().st_uid != me or str(work) not in cmdline:
                continue
            os.kill(int(d.name), signal.SIGKILL)
            n += 1
        except (OSError, ValueError):
            continue
    return n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=DEFAULT_DURATION,
                    help=f"seconds the scenario plays the trace's hour in (default {DEFAULT_DURATION:.0f}; "
                         f"at least {MIN_DURATION:.0f}: a Tidal transition needs a minute boundary)")
    ap.add_argument("--interval", type=float, default=2.0,
                    help="seconds between live-view refreshes (default 2)")
    ap.add_argument("--keep-running", action="store_true",
                    help="after the summary, keep the control plane and the manager up until Ctrl-C")
    ap.add_argument("--keep-workdir", action="store_true", help="keep the work directory (logs) at the end")
    ap.add_argument("--kubeconfig", default=os.environ.get("ESCALER_E2E_KUBECONFIG") or None,
                    help="run on this cluster instead of starting the local control plane, in namespace "
                         f"{EXTERNAL_NS} (default: $ESCALER_E2E_KUBECONFIG, as make demo E2E_CLUSTER=kind "
                         "sets it; kubectl from $KUBECTL)")
    args = ap.parse_args(argv)
    if not args.duration >= MIN_DURATION:
        ap.error(f"--duration: must be at least {MIN_DURATION:.0f} seconds, got {args.duration:g}")
    if not 0.5 <= args.interval <= 30:
        ap.error(f"--interval: must be between 0.5 and 30 seconds, got {args.interval:g}")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="escaler-demo-"))
    say(f"escaler demo (work directory {work}, pid {os.getpid()})")
    signal.signal(signal.SIGTERM, _interrupt)
    # Ctrl-C tears down at any moment, also when started by a parent that ignores SIGINT (a
    # background job of a non-interactive shell, a test worker): an ignored SIGINT is inherited
    # across exec, and Python then installs no KeyboardInterrupt handler of its own
    signal.signal(signal.SIGINT, _interrupt)
    demo: Demo | None = None
    rc = 1
    try:
        try:
            demo = Demo(work, args)
            demo.start_cluster()
            demo.install()
            demo.start_prometheus()
            demo.start_manager()
            demo.create_objects()
            demo.play()
            demo.summarize()
            rc = 0
            if args.keep_running:
                demo.hold()
        except DemoFailed as e:
            say(f"\ndemo failed: {e}")
            rc = 1
    except KeyboardInterrupt as e:
        if rc != 0:  # Ctrl-C after the summary of --keep-running is the normal way out
            rc = 143 if str(e) == "SIGTERM" else 130
            say(f"\ninterrupted ({'SIGTERM' if rc == 143 else 'Ctrl-C'}): tearing down")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if demo is not None:
            demo.teardown(keep_work=rc == 1 or args.keep_workdir)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
