"""Sharding: the same fleet-wide surge on 1 manager and on K sharded replicas (real control plane).

For each K of ``BENCH_SHARDING_K`` (comma list, default ``1,2``) on a **fresh** local control plane,
with ``BENCH_SHARDING_N`` scalers (default 1000) built exactly as ``bench_capacity`` builds them
(a ``/scale``-only CRD, targets at 3 replicas over 10 namespaces, one distinct ExternalServer query
per scaler against the fake Prometheus in its own process, 30 +-4 % noise):

* K = 1: one ``python -m escaler manager`` with its defaults (as ``bench_capacity``);
* K > 1: K replicas, each ``--leader-elect --total-shards=K --shard-index=i`` as its own
  client-certificate user, all on this machine; the row starts once every shard Lease is held by
  its preferred replica.

Measured as ``bench_capacity`` measures it, with its helpers: ``first poll s`` (creation done ->
every scaler shows a collection); over the idle window (``BENCH_CAPACITY_IDLE_CYCLES`` x 30 s, all
replicas together) ``idle CPU ms/poll`` (CPU per interval), ``idle cores``, ``idle ms/query`` (CPU
per completed poll) and ``queries/scaler/poll`` (the fake Prometheus's query count / (N x
intervals): 1.0 = every scaler polled once per interval); then at a random phase of the poll
interval every series doubles at once (clock read before the change) and ONE watch on the targets
records each target's first rise (``write p50/p99/max s``) and first reach of the needed 6 (``need
p99 s``); ``surge API writes`` is the API server's audit count of the replicas' writes over the
surge, ``surge CPU s`` sums the replicas' CPU and ``surge apiserver+etcd CPU s`` the control plane's
from the step to the last write (the same two cores); ``VmHWM MB`` is per replica; ``machine load``
the 1-minute load average when the surge ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_capacity as cap

TITLE = "Sharding: one fleet-wide surge on 1 manager vs K sharded replicas (real control plane)"
NOTES = """
Conditions: a fresh local control plane per row on this 2-core machine, shared by the API server,
etcd, the fake Prometheus, the bench's watch and **all** the replicas (so K replicas here compete
for the same 2 cores: the row shows the cost and the latency of sharding on one machine, not the
capacity of K machines); other engineers' tests may run at the same time. The fleet and the surge
are `bench_capacity`'s (apa at defaults: 60 s Average window, scale-up stabilization 0, 30 s poll).
K > 1: `--leader-elect --total-shards=K --shard-index=i`, lease timings at their defaults (15 s /
10 s / 2 s), one client-certificate user per replica. `surge CPU s` sums the replicas;
`surge apiserver+etcd CPU s` is what the API server and etcd used over the same span, on the same
two cores; `idle ms/query` and `queries/scaler/poll` are `bench_capacity`'s (all replicas together).
"""

N = int(os.environ.get("BENCH_SHARDING_N", "1000"))
KS = [int(x) for x in os.environ.get("BENCH_SHARDING_K", "1,2").split(",") if x.strip()]
NOTES += (f"\nThis run: `BENCH_SHARDING_N={N} BENCH_SHARDING_K={','.join(map(str, KS))} "
          f"BENCH_CAPACITY_IDLE_CYCLES={cap.IDLE_CYCLES:g} python bench/run.py bench_sharding`.\n")
LEASE_ID = "escaler-bench"
LEASE_NS = "default"


class ShardedRun(cap.Run):
    """``bench_capacity.Run`` with K manager replicas instead of one."""

    def __init__(self, n: int, k: int) -> None:
        super().__init__(n)
        self.k = k
        self.mgrs: list[subprocess.Popen[bytes]] = []

    def user(self, i: int) -> str:
        """Replica ``i``'s client-certificate user (K = 1: bench_capacity's, so its audit filter fits)."""
        return cap.USER if self.k == 1 else f"{cap.USER}-{i}"

    def start_replicas(self) -> list[int]:
        for i in range(self.k):
            kc = self.cluster.user_kubeconfig(self.user(i))
            args = [sys.executable, "-m", "escaler", "manager", f"--kubeconfig={kc}", "--webhook-port=0",
                    "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
                    "--api-bind-address=0", "--allow-endpoint-networks=127.0.0.0/8"]
            if self.k > 1:
                args += ["--leader-elect", f"--leader-election-id={LEASE_ID}",
                         f"--leader-election-namespace={LEASE_NS}", f"--total-shards={self.k}",
                         f"--shard-index={i}"]
            log = open(self.work / f"manager-{i}.log", "wb")  # noqa: SIM115
            self.mgrs.append(subprocess.Popen(args, cwd=cap.SRC, stdout=log, stderr=subprocess.STDOUT,
                                              env={**os.environ, "PYTHONPATH": str(cap.SRC)}))
        return [m.pid for m in self.mgrs]

    def alive(self) -> bool:
        return bool(self.mgrs) and all(m.poll() is None for m in self.mgrs)

    def stop_manager(self) -> None:
        for m in self.mgrs:
            if m.poll() is None:
                m.terminate()
        for m in self.mgrs:
            try:
                m.wait(60)
            except subprocess.TimeoutExpired:
                m.kill()
                m.wait(10)

    def leases_held(self) -> bool:
        if self.k == 1:
            return True
        for i in range(self.k):
            out = self.cluster.kubectl("get", "lease", f"{LEASE_ID}-shard-{i}", "-n", LEASE_NS, "-o",
                                       "jsonpath={.spec.holderIdentity}", check=False)
            if not out.strip():
                return False
        return True

    def surge(self) -> dict[str, Any]:
        n = self.n
        load = cap.Load()
        proc, port = cap.spawn(cap._serve_prometheus, load)
        self.procs.append(proc)
        endpoint = f"http://127.0.0.1:{port}"
        self.namespaces("es")
        pids = self.start_replicas()
        cap.wait_until(self.leases_held, 60, "every shard Lease held", self.alive)
        obs, collected = cap.TargetObserver(), cap.CollectedObserver()
        cap.Watch(self.api, f"/apis/{cap.GROUP}/v1/{cap.PLURAL}", obs.on_event).start()
        cap.Watch(self.api, "/apis/elasticscaler.io/v1alpha1/elasticscalers", collected.on_event).start()
        fleet = cap.placed(n, "es")
        self.api.create_all((f"/apis/{cap.GROUP}/v1/namespaces/{ns}/{cap.PLURAL}", cap.target(name))
                            for ns, name, _ in fleet)
        self.api.create_all((f"/apis/elasticscaler.io/v1alpha1/namespaces/{ns}/elasticscalers",
                             cap.scaler(name, endpoint, ns)) for ns, name, _ in fleet)
        first_poll_s = cap.wait_until(lambda: len(collected.done) >= n, 60 + 4 * cap.POLL + n / 50,
                                      f"all {n} scalers collected", self.alive)
        time.sleep(cap.POLL)  # first status writes land
        # -- idle, noisy metric: bench_capacity's window (BENCH_CAPACITY_IDLE_CYCLES x 30 s)
        idle_s = cap.IDLE_CYCLES * cap.POLL
        q0, c0, w0 = load.count.value, sum(cap.cpu_seconds(p) for p in pids), time.time()
        time.sleep(idle_s)
        q1, c1, w1 = load.count.value, sum(cap.cpu_seconds(p) for p in pids), time.time()
        if not self.alive():
            raise RuntimeError(f"a replica died during the idle window; see {self.work}")
        queries = q1 - q0
        if queries == 0:
            raise RuntimeError(f"the replicas made no query in the idle window; see {self.work}")
        time.sleep(random.uniform(0, cap.POLL))
        surge_audit_off = self.cluster.audit_log.stat().st_size
        surge_timeout = 4 * cap.POLL + n / 100
        with obs.lock:
            obs.armed = True
        c_step, s_step = sum(cap.cpu_seconds(p) for p in pids), self.server_cpu()
        w_step, ts = time.time(), time.monotonic()
        load.scale.value = 2.0
        with contextlib.suppress(TimeoutError):
            cap.wait_until(lambda: len(obs.first_write) >= n and len(obs.first_need) >= n, surge_timeout,
                           "every target written", self.alive, interval=0.2)
        last = max([*obs.first_write.values(), *obs.first_need.values()], default=ts)
        c_end, s_end = sum(cap.cpu_seconds(p) for p in pids), self.server_cpu()
        w_end = time.time()
        hwm = [round(cap.proc_status(p)["VmHWM"] / 1024) for p in pids]
        time.sleep(3)  # audit lines of requests received before w_end
        writes = Counter[str]()
        for i in range(self.k):  # one client-certificate user per replica (K = 1: bench_capacity's)
            writes += cap.audit_writes(self.cluster.audit_log, surge_audit_off, self.user(i), w_step, w_end)
        row: dict[str, Any] = {
            "replicas x shards": f"{self.k} x {self.k}" if self.k > 1 else "1 (no sharding)",
            "N": n,
            "first poll s": round(first_poll_s, 1),
            "idle CPU ms/poll": round((c1 - c0) / (idle_s / cap.POLL) * 1000),
            "idle cores": round((c1 - c0) / (w1 - w0), 3),
            "idle ms/query": round((c1 - c0) * 1000 / queries, 2),
            "queries/scaler/poll": round(queries / n / (idle_s / cap.POLL), 2),
            **cap.surge_stats(obs, ts, n, surge_timeout),
            "surge API writes": ", ".join(f"{k} {v}" for k, v in sorted(writes.items())) or "0",
            "surge CPU s": round(c_end - c_step, 1),
            "surge apiserver+etcd CPU s": round(s_end - s_step, 1),
            "surge wall s": round(last - ts, 1),
            "VmHWM MB": "/".join(str(h) for h in hwm),
            "machine load": round(os.getloadavg()[0], 1),  # 1-min load average after the surge
        }
        self.stop_manager()
        return row


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for k in KS:
        r = ShardedRun(N, k)
        print(f"sharding K={k} N={N}: work directory {r.work}", flush=True)
        try:
            r.setup()
            row = r.surge()
            print(f"  {row}", flush=True)
            rows.append(row)
            with open(r.work.parent / "escaler-sharding.jsonl", "a") as f:
                f.write(json.dumps({"when": time.strftime("%H:%M:%S"), **row}) + "\n")
        finally:
            r.close()
    return rows


def main() -> int:
    from run import table

    print(table(run()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
