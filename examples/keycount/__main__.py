"""``python -m examples.keycount``: run the keycount operator (see the package docstring)."""

from __future__ import annotations

import argparse
import logging

from escaler.runtime import Manager, ManagerOptions

from . import setup


def main() -> int:
    ap = argparse.ArgumentParser(prog="keycount", description=__doc__)
    ap.add_argument("--kubeconfig", default=None)
    ap.add_argument("--namespace", default="", help="watch only this namespace (default: all)")
    ap.add_argument("--leader-elect", action="store_true")
    ap.add_argument("--leader-election-id", default="keycount")
    ap.add_argument("--leader-election-namespace", default="")
    ap.add_argument("--identity", default="", help="Lease holder identity (default: host_uuid)")
    ap.add_argument("--metrics-bind-address", default=":8080")
    ap.add_argument("--health-probe-bind-address", default=":8081")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    mgr = Manager(ManagerOptions(
        kubeconfig=args.kubeconfig, namespace=args.namespace, leader_election=args.leader_elect,
        leader_election_id=args.leader_election_id,
        leader_election_namespace=args.leader_election_namespace or args.namespace,
        leader_election_identity=args.identity,
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
    ))
    setup(mgr)
    return mgr.start()


if __name__ == "__main__":
    raise SystemExit(main())
