"""The distribution, built and installed as a user (and the Dockerfile) would.

The wheel is built exactly as the Dockerfile's builder stage builds it: its ``COPY`` sources (read
from the Dockerfile with dockerfile-parse, minus what ``.dockerignore`` drops) are copied into an
empty build context, then ``python -m build --no-isolation --wheel`` (the backend is the dev
virtualenv's; no network build environment). A CLEAN virtualenv (no system site packages) then
``pip install``s only that wheel, its dependencies from the package index — what the manager's
runtime stage does — and the test runs its console scripts: ``escaler version``, ``kubectl-escaler
--help``, ``escaler crds`` and ``escaler samples``; checks the CRDs and samples inside the installed
package are byte-identical to ``manifests/``; and runs ``kubectl escaler version`` through the real
kubectl binary with the virtualenv's ``bin`` on ``PATH`` (kubectl's plugin mechanism). That bare
install has none of the extras (issue 29: no FastAPI, uvicorn, scipy, matplotlib, numpy, tqdm), and
``escaler slo-api`` and ``escaler simulate`` say in one line what to install; a second clean
virtualenv installs ``escaler[all]`` from the same wheel, where both commands' modules import.
``make dist`` builds the sdist and a wheel with the same files. pip downloads through its own cache
(``~/.cache/pip``), so only the first run fetches the packages.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

import escaler
from escaler.api.crdgen import render_stream

from .conftest import Cluster

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")  # .dockerignore's exclusions


def _run(*cmd: str | Path, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def _builder_copies() -> list[str]:
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    stages: list[list[dict[str, str]]] = []
    for ins in parser.structure:
        if ins["instruction"] == "FROM":
            stages.append([])
        elif stages and ins["instruction"] == "COPY":
            stages[-1].append(ins)
    return [src for ins in stages[0] for src in shlex.split(ins["value"])[:-1] if not src.startswith("--")]


def _wheel_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if ".dist-info/" not in n}


@contextlib.contextmanager
def _once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """A directory ``name`` shared by every worker of this run (parallel tier: the workers' temp
    directories have one parent), held under a file lock: yields (directory, already built), so
    the wheel and the clean virtualenv are built once per run, not once per worker that runs a
    test of this file."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    d = shared / f"shared-{name}"
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = d / ".built"
        yield d, done.exists()
        done.touch()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with _once(tmp_path_factory, "dist") as (out, built):
        if not built:
            _build_wheel(tmp_path_factory, out)
    wheels = sorted(out.glob("*.whl"))
    assert [w.name for w in wheels] == [f"escaler-{escaler.__version__}-py3-none-any.whl"]
    return wheels[0]


