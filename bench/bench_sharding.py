"""Sharding: the same fleet-wide surge on 1 manager and on K sharded replicas (real control plane).

For each K of ``BENCH_SHARDING_K`` (comma list, default ``1,2``) on a **fresh** local control plane,
with ``BENCH_SHARDING_N`` scalers (default 1000) built exactly as ``bench_capacity`` builds them
(a ``/scale``-only CRD, targets at 3 replicas over 10 namespaces, one distinct ExternalServer query
per scaler against the fake Prometheus in its own process, 30 +-4 % noise):

* K = 1: one ``python -m escaler manager`` with its defaults (as ``bench_capacity``);
* K > 1: K replicas, each ``--leader-elect --total-shards=K --shard-index=i`` as its own
  client-certificate user, all on this machine; the row starts once every shard Lease is held by
  its preferred replica.

Measured as ``bench_capacity`` measures it: ``first poll s`` (creation done -> every scaler shows a
collection), ``idle CPU ms/poll`` (all replicas together, one 30 s interval), then at a random
phase of the poll interval every series doubles at once (clock read before the change) and ONE
watch on the targets records each target's first rise (``write p50/p99/max s``) and first reach of
the needed 6 (``need p99 s``); ``surge CPU s`` sums the replicas' CPU from the step to the last
write; ``VmHWM MB`` is per replica.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import time
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
10 s / 2 s), one client-certificate user per replica. `surge CPU s` sums the replicas.
"""

N = int(os.environ.get("BENCH_SHARDING_N", "1000"))
KS = [int(x) for x in os.environ.get("BENCH_SHARDING_K", "1,2").split(",") if x.strip()]
LEASE_ID = "escaler-bench"
LEASE_NS = "default"


class ShardedRun(cap.Run):
    """``bench_capacity.Run`` with K manager replicas instead of one."""

    def __init__(self, n: int, k: int) -> None:
        super().__init__(n)
        self.k = k
        self.mgrs: list[subprocess.Popen[bytes]] = []

    def start_replicas(self) -> list[int]:
        for i in range(self.k):
            user = f"{cap.USER}-{i}"
            kc = self.cluster.user_kubeconfig(user)
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
        c0 = sum(cap.cpu_seconds(p) for p in pids)
        time.sleep(cap.POLL)
        idle_ms = (sum(cap.cpu_seconds(p) for p in pids) - c0) * 1000
        time.sleep(random.uniform(0, cap.POLL))
        surge_timeout = 4 * cap.POLL + n / 100
        with obs.lock:
            obs.armed = True
        c_step = sum(cap.cpu_seconds(p) for p in pids)
        ts = time.monotonic()
        load.scale.value = 2.0
        with contextlib.suppress(TimeoutError):
            cap.wait_until(lambda: len(obs.first_write) >= n and len(obs.first_need) >= n, surge_timeout,
                           "every target written", self.alive, interval=0.2)
        last = max([*obs.first_write.values(), *obs.first_need.values()], default=ts)
        c_end = sum(cap.cpu_seconds(p) for p in pids)
        hwm = [round(cap.proc_status(p)["VmHWM"] / 1024) for p in pids]
        row: dict[str, Any] = {
            "replicas x shards": f"{self.k} x {self.k}" if self.k > 1 else "1 (no sharding)",
            "N": n,
            "first poll s": round(first_poll_s, 1),
            "idle CPU ms/poll": round(idle_ms),
            **cap.surge_stats(obs, ts, n, surge_timeout),
            "surge CPU s": round(c_end - c_step, 1),
            "surge wall s": round(last - ts, 1),
            "VmHWM MB": "/".join(str(h) for h in hwm),
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
