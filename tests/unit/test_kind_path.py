"""``make e2e|demo E2E_CLUSTER=kind`` without Docker fails at once, clearly, having built nothing.

``make`` runs as a subprocess with a ``PATH`` on which ``docker`` is absent (every ``PATH`` directory
holding one is replaced by a copy of its links without it), or is a stub whose daemon does not
answer, and with ``VENV`` pointed at a directory that must not appear: the refusal comes before the
virtualenv, chromium or any control-plane binary. Any other ``E2E_CLUSTER`` is refused naming the
allowed values, and the default stays the local control plane. ``hack/kind.py``'s Docker probe is
checked with injected ``which``/``run``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _kind_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_kind", ROOT / "hack" / "kind.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _path_without_docker(tmp: Path) -> str:
    dirs = []
    for i, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if not d or not (Path(d) / "docker").exists():
            dirs.append(d)
            continue
        shadow = tmp / f"path{i}"
        shadow.mkdir()
        for entry in Path(d).iterdir():
            if entry.name != "docker":
                (shadow / entry.name).symlink_to(entry)
        dirs.append(str(shadow))
    return os.pathsep.join(dirs)


def _make(tmp: Path, *args: str, path: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PATH": path}
    for inherited in ("E2E_CLUSTER", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):  # e.g. when run under make test
        env.pop(inherited, None)
    t0 = time.monotonic()
    r = subprocess.run(["make", "-s", "-C", str(ROOT), f"VENV={tmp / 'venv'}", *args], env=env,
                       capture_output=True, text=True, timeout=60)
    return r, time.monotonic() - t0


@pytest.mark.parametrize("target", ["e2e", "demo"])
def test_kind_without_docker_fails_at_once_naming_the_default(tmp_path: Path, target: str) -> None:
    path = _path_without_docker(tmp_path)
    r, took = _make(tmp_path, target, "E2E_CLUSTER=kind", path=path)
    assert r.returncode != 0
    assert f"make {target} E2E_CLUSTER=kind: Docker is required for E2E_CLUSTER=kind" in r.stderr
    assert "`docker` is not on PATH" in r.stderr
    assert "The default is the local control plane from hack/" in r.stderr
    assert f"run `make {target}`\n  without E2E_CLUSTER" in r.stderr
    assert "Nothing was built or installed." in r.stderr
    assert took < 5, f"took {took:.1f}s"
    assert not (tmp_path / "venv").exists(), "the virtualenv was created before the Docker check"
    assert "hack/build.sh" not in r.stdout and "pip" not in r.stdout


def test_kind_with_a_dead_docker_daemon_fails_at_once(tmp_path: Path) -> None:
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    stub = stub_dir / "docker"
    stub.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///x.sock' >&2\nexit 1\n")
    stub.chmod(0o755)
    path = os.pathsep.join([str(stub_dir), _path_without_docker(tmp_path)])
    r, took = _make(tmp_path, "e2e", "E2E_CLUSTER=kind", path=path)
    assert r.returncode != 0
    assert "Docker is required for E2E_CLUSTER=kind" in r.stderr
    assert "`docker info` cannot reach the Docker daemon (Cannot connect to the Docker daemon" in r.stderr
    assert took < 5 and not (tmp_path / "venv").exists()


@pytest.mark.parametrize("value", ["kinds", "", "kind local", "minikube"])
@pytest.mark.parametrize("target", ["e2e", "demo"])
def test_other_clusters_are_refused_naming_the_allowed_values(tmp_path: Path, target: str,
                                                              value: str) -> None:
    r, took = _make(tmp_path, target, f"E2E_CLUSTER={value}", path=os.environ["PATH"])
    assert r.returncode != 0
    assert f"E2E_CLUSTER='{value}' is not allowed: use one of local kind" in r.stderr
    assert took < 5 and not (tmp_path / "venv").exists()


def test_the_cluster_value_is_not_checked_for_other_targets(tmp_path: Path) -> None:
    r, _ = _make(tmp_path, "-n", "clean", "E2E_CLUSTER=bogus", path=os.environ["PATH"])
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("target", "runs"), [("e2e", "-m pytest tests/e2e"), ("demo", "hack/demo.py")])
def test_the_default_is_the_local_control_plane(tmp_path: Path, target: str, runs: str) -> None:
    r, _ = _make(tmp_path, "-n", target, path=os.environ["PATH"])
    assert r.returncode == 0, r.stderr
    assert "hack/build.sh" in r.stdout and runs in r.stdout
    assert "kind.py" not in r.stdout


def test_docker_probe() -> None:
    kind = _kind_module()
    ok = SimpleNamespace(returncode=0, stdout="27.0.1\n", stderr="")
    dead = SimpleNamespace(returncode=1, stdout="", stderr="error\nCannot connect to the Docker daemon\n")

    def which(name: str) -> str | None:
        return "/usr/bin/docker" if name == "docker" else None

    assert kind.docker_problem(which=lambda _: None) == "`docker` is not on PATH"
    assert kind.docker_problem(which=which, run=lambda *a, **k: ok) is None
    assert kind.docker_problem(which=which, run=lambda *a, **k: dead) == (
        "`docker info` cannot reach the Docker daemon (Cannot connect to the Docker daemon)")

    def hangs(*a: object, **k: object) -> None:
        raise subprocess.TimeoutExpired("docker info", 20)

    assert kind.docker_problem(which=which, run=hangs).startswith("`docker info` failed: ")


def test_hack_kind_refuses_every_command_without_docker(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": _path_without_docker(tmp_path)}
    for cmd in ("e2e", "demo", "up", "down"):
        r = subprocess.run([sys.executable, str(ROOT / "hack" / "kind.py"), cmd], env=env,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (cmd, r.stderr)
        assert f"hack/kind.py {cmd}: Docker is required for E2E_CLUSTER=kind" in r.stderr


def test_up_builds_loads_and_installs_both_images(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manager's image (the Dockerfile's default target) and the SLO API's (``--target
    slo-api``) are built, loaded into kind, and named to the chart (``image``, ``sloApi.image``)."""
    kind = _kind_module()
    ran: list[list[str]] = []
    loaded: list[str] = []

    class FakeCluster:
        kubeconfig_path = "/kc"

        def create(self) -> None:
            pass

        def load_docker_image(self, image: str) -> None:
            loaded.append(image)

    monkeypatch.setattr(kind, "cluster", FakeCluster)
    monkeypatch.setattr(kind, "cached_binary", lambda component, name: name)
    monkeypatch.setattr(kind, "_run", lambda *cmd, **kw: ran.append([str(c) for c in cmd]))
    kind.up()
    builds = [c for c in ran if c[:2] == ["docker", "build"]]
    assert [c[2:-3] for c in builds] == [["-t", "escaler:kind"],
                                         ["--target", "slo-api", "-t", "escaler-slo-api:kind"]]
    assert loaded == ["escaler:kind", "escaler-slo-api:kind"]
    helm = next(c for c in ran if c[0] == "helm")
    sets = {helm[i + 1] for i, a in enumerate(helm) if a == "--set"}
    assert {"image.repository=escaler", "image.tag=kind", "sloApi.image.repository=escaler-slo-api",
            "sloApi.image.tag=kind", "image.pullPolicy=Never"} == sets