def _build_wheel(tmp_path_factory: pytest.TempPathFactory, out: Path) -> None:
    context = tmp_path_factory.mktemp("docker-context")
    for src in _builder_copies():
        path = ROOT / src
        if path.is_dir():
            shutil.copytree(path, context / src, ignore=IGNORED)
        else:
            shutil.copy2(path, context / src)
    _run(sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", out, context, timeout=300)


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with _once(tmp_path_factory, "clean-venv") as (d, built):
        root = d / "venv"
        if not built:
            _run(sys.executable, "-m", "venv", root)
            _run(root / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q",
                 wheel, timeout=600)
    cfg = (root / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in cfg
    yield root / "bin"


@pytest.fixture(scope="module")
def full_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A second clean virtualenv with ``escaler[all]``: the same wheel and every extra."""
    with _once(tmp_path_factory, "all-venv") as (d, built):
        root = d / "venv"
        if not built:
            _run(sys.executable, "-m", "venv", root)
            _run(root / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q",
                 f"{wheel}[all]", timeout=600)
    yield root / "bin"


def _in_venv(bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # cwd outside the repository: nothing of the checkout can be imported by accident
    return _run(bin_dir / args[0], *args[1:], cwd=bin_dir.parent)


def test_the_wheel_carries_the_crds_samples_trace_and_scripts(wheel: Path) -> None:
    files = _wheel_files(wheel)
    for kind in ("crds", "samples"):
        want = {f"escaler/data/{kind}/{p.name}" for p in (ROOT / "manifests" / kind).glob("*.yaml")}
        assert want and want <= files, sorted(want - files)
    for trace in ("AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv",
                  "servegen_aggregate_rate_10min.csv", "README.md"):  # the traces and their attribution
        assert f"escaler/sim/data/{trace}" in files, trace
    with zipfile.ZipFile(wheel) as z:
        entry_points = z.read(f"escaler-{escaler.__version__}.dist-info/entry_points.txt").decode()
    assert "escaler = escaler.cli.main:main" in entry_points
    assert "kubectl-escaler = escaler.cli.plugin:main" in entry_points


def test_escaler_version_runs_from_the_clean_venv(venv: Path) -> None:
    where = _in_venv(venv, "python", "-c", "import escaler, sys; print(escaler.__file__); print(sys.prefix)")
    module, prefix = where.stdout.splitlines()
    assert Path(module).is_relative_to(venv.parent), module
    assert Path(prefix) == venv.parent
    out = _in_venv(venv, "escaler", "version").stdout
    assert out.startswith(f"escaler {escaler.__version__} (python 3.")


EXTRAS_MODULES = ("fastapi", "starlette", "uvicorn", "scipy", "matplotlib", "numpy", "tqdm")


def _importable(bin_dir: Path) -> list[str]:
    probe = _in_venv(bin_dir, "python", "-c", "import importlib.util as u, json; "
                     f"print(json.dumps([m for m in {EXTRAS_MODULES!r} if u.find_spec(m)]))")
    return list(json.loads(probe.stdout))


def test_the_bare_install_runs_without_the_extras(venv: Path) -> None:
    """``pip install escaler`` (what the manager's image installs) leaves out the ``sloapi`` and
    ``sim`` extras: FastAPI, uvicorn, scipy, matplotlib are not there, every command's help still
    builds, the manager's included, and ``escaler slo-api`` and ``escaler simulate`` say in one line
    what to install (issue 29; issue 27 item 17)."""
    assert _importable(venv) == []
    assert "simulate" in _in_venv(venv, "escaler", "--help").stdout
    for command in ("manager", "slo-api", "simulate"):
        assert _in_venv(venv, "escaler", command, "--help").stdout.startswith(f"usage: escaler {command}")
    sloapi, sim = "the SLO API's dependencies: pip install 'escaler[sloapi]'", \
        "the simulator's dependencies: pip install 'escaler[sim]'"
    out = str(venv.parent / "sim")
    for argv, line in [
        (["slo-api", "--auth", "none"], f"escaler slo-api: needs fastapi, uvicorn, {sloapi}"),
        (["simulate", "--out", out], f"escaler simulate: needs scipy, matplotlib, {sim}"),
        (["simulate", "--no-plots", "--out", out], f"escaler simulate: needs scipy, {sim}"),
    ]:
        r = subprocess.run([str(venv / "escaler"), *argv], capture_output=True, text=True, timeout=120,
                           cwd=venv.parent)
        assert (r.returncode, r.stdout, r.stderr) == (3, "", line + "\n"), argv


def test_escaler_all_installs_every_extra(full_venv: Path) -> None:
    """``pip install 'escaler[all]'``: the SLO API's and the simulator's modules import, and their
    commands' help works."""
    assert set(_importable(full_venv)) >= {"fastapi", "starlette", "uvicorn", "scipy", "matplotlib", "numpy"}
    _in_venv(full_venv, "python", "-c", "import escaler.sloapi.app, escaler.sim.bound, escaler.sim.plots")
    for command in ("simulate", "slo-api"):
        help_text = _in_venv(full_venv, "escaler", command, "--help").stdout
        assert help_text.startswith(f"usage: escaler {command}")


def test_kubectl_escaler_help_names_itself(venv: Path) -> None:
    out = _in_venv(venv, "kubectl-escaler", "--help").stdout
    assert out.startswith("usage: kubectl escaler ")
    for command in ("explain", "version", "crds", "samples", "manager"):
        assert command in out


def test_the_installed_package_data_equals_manifests(venv: Path) -> None:
    script = (
        "import hashlib, json, importlib.resources as r\n"
        "d = r.files('escaler').joinpath('data')\n"
        "print(json.dumps({k: {f.name: hashlib.sha256(f.read_bytes()).hexdigest()\n"
        "                      for f in d.joinpath(k).iterdir()} for k in ('crds', 'samples')}))\n"
    )
    installed = json.loads(_in_venv(venv, "python", "-c", script).stdout)
    for kind in ("crds", "samples"):
        want = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                for p in (ROOT / "manifests" / kind).glob("*.yaml")}
        assert installed[kind] == want, kind


def test_crds_and_samples_print_from_the_wheel(venv: Path) -> None:
    assert _in_venv(venv, "escaler", "crds").stdout == render_stream()
    names = _in_venv(venv, "escaler", "samples", "--list").stdout.split()
    assert names == sorted(p.stem for p in (ROOT / "manifests" / "samples").glob("*.yaml"))
    tidal = _in_venv(venv, "escaler", "samples", "tidal").stdout
    assert tidal == (ROOT / "manifests" / "samples" / "tidal.yaml").read_text()


def _kubectl() -> str:
    explicit = os.environ.get("KUBECTL")
    if explicit:
        return explicit
    out = _run("bash", ROOT / "hack" / "build.sh", "--print", "k8s", timeout=3600).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)["kubectl"]


def test_kubectl_runs_escaler_as_a_plugin(venv: Path) -> None:
    # the venv's bin first, and no other kubectl-escaler (e.g. the dev .venv's) on PATH
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "kubectl-escaler").exists()]
    env = {**os.environ, "PATH": os.pathsep.join([str(venv), *rest])}
    kubectl = _kubectl()
    listed = _run(kubectl, "plugin", "list", env=env, cwd=venv.parent).stdout
    assert str(venv / "kubectl-escaler") in listed
    out = _run(kubectl, "escaler", "version", env=env, cwd=venv.parent).stdout
    assert out.startswith(f"escaler {escaler.__version__} (python 3.")
    helped = _run(kubectl, "escaler", "explain", "--help", env=env, cwd=venv.parent).stdout
    assert helped.startswith("usage: kubectl escaler explain ")


