"""The Dockerfile, checked with a Dockerfile parser (no container engine runs here).

``dockerfile_problems(text)`` lists every rule the images break: multi-stage with a builder stage
first, then the runtime stages ``RUNTIMES`` in that order — the SLO API's (``--target slo-api``) and
the manager's last (the default target, what ``docker build .`` makes). Every stage that starts from
an outside image names it by digest (``@sha256:``, through a global ``ARG`` default or not). Each
runtime stage is on a ``-slim`` Python base; a numeric non-root ``USER`` set before the exec-form ``ENTRYPOINT
["escaler"]`` (default ``CMD`` its command); it installs exactly the wheel the builder stage built
(``COPY --from=builder`` of the build's ``--outdir``, then ``pip install`` of a ``.whl`` from
there, ``--no-deps``: its dependencies come only from its lock, installed with
``--require-hashes``: ``requirements.lock`` for the manager, ``requirements-sloapi.lock`` for the
SLO API), and ``pip`` is uninstalled before the image is done; nothing ``ADD``ed from a URL; every
``pip install`` with ``--no-cache-dir``; the ``org.opencontainers.image.*`` labels, with the version
equal to ``escaler.__version__``; no secret-looking ``ENV``/``ARG``. The real Dockerfile has none;
each mutated one below has the one its mutation causes, so the checks are not vacuous.
``.dockerignore`` is an allow-list that lets in exactly what the stages copy. The locks: the
manager's carries no extra (neither FastAPI and uvicorn nor the simulator's stack, issue 29), the SLO
API's adds the ``sloapi`` extra at the same versions.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

import escaler

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
LABELS = ("title", "description", "version", "licenses")


def _parse(text: str) -> list[dict[str, Any]]:
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    return [i for i in parser.structure if i["instruction"] != "COMMENT"]


def _stages(instructions: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    stages: list[list[dict[str, Any]]] = []
    for ins in instructions:
        if ins["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def _stage_name(stage: list[dict[str, Any]]) -> str | None:
    words = stage[0]["value"].split()
    return words[2] if len(words) == 3 and words[1].lower() == "as" else None


def _of(stage: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [i for i in stage if i["instruction"] == kind]


# runtime stage name -> (the lock it installs, its default CMD); the last is the default target
RUNTIMES = {"slo-api": ("requirements-sloapi.lock", "slo-api"), "manager": ("requirements.lock", "manager")}


def _global_args(instructions: list[dict[str, Any]]) -> dict[str, str]:
    """The ``ARG NAME=default`` lines before the first ``FROM`` (what a ``FROM`` may refer to)."""
    args: dict[str, str] = {}
    for ins in instructions:
        if ins["instruction"] == "FROM":
            break
        if ins["instruction"] == "ARG":
            name, _, default = ins["value"].strip().partition("=")
            args[name] = default
    return args


def _base(stage: list[dict[str, Any]], args: dict[str, str]) -> str:
    """The image a stage starts from, ``${ARG}``/``$ARG`` replaced by the global defaults."""
    image: str = stage[0]["value"].split()[0]
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)


def _unpinned(stages: list[list[dict[str, Any]]], args: dict[str, str]) -> list[str]:
    """Every stage that starts from an outside image names it by digest: a tag moves (issue 27
    item 17); a stage built on an earlier stage is pinned by that one."""
    names = {_stage_name(stage) for stage in stages}
    return [f"FROM {base!r} is not pinned by digest (@sha256:...)" for base in
            (_base(stage, args) for stage in stages)
            if base not in names and not re.search(r"@sha256:[0-9a-f]{64}$", base)]


def _runtime_problems(runtime: list[dict[str, Any]], builder_name: str | None,
                      outdir: str | None, lock: str, command: str, args: dict[str, str]) -> list[str]:
    problems = []
    base = _base(runtime, args)
    if not re.fullmatch(r"python:3\.\d+-slim(@sha256:[0-9a-f]{64})?", base):
        problems.append(f"final FROM {base!r} is not a python:3.x-slim image")
    users = _of(runtime, "USER")
    entry = _of(runtime, "ENTRYPOINT")
    if not users:
        problems.append("no USER in the stage")
    else:
        uid, _, gid = users[-1]["value"].strip().partition(":")
        if not uid.isdigit() or int(uid) == 0 or (gid and (not gid.isdigit() or int(gid) == 0)):
            problems.append(f"USER {users[-1]['value']!r} is not a numeric non-root uid[:gid]")
        if entry and users[-1]["startline"] > entry[-1]["startline"]:
            problems.append("USER is set after ENTRYPOINT")
    if not entry or _exec_form(entry[-1]["value"]) != ["escaler"]:
        problems.append('ENTRYPOINT is not exec-form ["escaler"]')
    cmd = _of(runtime, "CMD")
    if not cmd or _exec_form(cmd[-1]["value"]) != [command]:
        problems.append(f'CMD is not exec-form ["{command}"]')
    problems += _installs_builder_wheel(runtime, builder_name, outdir)
    problems += _locked_install(runtime, lock)
    return problems


def _locked_install(runtime: list[dict[str, Any]], lock: str) -> list[str]:
    """The runtime's dependencies from its lock with hashes, the wheel without resolving
    anything, and no pip left behind (issue 27 item 17)."""
    runs = " && ".join(r["value"] for r in _of(runtime, "RUN"))
    problems = []
    copied = [shlex.split(c["value"])[-1] for c in _of(runtime, "COPY")
              if shlex.split(c["value"])[0] == lock]
    hashed = r"pip install [^&]*--require-hashes [^&]*-r "
    if not copied or not re.search(hashed + re.escape(copied[0]), runs):
        problems.append(f"dependencies not installed from {lock} with --require-hashes")
    if not re.search(r"pip install [^&]*--no-deps [^&]*\.whl", runs):
        problems.append("the wheel is installed resolving its dependencies (not --no-deps)")
    if not re.search(r"pip uninstall [^&]*\bpip\b", runs):
        problems.append("pip stays in the image")
    return problems


def _exec_form(value: str) -> list[str] | None:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, list) else None


def _installs_builder_wheel(runtime: list[dict[str, Any]], builder_name: str | None,
                            outdir: str | None) -> list[str]:
    dests = []
    for copy in _of(runtime, "COPY"):
        words = shlex.split(copy["value"])
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        if builder_name and f"--from={builder_name}" in flags and outdir and \
                paths[0].rstrip("/") == outdir.rstrip("/"):
            dests.append(paths[-1].rstrip("/"))
    if not dests:
        return [f"the final stage does not COPY --from={builder_name} the builder's --outdir {outdir!r}"]
    pip = [r["value"] for r in _of(runtime, "RUN") if "pip install" in r["value"]]
    wheel = re.compile(r"(^|\s)(" + "|".join(map(re.escape, dests)) + r")/\S*\.whl(\s|$)")
    if not any(wheel.search(cmd) for cmd in pip):
        return [f"no RUN pip install of a .whl from {dests} (the builder's wheel)"]
    return []


def dockerfile_problems(text: str) -> list[str]:
    instructions = _parse(text)
    stages = _stages(instructions)
    if len(stages) < 2:
        return ["not multi-stage: a builder stage builds the wheel, the final stage installs it"]
    builder, runtimes = stages[0], stages[1:]
    args = _global_args(instructions)
    builder_name = _stage_name(builder)
    build = [r["value"] for r in _of(builder, "RUN") if "-m build" in r["value"]]
    outdir = None
    if build:
        m = re.search(r"--outdir[= ](\S+)", build[-1])
        outdir = m.group(1) if m else None
    problems = [] if build and outdir else ["the builder stage does not run `python -m build --outdir DIR`"]
    names = [_stage_name(stage) for stage in runtimes]
    if names != list(RUNTIMES):
        problems.append(f"runtime stages {names} are not {list(RUNTIMES)} "
                        "(the manager last: the default target)")
    lines = text.splitlines()
    for name, stage in zip(names, runtimes, strict=True):
        if name in RUNTIMES:
            # the labels of this stage: the Dockerfile up to its end, where it is the final stage
            found = _runtime_problems(stage, builder_name, outdir, *RUNTIMES[name], args) + _label_problems(
                "\n".join(lines[:stage[-1]["endline"] + 1]))
            problems += [f"{name}: {p}" for p in found]
    problems += _unpinned(stages, args)
    for ins in instructions:
        if ins["instruction"] == "ADD" and re.search(r"(https?|ftp)://|git@", ins["value"]):
            problems.append(f"ADD from a URL: {ins['value']!r}")
        installs = ([c for c in ins["value"].split("&&") if "pip install" in c]
                    if ins["instruction"] == "RUN" else [])
        for install in installs:  # each command of the RUN
            if "--no-cache-dir" not in install:
                problems.append(f"pip install without --no-cache-dir: {install.strip()!r}")
        if ins["instruction"] in ("ENV", "ARG") and re.search(r"(PASSWORD|SECRET|TOKEN|API_?KEY)\w*=",
                                                              ins["value"], re.I):
            problems.append(f"secret-looking {ins['instruction']}: {ins['value']!r}")
    return problems


def _label_problems(text: str) -> list[str]:
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    labels = parser.labels  # of the final stage of ``text``, ARG defaults substituted
    missing = [k for k in LABELS if not labels.get(f"org.opencontainers.image.{k}")]
    problems = [f"missing label org.opencontainers.image.{k}" for k in missing]
    version = labels.get("org.opencontainers.image.version")
    if version and version != escaler.__version__:
        problems.append(f"label version {version!r} != escaler.__version__ {escaler.__version__!r}")
    return problems


def test_the_dockerfile_has_no_problems() -> None:
    assert dockerfile_problems(DOCKERFILE) == []


MUTATIONS = {
    "single stage": (r"(?s)(ARG PYTHON_IMAGE=\S+\n).*?(?=FROM \$\{PYTHON_IMAGE\} AS manager\n)", r"\1",
                     "not multi-stage"),
    "full base": (r"FROM \$\{PYTHON_IMAGE\} AS manager\n",
                  "FROM python:3.11@sha256:" + "0" * 64 + " AS manager\n",
                  "manager: final FROM 'python:3.11@sha256:000"),
    "base by tag": (r"(ARG PYTHON_IMAGE=python:3\.11-slim)@sha256:[0-9a-f]{64}", r"\1",
                    "FROM 'python:3.11-slim' is not pinned by digest"),
    "one stage by tag": (r"FROM \$\{PYTHON_IMAGE\} AS slo-api", "FROM python:3.11-slim AS slo-api",
                         "FROM 'python:3.11-slim' is not pinned by digest"),
    "root user": (r"USER 65532:65532", "USER root", "slo-api: USER 'root' is not a numeric non-root"),
    "uid 0": (r"USER 65532:65532", "USER 0", "is not a numeric non-root"),
    "no user": (r"USER 65532:65532\n", "", "slo-api: no USER in the stage"),
    "user after entrypoint": (r"(?s)USER 65532:65532\n(.*?)\nCMD", r"\1\nUSER 65532\nCMD",
                              "slo-api: USER is set after ENTRYPOINT"),
    "shell-form entrypoint": (r'ENTRYPOINT \["escaler"\]', "ENTRYPOINT escaler",
                              "ENTRYPOINT is not exec-form"),
    "other cmd": (r'CMD \["manager"\]', 'CMD ["slo-api"]', 'manager: CMD is not exec-form ["manager"]'),
    "slo-api runs the manager": (r'CMD \["slo-api"\]', 'CMD ["manager"]',
                                 'slo-api: CMD is not exec-form ["slo-api"]'),
    "wheel from the index": (r"pip install --no-cache-dir --no-deps /wheels/escaler-\*\.whl",
                             "pip install --no-cache-dir --no-deps escaler", "no RUN pip install of a .whl"),
    "not from the builder": (r"--from=builder", "--from=python:3.11-slim", "does not COPY --from=builder"),
    "pip cache": (r"pip install --no-cache-dir --no-deps /wheels", "pip install --no-deps /wheels",
                  "without --no-cache-dir"),
    "unhashed dependencies": (r"--require-hashes ", "", "not installed from requirements-sloapi.lock"),
    "no lock": (r"COPY requirements.lock /tmp/requirements.lock\n", "",
                "manager: dependencies not installed from requirements.lock"),
    "slo-api without its extra": (r"COPY requirements-sloapi\.lock", "COPY requirements.lock",
                                  "slo-api: dependencies not installed from requirements-sloapi.lock"),
    "manager with the SLO API's lock": (r"COPY requirements\.lock", "COPY requirements-sloapi.lock",
                                        "manager: dependencies not installed from requirements.lock"),
    "no slo-api target": (r"AS slo-api", "AS api", "runtime stages ['api', 'manager'] are not"),
    "slo-api is the default target": (r"(?s)(# the SLO API.*?)(# the manager.*)\Z", r"\2\n\1",
                                      "runtime stages ['manager', 'slo-api'] are not"),
    "wheel resolves": (r"--no-deps /wheels", "/wheels", "not --no-deps"),
    "pip kept": (r" \\\n    && python -m pip uninstall --yes pip setuptools wheel", "",
                 "slo-api: pip stays in the image"),
    "add url": (r"USER 65532", "ADD https://example.com/x.tgz /x\nUSER 65532", "ADD from a URL"),
    "secret env": (r"USER 65532", "ENV HF_TOKEN=abc\nUSER 65532", "secret-looking ENV"),
    "no labels": (r"(?s)LABEL .*?(?=\nENV)", "", "slo-api: missing label org.opencontainers.image.title"),
    "stale version": (r"ARG VERSION=\S+", "ARG VERSION=0.0.9", "slo-api: label version '0.0.9'"),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_rule_catches_its_mutation(name: str) -> None:
    pattern, replacement, problem = MUTATIONS[name]
    mutated, count = re.subn(pattern, replacement, DOCKERFILE, count=1)
    assert count == 1, f"mutation {name!r} did not apply"
    problems = dockerfile_problems(mutated)
    assert any(problem in p for p in problems), problems


def test_dockerignore_lets_in_exactly_what_the_builder_copies() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [ln for ln in lines if ln and not ln.startswith("#")]
    assert patterns[0] == "*", "an allow-list: everything is excluded first"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    stages = _stages(_parse(DOCKERFILE))
    copied = {p.rstrip("/") for stage in stages for c in _of(stage, "COPY")
              if not c["value"].startswith("--from") for p in shlex.split(c["value"])[:-1]}
    assert copied == allowed
    readme = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert {"pyproject.toml", readme, "escaler"} <= copied, "the build needs pyproject, readme, package"


def _locked(lock: str = "requirements.lock") -> dict[str, tuple[str, int]]:
    """A lock: name → (version, number of hashes)."""
    pins: dict[str, tuple[str, int]] = {}
    name = ""
    for line in (ROOT / lock).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            name = m.group(1).lower().replace("_", "-")
            pins[name] = (m.group(2), 0)
        elif "--hash=sha256:" in line and name:
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
    return pins


def _pins_satisfy(pins: dict[str, tuple[str, int]], deps: list[str], lock: str) -> None:
    from packaging.requirements import Requirement

    for dep in deps:
        req = Requirement(dep)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in {lock}: run hack/lock.sh"
        version, hashes = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"{name}=={version} does not satisfy {dep}"
        assert hashes >= 1, f"{name} has no hash"
    assert all(h >= 1 for _, h in pins.values())


def _extra(project: dict[str, Any], name: str) -> set[str]:
    from packaging.requirements import Requirement

    return {Requirement(d).name.lower() for d in project["optional-dependencies"][name]}


def test_the_lock_pins_every_runtime_dependency_with_hashes_and_nothing_of_the_extras() -> None:
    """requirements.lock (hack/lock.sh, the manager's image) satisfies every [project] dependency of
    pyproject.toml, each pin carries hashes (pip --require-hashes refuses anything else), and neither
    the simulator's extra (issue 27 item 17), the SLO API's (FastAPI, uvicorn and what only they
    pull: issue 29) nor pip itself is in it."""
    pins = _locked()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    _pins_satisfy(pins, project["dependencies"], "requirements.lock")
    left_out = _extra(project, "sim") | _extra(project, "sloapi") | {
        "numpy", "tqdm", "starlette", "pip", "setuptools"}
    assert not left_out & set(pins), sorted(left_out & set(pins))


def test_the_slo_api_lock_adds_its_extra_at_the_manager_locks_versions() -> None:
    """requirements-sloapi.lock (the SLO API's image) satisfies the [project] dependencies and the
    ``sloapi`` extra, carries nothing of the simulator's nor pip, and pins every package both
    images carry at the same version (hack/lock.sh seeds it from requirements.lock)."""
    pins, manager = _locked("requirements-sloapi.lock"), _locked()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    _pins_satisfy(pins, [*project["dependencies"], *project["optional-dependencies"]["sloapi"]],
                  "requirements-sloapi.lock")
    left_out = _extra(project, "sim") | {"numpy", "tqdm", "pip", "setuptools"}
    assert not left_out & set(pins), sorted(left_out & set(pins))
    assert set(manager) < set(pins)
    assert {n: pins[n][0] for n in manager} == {n: v for n, (v, _) in manager.items()}
