#!/usr/bin/env python3
"""The kind path of ``make e2e`` and ``make demo``: ``E2E_CLUSTER=kind``.

The default cluster of the e2e suite and the demo is the local control plane of ``hack/cluster.py``
(no Docker needed). Platform engineers who have Docker can run both against kind instead:

    make e2e E2E_CLUSTER=kind     # = hack/kind.py preflight; make venv chromium; hack/kind.py e2e
    make demo E2E_CLUSTER=kind    # = hack/kind.py preflight; make venv; hack/kind.py demo

Sub-commands:

* ``preflight --target e2e|demo`` — stdlib only, run by make with the system ``python3`` BEFORE the
  virtualenv, chromium or any binary is built: exits 0 when the ``docker`` CLI is on ``PATH`` and its
  daemon answers ``docker info``; otherwise prints why, that Docker is required for
  ``E2E_CLUSTER=kind``, and that the default (``make e2e``/``make demo`` without ``E2E_CLUSTER``) is
  the local control plane from ``hack/``, and exits 2 having built and installed nothing.
* ``e2e [PYTEST_ARGS...]`` — ``up`` (below), then ``pytest tests/e2e`` with
  ``ESCALER_E2E_KUBECONFIG`` set to the kind cluster's kubeconfig and ``KUBECTL`` to the cached
  kubectl (tests/e2e/conftest.py then uses that cluster instead of starting the local one; the
  tests that need the local control plane's etcd, audit log or API-server restarts say so and fail
  there), then ``down``.
* ``demo`` — ``up``, then ``hack/demo.py`` with the same ``ESCALER_E2E_KUBECONFIG``, then ``down``.
* ``up`` — creates the kind cluster ``escaler-e2e`` through pytest-kind's ``KindCluster`` (the kind
  binary is ``KIND_BIN``, else ``kind`` on ``PATH``, else built once with ``go install`` from the Go
  module proxy into ``~/.cache/escaler/kind-<version>/bin``, as ``hack/build.sh`` builds the other
  binaries); builds the two images from the repository's ``Dockerfile`` (``docker build``: the
  manager's default target, tag ``escaler:kind``, and ``--target slo-api``, tag
  ``escaler-slo-api:kind``); ``kind load docker-image``s them; installs ``charts/escaler`` with Helm
  (the binary of ``hack/build.sh helm``) pointed at them (``image``, ``sloApi.image``) with
  ``pullPolicy=Never``, and waits until its Deployments are Ready (the images run ``escaler manager``
  and ``escaler slo-api`` in a real cluster).
  Prints the kubeconfig path. ``e2e`` and ``demo`` then scale the chart's manager to 0: the suite and
  the demo run managers of their own, which must not reconcile beside another one.
* ``down`` — deletes the cluster (``KEEP_CLUSTER=1`` keeps it after ``e2e``/``demo``).

Everything pytest-kind writes goes under ``~/.cache/escaler/kind/`` (it writes into its working
directory), never into the repository.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ESCALER_CACHE") or Path.home() / ".cache" / "escaler")
KIND_VERSION = "v0.33.0"
CLUSTER_NAME = "escaler-e2e"
IMAGE = "escaler:kind"
SLO_API_IMAGE = "escaler-slo-api:kind"  # the Dockerfile's slo-api target
RELEASE = "escaler"
RELEASE_NAMESPACE = "escaler-system"
MANAGER_SELECTOR = "app.kubernetes.io/name=escaler,app.kubernetes.io/component=manager"
ALLOWED = ("local", "kind")


def docker_problem(which: Any = shutil.which, run: Any = subprocess.run) -> str | None:
    """Why Docker cannot be used here (``None`` when it can): no CLI on PATH, or no daemon."""
    docker = which("docker")
    if docker is None:
        return "`docker` is not on PATH"
    try:
        r = run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"`docker info` failed: {err}"
    if r.returncode != 0:
        detail = (r.stderr or r.stdout).strip().splitlines()
        return f"`docker info` cannot reach the Docker daemon ({detail[-1] if detail else r.returncode})"
    return None


def preflight_message(target: str, problem: str, who: str | None = None) -> str:
    """The refusal: who refused, why, and the default (``make TARGET`` on the local control plane)."""
    who = who or f"make {target} E2E_CLUSTER=kind"
    return (
        f"{who}: Docker is required for E2E_CLUSTER=kind, and {problem}.\n"
        "  kind runs the Kubernetes nodes as Docker containers, and the escaler image is built from the\n"
        "  Dockerfile with `docker build` and loaded with `kind load docker-image`.\n"
        "  Nothing was built or installed.\n"
        f"  The default is the local control plane from hack/ (no Docker needed): run `make {target}`\n"
        f"  without E2E_CLUSTER (E2E_CLUSTER=local). Allowed values: {', '.join(ALLOWED)}."
    )


def preflight(target: str) -> int:
    problem = docker_problem()
    if problem is None:
        return 0
    print(preflight_message(target, problem), file=sys.stderr)
    return 2


# --- everything below needs Docker and the dev virtualenv (pytest-kind) -----------------------------


def _run(*cmd: str | Path, **kw: Any) -> None:
    print("+ " + " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def kind_binary() -> Path:
    explicit = os.environ.get("KIND_BIN") or shutil.which("kind")
    if explicit:
        return Path(explicit)
    out = CACHE / f"kind-{KIND_VERSION}" / "bin"
    binary = out / "kind"
    if not binary.exists():
        out.mkdir(parents=True, exist_ok=True)
        _run("go", "install", "-trimpath", f"sigs.k8s.io/kind@{KIND_VERSION}",
             env={**os.environ, "GOBIN": str(out)})
    return binary


def cached_binary(component: str, name: str) -> Path:
    """A binary of ``hack/build.sh --print COMPONENT`` (built first when missing)."""
    out = subprocess.run([str(ROOT / "hack" / "build.sh"), "--print", component], check=True,
                         capture_output=True, text=True).stdout
    paths = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return Path(paths[name])


def cluster() -> Any:
    from pytest_kind import KindCluster  # dev dependency; imported only on the kind path

    work = CACHE / "kind"
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # KindCluster writes .pytest-kind/<name>/ into the working directory
    return KindCluster(CLUSTER_NAME, kubeconfig=work / "kubeconfig", kind_path=kind_binary(),
                       kubectl_path=cached_binary("k8s", "kubectl"))


def up() -> Any:
    kc = cluster()
    kc.create()
    _run("docker", "build", "-t", IMAGE, "-f", ROOT / "Dockerfile", ROOT)
    _run("docker", "build", "--target", "slo-api", "-t", SLO_API_IMAGE, "-f", ROOT / "Dockerfile", ROOT)
    sets = []
    for image, value in ((IMAGE, "image"), (SLO_API_IMAGE, "sloApi.image")):
        kc.load_docker_image(image)
        repository, tag = image.split(":")
        sets += ["--set", f"{value}.repository={repository}", "--set", f"{value}.tag={tag}"]
    _run(cached_binary("helm", "helm"), "upgrade", "--install", RELEASE, ROOT / "charts" / "escaler",
         "--kubeconfig", kc.kubeconfig_path, "--namespace", RELEASE_NAMESPACE, "--create-namespace",
         *sets, "--set", "image.pullPolicy=Never", "--wait", "--timeout", "5m")
    print(f"kind cluster {CLUSTER_NAME} is up; KUBECONFIG={kc.kubeconfig_path}", flush=True)
    return kc


def down() -> int:
    cluster().delete()
    return 0


def with_cluster(cmd: list[str]) -> int:
    kc = up()
    try:
        # the chart's manager came up Ready on the image (helm --wait); the suite and the demo start
        # managers of their own, so the in-cluster one steps aside rather than reconcile beside them
        _run(kc.kubectl_path, "--kubeconfig", kc.kubeconfig_path, "scale", "deployment",
             "--namespace", RELEASE_NAMESPACE, "--selector", MANAGER_SELECTOR, "--replicas=0")
        env = {**os.environ, "ESCALER_E2E_KUBECONFIG": str(kc.kubeconfig_path),
               "KUBECTL": str(kc.kubectl_path)}
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode
    finally:
        if os.environ.get("KEEP_CLUSTER") != "1":
            kc.delete()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hack/kind.py",
                                description="The E2E_CLUSTER=kind path of make e2e and make demo.")
    sub = p.add_subparsers(dest="cmd", required=True)
    pre = sub.add_parser("preflight", help="fail at once, clearly, when Docker is missing")
    pre.add_argument("--target", choices=("e2e", "demo"), default="e2e")
    e2e = sub.add_parser("e2e", help="run tests/e2e against a kind cluster")
    e2e.add_argument("pytest_args", nargs=argparse.REMAINDER)
    sub.add_parser("demo", help="run hack/demo.py against a kind cluster")
    sub.add_parser("up", help="create the cluster, build and load the image, install the chart")
    sub.add_parser("down", help="delete the cluster")
    args = p.parse_args(argv)
    if args.cmd == "preflight":
        return preflight(args.target)
    problem = docker_problem()
    if problem is not None:
        target = "demo" if args.cmd == "demo" else "e2e"
        print(preflight_message(target, problem, who=f"hack/kind.py {args.cmd}"), file=sys.stderr)
        return 2
    if args.cmd == "e2e":
        return with_cluster([sys.executable, "-m", "pytest", "tests/e2e", "-q", *args.pytest_args])
    if args.cmd == "demo":
        return with_cluster([sys.executable, str(ROOT / "hack" / "demo.py")])
    if args.cmd == "up":
        up()
        return 0
    return down()


if __name__ == "__main__":
    raise SystemExit(main())