def test_make_dist_builds_the_sdist_and_the_same_wheel(wheel: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    _run("make", "-s", "-C", ROOT, "dist", env=env, timeout=600)
    built = sorted(p.name for p in (ROOT / "dist").iterdir())
    version = escaler.__version__
    assert built == [f"escaler-{version}-py3-none-any.whl", f"escaler-{version}.tar.gz"]
    assert _wheel_files(ROOT / "dist" / built[0]) == _wheel_files(wheel)


def test_the_wheels_crds_samples_and_explain_work_on_a_cluster(venv: Path, cluster: Cluster,
                                                                namespace: str) -> None:
    """What the README's Install section shows: ``escaler crds | kubectl apply``, ``escaler samples``,
    ``kubectl escaler explain -n NS NAME``, all from the wheel, against the real control plane."""
    crds = _in_venv(venv, "escaler", "crds").stdout
    applied = cluster.kubectl("apply", "--server-side", "-f", "-", input=crds)
    names = sorted(p.stem for p in (ROOT / "manifests" / "crds").glob("*.yaml"))
    for name in names:
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} serverside-applied" in applied
    samples = _in_venv(venv, "escaler", "samples").stdout
    created = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=samples)
    assert "elasticscaler.elasticscaler.io/llama-decode created" in created
    assert "tidal.tidal.io/llama-office-hours created" in created
    rest = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "kubectl-escaler").exists()]
    env = {**os.environ, "PATH": os.pathsep.join([str(venv), *rest]), "KUBECONFIG": str(cluster.kubeconfig)}
    explained = _run(cluster.kubectl_bin, "escaler", "explain", "-n", namespace, "llama-decode", env=env,
                     cwd=venv.parent).stdout
    assert f"ElasticScaler {namespace}/llama-decode" in explained
    missing = subprocess.run([cluster.kubectl_bin, "escaler", "explain", "-n", namespace, "nope"], env=env,
                             cwd=venv.parent, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1
    assert f"ElasticScaler {namespace}/nope: not found" in missing.stderr
