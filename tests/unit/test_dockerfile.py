"""The Dockerfile, checked with a Dockerfile parser (no container engine runs here).

``dockerfile_problems(text)`` lists every rule the image breaks: multi-stage with a builder stage;
the final stage on a ``-slim`` Python base; a numeric non-root ``USER`` set before the exec-form
``ENTRYPOINT ["escaler"]`` (default ``CMD ["manager"]``); the runtime installs exactly the wheel the
builder stage built (``COPY --from=builder`` of the build's ``--outdir``, then ``pip install`` of a
``.whl`` from there, ``--no-deps``: its dependencies come only from ``requirements.lock``, installed
with ``--require-hashes``), and ``pip`` is uninstalled before the image is done; nothing ``ADD``ed
from a URL; every ``pip install`` with ``--no-cache-dir``;
the ``org.opencontainers.image.*`` labels, with the version equal to ``escaler.__version__``; no
secret-looking ``ENV``/``ARG``. The real Dockerfile has none; each mutated one below has the one
its mutation causes, so the checks are not vacuous. ``.dockerignore`` is an allow-list that lets
in exactly what the builder stage copies.
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


def _runtime_problems(runtime: list[dict[str, Any]], builder_name: str | None,
                      outdir: str | None) -> list[str]:
    problems = []
    base = runtime[0]["value"].split()[0]
    if not re.fullmatch(r"python:3\.\d+-slim(@sha256:[0-9a-f]{64})?", base):
        problems.append(f"final FROM {base!r} is not a python:3.x-slim image")
    users = _of(runtime, "USER")
    entry = _of(runtime, "ENTRYPOINT")
    if not users:
        problems.append("no USER in the final stage")
    else:
        uid, _, gid = users[-1]["value"].strip().partition(":")
        if not uid.isdigit() or int(uid) == 0 or (gid and (not gid.isdigit() or int(gid) == 0)):
            problems.append(f"USER {users[-1]['value']!r} is not a numeric non-root uid[:gid]")
        if entry and users[-1]["startline"] > entry[-1]["startline"]:
            problems.append("USER is set after ENTRYPOINT")
    if not entry or _exec_form(entry[-1]["value"]) != ["escaler"]:
        problems.append('ENTRYPOINT is not exec-form ["escaler"]')
    cmd = _of(runtime, "CMD")
    if not cmd or _exec_form(cmd[-1]["value"]) != ["manager"]:
        problems.append('CMD is not exec-form ["manager"]')
    problems += _installs_builder_wheel(runtime, builder_name, outdir)
    problems += _locked_install(runtime)
    return problems


def _locked_install(runtime: list[dict[str, Any]]) -> list[str]:
    """The runtime's dependencies from requirements.lock with hashes, the wheel without resolving
    anything, and no pip left behind (issue 27 item 17)."""
    runs = " && ".join(r["value"] for r in _of(runtime, "RUN"))
    problems = []
    lock = [shlex.split(c["value"])[-1] for c in _of(runtime, "COPY")
            if shlex.split(c["value"])[0] == "requirements.lock"]
    if not lock or not re.search(r"pip install [^&]*--require-hashes [^&]*-r " + re.escape(lock[0]), runs):
        problems.append("dependencies not installed from requirements.lock with --require-hashes")
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
    builder, runtime = stages[0], stages[-1]
    builder_name = _stage_name(builder)
    build = [r["value"] for r in _of(builder, "RUN") if "-m build" in r["value"]]
    outdir = None
    if build:
        m = re.search(r"--outdir[= ](\S+)", build[-1])
        outdir = m.group(1) if m else None
    problems = [] if build and outdir else ["the builder stage does not run `python -m build --outdir DIR`"]
    problems += _runtime_problems(runtime, builder_name, outdir)
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
    problems += _label_problems(text)
    return problems


def _label_problems(text: str) -> list[str]:
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    labels = parser.labels  # of the final stage, ARG defaults substituted
    missing = [k for k in LABELS if not labels.get(f"org.opencontainers.image.{k}")]
    problems = [f"missing label org.opencontainers.image.{k}" for k in missing]
    version = labels.get("org.opencontainers.image.version")
    if version and version != escaler.__version__:
        problems.append(f"label version {version!r} != escaler.__version__ {escaler.__version__!r}")
    return problems


def test_the_dockerfile_has_no_problems() -> None:
    assert dockerfile_problems(DOCKERFILE) == []


MUTATIONS = {
    "single stage": (r"(?s)\A.*?(?=FROM python:3\.11-slim\n)", "", "not multi-stage"),
    "full base": (r"FROM python:3\.11-slim\n", "FROM python:3.11\n", "is not a python:3.x-slim image"),
    "root user": (r"USER 65532:65532", "USER root", "is not a numeric non-root"),
    "uid 0": (r"USER 65532:65532", "USER 0", "is not a numeric non-root"),
    "no user": (r"USER 65532:65532\n", "", "no USER in the final stage"),
    "user after entrypoint": (r"(?s)USER 65532:65532\n(.*)\nCMD", r"\1\nUSER 65532\nCMD",
                              "USER is set after ENTRYPOINT"),
    "shell-form entrypoint": (r'ENTRYPOINT \["escaler"\]', "ENTRYPOINT escaler",
                              "ENTRYPOINT is not exec-form"),
    "other cmd": (r'CMD \["manager"\]', 'CMD ["slo-api"]', "CMD is not exec-form"),
    "wheel from the index": (r"pip install --no-cache-dir --no-deps /wheels/escaler-\*\.whl",
                             "pip install --no-cache-dir --no-deps escaler", "no RUN pip install of a .whl"),
    "not from the builder": (r"--from=builder", "--from=python:3.11-slim", "does not COPY --from=builder"),
    "pip cache": (r"pip install --no-cache-dir --no-deps /wheels", "pip install --no-deps /wheels",
                  "without --no-cache-dir"),
    "unhashed dependencies": (r"--require-hashes ", "", "not installed from requirements.lock"),
    "no lock": (r"COPY requirements.lock /tmp/requirements.lock\n", "",
                "not installed from requirements.lock"),
    "wheel resolves": (r"--no-deps /wheels", "/wheels", "not --no-deps"),
    "pip kept": (r" \\\n    && python -m pip uninstall --yes pip setuptools wheel", "",
                 "pip stays in the image"),
    "add url": (r"USER 65532", "ADD https://example.com/x.tgz /x\nUSER 65532", "ADD from a URL"),
    "secret env": (r"USER 65532", "ENV HF_TOKEN=abc\nUSER 65532", "secret-looking ENV"),
    "no labels": (r"(?s)LABEL .*?(?=\nENV)", "", "missing label org.opencontainers.image.title"),
    "stale version": (r"ARG VERSION=\S+", "ARG VERSION=0.0.9", "label version '0.0.9'"),
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


def _locked() -> dict[str, tuple[str, int]]:
    """requirements.lock: name → (version, number of hashes)."""
    pins: dict[str, tuple[str, int]] = {}
    name = ""
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            name = m.group(1).lower().replace("_", "-")
            pins[name] = (m.group(2), 0)
        elif "--hash=sha256:" in line and name:
            version, hashes = pins[name]
            pins[name] = (version, hashes + 1)
    return pins


def test_the_lock_pins_every_runtime_dependency_with_hashes_and_nothing_of_the_extras() -> None:
    """requirements.lock (hack/lock.sh) satisfies every [project] dependency of pyproject.toml, each
    pin carries hashes (pip --require-hashes refuses anything else), and neither the simulator's
    extra nor pip itself is in it (issue 27 item 17)."""
    from packaging.requirements import Requirement

    pins = _locked()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        req = Requirement(dep)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in requirements.lock: run hack/lock.sh"
        version, hashes = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"{name}=={version} does not satisfy {dep}"
        assert hashes >= 1, f"{name} has no hash"
    assert all(h >= 1 for _, h in pins.values())
    extras = {Requirement(d).name.lower() for d in project["optional-dependencies"]["sim"]}
    assert not (extras | {"numpy", "tqdm", "pip", "setuptools"}) & set(pins), sorted(pins)
