"""Every shell command the README shows is exercised by a test or by CI (issues 14 and 29).

**Shell lines** (every line of a ```sh/```bash/```console/```shell block) are covered verbatim:
the blocks of the ``## Quick start`` section are run, line by line as written, by
``tests/e2e/test_readme_quickstart.py`` against the local control plane (``tests/readme_quickstart.py``
is the one reader of them both tests use); every other shell line must be a key of ``VERBATIM``,
the exact line mapped to the files that run it. A new shell line outside the quick start that is
not in ``VERBATIM`` fails ``test_every_readme_shell_line_is_run_or_mapped_verbatim``, naming it.

**Commands in prose and outside the quick start** are taken from README.md as written: lines
starting with ``$ ``, the shell lines outside the quick start (comments dropped, ``\\``
continuations joined), and inline code spans that are commands (``make ...``, ``python -m escaler
...``, ``escaler <sub>``, ``kubectl ...``, ``hack/<script>``, ``python bench/...``,
``helm``/``pip``/``docker``/``kind``, ``.ci/run``).

``EXERCISED`` maps a command pattern to the files that exercise it, each with a string that file
must contain (the call or the CI step), so a mapping cannot point at a file that no longer runs the
command. ``NOT_RUN`` lists, with the reason, the commands no test runs by design (benchmarks are
never part of the test suite, docs/testing.md#the-budget-rule); for those the test checks what can be checked
without running them. Cheap commands (``--help`` of every sub-command the README names,
``escaler version``) are run here. A README command matching no entry fails the test, naming it.
"""

from __future__ import annotations

import importlib.util
import io
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from escaler.cli.main import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICKSTART_E2E = "tests/e2e/test_readme_quickstart.py"


def _load_reader() -> ModuleType:
    """tests/readme_quickstart.py, by path (tests/unit is not a package)."""
    spec = importlib.util.spec_from_file_location("readme_quickstart",
                                                  ROOT / "tests" / "readme_quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reader = _load_reader()
SHELL_BLOCKS = {"sh", "bash", "console", "shell"}
# inline code spans that are commands (an optional VAR=value prefix, then the program)
INLINE = re.compile(
    r"^(?:[A-Z][A-Z0-9_]*=\S+ )*(?:make \w|python -m escaler\b|python -m examples\.|escaler [a-z]|"
    r"kubectl [a-z]|hack/[\w.-]+\.(?:sh|py)\b|python (?:bench|hack)/|helm [a-z]|pip [a-z]|docker [a-z]|"
    r"kind [a-z]|\.ci/run\b)")


@dataclass(frozen=True)
class Exercised:
    """A README command pattern and where it runs."""

    # regular expression matched (re.match) against the normalised command
    pattern: str
    # file (relative to the repository) → a string it contains: the call or CI step that runs it
    by: dict[str, str]
    note: str = ""


@dataclass(frozen=True)
class NotRun:
    """A README command no test or CI step runs, and why; ``checks`` are what is verified instead."""

    pattern: str
    why: str
    checks: dict[str, str] = field(default_factory=dict)


CI = {".ci/run": "make test"}
E2E_MANAGER = {"tests/e2e/es_helpers.py": '"-m", "escaler", "manager"'}

EXERCISED = (
    # the Makefile targets: .ci/run runs `make test`, whose recipe is lint, unit, build, e2e
    Exercised(r"make test$", CI),
    Exercised(r"make lint$", {**CI, "Makefile": "$(MAKE) lint"}),
    Exercised(r"make unit$", {**CI, "Makefile": "$(PY) -m pytest tests/unit -q"},
              "make test runs the same recipe line"),
    Exercised(r"make e2e$", {**CI, "Makefile": "$(PY) -m pytest tests/e2e -q"},
              "make test runs the same recipe line"),
    Exercised(r"make chromium$", {**CI, "Makefile": "test: $(STAMP) chromium"},
              "make test and make e2e depend on it"),
    Exercised(r"make build-cluster$", {**CI, "Makefile": "hack/build.sh"}, "make test runs hack/build.sh"),
    Exercised(r"make crds$", {"tests/unit/test_api_crdgen.py": '"crds", "--out"'}),
    Exercised(r"make demo$", {"tests/e2e/test_demo.py": '"hack" / "demo.py"'},
              "the e2e suite runs hack/demo.py, the recipe of make demo, to the end and with Ctrl-C"),
    Exercised(r"make dist$", {"tests/e2e/test_distribution.py": '"dist"'}),
    Exercised(r"make (e2e|demo) E2E_CLUSTER=kind$", {"tests/unit/test_kind_path.py": "E2E_CLUSTER"},
              "without Docker (this machine, CI): the fail-fast path; the kind path itself needs Docker"),
    Exercised(r"\.ci/run$", {".ci/run": "make test"}, "the CI entry point itself"),
    # the CLI
    Exercised(r"(python -m )?escaler --help$", {"tests/unit/test_readme_commands.py": '"--help"'},
              "run here"),
    Exercised(r"(python -m )?escaler version$", {"tests/unit/test_readme_commands.py": '"version"'},
              "run here"),
    Exercised(r"(python -m )?escaler manager --webhook-cert-dir",
              {"tests/e2e/webhook.py": "--webhook-cert-dir"}),
    Exercised(r"(python -m )?escaler manager\b",
              {**E2E_MANAGER, "tests/unit/test_cli_manager.py": '"manager"'}),
    Exercised(r"(python -m )?escaler explain\b",
              {"tests/e2e/test_elasticscaler.py": '"-m", "escaler", "explain"',
               "tests/unit/test_cli_explain.py": '"explain"'}),
    Exercised(r"(python -m )?escaler slo-api\b", {"tests/e2e/sloapi_helpers.py": '"slo-api"'}),
    Exercised(r"(python -m )?escaler simulate\b", {"tests/unit/test_sim_cli.py": '"simulate"'}),
    Exercised(r"python -m escaler\.cli\.metricsdoc --write docs/metrics\.md$",
              {"tests/unit/test_metrics_doc.py": 'metricsdoc.main(["--write"'}),
    Exercised(r"(python -m )?escaler docs\b", {"tests/unit/test_reference_docs.py": '"docs", "--out"'}),
    Exercised(r"escaler crds \| kubectl apply --server-side -f -$",
              {"tests/e2e/test_distribution.py": '"apply", "--server-side", "-f", "-", input=crds'}),
    Exercised(r"escaler samples \| kubectl apply -n \S+ -f -$",
              {"tests/e2e/test_distribution.py": '"apply", "-n", namespace, "-f", "-", input=samples'}),
    Exercised(r"(python -m )?escaler crds\b", {"tests/unit/test_api_crdgen.py": '"crds"'}),
    Exercised(r"(python -m )?escaler samples\b", {"tests/unit/test_distribution.py": '"samples"'}),
    Exercised(r"kubectl escaler \w+", {"tests/e2e/test_distribution.py": '"escaler", "explain", "-n"'},
              "the real kubectl finding kubectl-escaler on PATH"),
    Exercised(r"pip install dist/escaler-[\w.]+-py3-none-any\.whl$",
              {"tests/e2e/test_distribution.py": '"-m", "pip", "install"'}, "into a clean virtualenv"),
    Exercised(r"pip install 'escaler\[(sloapi|sim|all)\]'$",
              {"tests/e2e/test_distribution.py": 'f"{wheel}[all]"'},
              "the wheel with [all] into a second clean virtualenv; each extra's one line: test_cli_extras"),
    Exercised(r"python -m examples\.keycount\b", {"tests/e2e/test_manager.py": '"examples.keycount"'}),
    # hack/
    Exercised(r"hack/cluster\.py up\b", {"tests/e2e/conftest.py": "LocalCluster",
                                         "tests/unit/test_readme_commands.py": '"up", "--help"'},
              "the e2e session starts the same LocalCluster `up` starts; its parser is run here"),
    Exercised(r"hack/fake_metrics\.py$", {"tests/e2e/conftest.py": "fake_metrics"}),
    Exercised(r"hack/kind\.py$", {"tests/unit/test_kind_path.py": '"kind.py"'}),
    Exercised(r"hack/webhook-certs\.sh\b", {"tests/e2e/webhook.py": '"webhook-certs.sh"'}),
    Exercised(r"hack/webhook-patch-cabundle\.sh\b",
              {"tests/unit/test_readme_commands.py": "webhook-patch-cabundle.sh"},
              "run here against a stub kubectl (KUBECTL=...)"),
    # kubectl, as the e2e suite runs it against the local control plane
    Exercised(r"kubectl apply --server-side -k manifests/crds/?$",
              {"tests/e2e/conftest.py": '"apply", "--server-side", "-k"'},
              "verbatim: `-f` on the folder fails, it holds a kustomization"),
    Exercised(r"kubectl apply --server-side -k manifests/(base|overlays/\w+)$",
              {"tests/e2e/test_install.py": '"apply", "--server-side", "--force-conflicts", "-k"'},
              "the base, and a server-side dry run of each overlay"),
    Exercised(r"helm install escaler charts/escaler -n escaler-system --create-namespace$",
              {"tests/e2e/test_install.py": '"install"'}, "with another release name and --wait"),
    Exercised(r"kubectl apply -f manifests/samples/", {"tests/e2e/test_api.py": "load_samples()"}),
    Exercised(r"kubectl get (es|tidal|rsg|llms|llmslo|jobslo)(,(es|tidal|rsg|llms|llmslo|jobslo))*$",
              {"tests/e2e/test_api.py": '"es,tidal,rsg,llms,llmslo,jobslo"'}, "the printer columns test"),
    Exercised(r"kubectl explain elasticscaler\.", {"tests/e2e/test_api.py": '"explain", "elasticscaler.'}),
    Exercised(r"kubectl create token \S+ --audience escaler(-slo-api)?$",
              {"tests/e2e/sloapi_helpers.py": '"create", "token"'}),
)

NOT_RUN = (
    NotRun(r"hack/lock\.sh$", "regenerates requirements.lock from the package index (pip-tools) when the "
           "dependencies change; checked: the lock satisfies pyproject's dependencies, with hashes",
           {"tests/unit/test_dockerfile.py": "requirements.lock"}),
    NotRun(r"docker build -t escaler \.$", "no container engine runs in this project's tests; checked: a "
           "Dockerfile parser test, and the e2e suite builds the wheel from the Dockerfile's COPY sources",
           {"tests/unit/test_dockerfile.py": "DockerfileParser", "tests/e2e/test_distribution.py": "COPY"}),
    NotRun(r"docker build --target slo-api -t escaler-slo-api \.$",
           "no container engine runs in this project's tests; checked: the Dockerfile parser test's "
           "slo-api stage, and hack/kind.py builds that target",
           {"tests/unit/test_dockerfile.py": "slo-api", "hack/kind.py": '"--target", "slo-api"'}),
    NotRun(r"kind load$",
           "run by hack/kind.py only where Docker exists; checked: hack/kind.py loads the image",
           {"hack/kind.py": "load_docker_image"}),
    NotRun(r"make chaos$", "the fault tests in full form (~25 minutes) are a measurement run, not CI; "
           "checked: the target runs bench/chaos.py, and the e2e suite runs the same chaos tests reduced",
           {"Makefile": "bench/chaos.py", "tests/e2e/test_chaos_failover.py": "chaos_runs"}),
    NotRun(r"make bench$", "benchmarks print measurements and are never part of the test suite "
           "(docs/testing.md#the-budget-rule); checked: the target runs bench/run.py",
           {"Makefile": "bench/run.py"}),
    NotRun(r"(BENCH_CAPACITY_N=\S+ )?python bench/run\.py (bench_\w+ ?)+$",
           "a benchmark run against a control plane, minutes long; checked: each named benchmark "
           "exists and exposes run(), and BENCH_CAPACITY_N is read by bench_capacity",
           {"bench/bench_capacity.py": "BENCH_CAPACITY_N", "bench/run.py": "mod.run()"}),
)


# every README shell line outside the quick start, exactly as written (its trailing comment
# dropped) -> file: a string that file contains (the call that runs that very line)
DIST = "tests/e2e/test_distribution.py"
VERBATIM: dict[str, dict[str, str]] = {
    "make demo": {"tests/e2e/test_demo.py": '"hack" / "demo.py"', "Makefile": "$(PY) hack/demo.py"},
    "make test": {".ci/run": "make test"},
    "make dist": {DIST: '"make", "-s", "-C", ROOT, "dist"'},
    "pip install dist/escaler-0.1.0-py3-none-any.whl": {DIST: '"-m", "pip", "install"'},
    "escaler version": {DIST: '"escaler", "version"'},
    "escaler crds | kubectl apply --server-side -f -": {
        DIST: '"apply", "--server-side", "-f", "-", input=crds'},
    "escaler samples | kubectl apply -n NS -f -": {
        DIST: '"apply", "-n", namespace, "-f", "-", input=samples'},
    "kubectl escaler explain -n NS llama-decode": {
        DIST: '"escaler", "explain", "-n", namespace, "llama-decode"'},
}


# ------------------------------------------------------------------ extraction


def _normalise(command: str) -> str:
    command = re.sub(r"\s+#.*$", "", command)  # a trailing comment
    return " ".join(command.split())


def _quick_start(text: str) -> str:
    return reader.section(text, reader.QUICK_START) if f"\n## {reader.QUICK_START}\n" in text else ""


def _block_lines(blocks: list[str]) -> list[str]:
    lines = []
    for block in blocks:
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            command = _normalise(line.strip())
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


def shell_lines(text: str) -> list[tuple[str, bool]]:
    """Every README shell line, normalised (comments dropped, continuations joined), with whether
    it is in the quick start (run verbatim by the e2e test)."""
    quick = _quick_start(text)
    outside = text.replace(quick, "\n") if quick else text
    return ([(c, False) for c in _block_lines(reader.shell_blocks(outside))]
            + [(c, True) for c in _block_lines(reader.shell_blocks(quick))])


def readme_commands(text: str) -> list[str]:
    """Every command the README shows outside the quick start, normalised, in order, without repeats."""
    found: list[str] = []
    quick = _quick_start(text)
    if quick:
        text = text.replace(quick, "\n")
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        body = re.sub(r"\\\n\s*", " ", body)  # join continuation lines
        for line in body.splitlines():
            stripped = line.strip()
            if stripped.startswith("$ "):
                found.append(stripped[2:])
            elif lang in SHELL_BLOCKS and stripped and not stripped.startswith("#"):
                found.append(stripped)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += [span for span in re.findall(r"`([^`]+)`", prose) if INLINE.match(" ".join(span.split()))]
    out: list[str] = []
    for command in map(_normalise, found):
        if command and command not in out:
            out.append(command)
    return out


def _entry(command: str) -> Exercised | NotRun | None:
    for entry in (*EXERCISED, *NOT_RUN):
        if re.match(entry.pattern, command):
            return entry
    return None


COMMANDS_IN_README = readme_commands(README.read_text(encoding="utf-8"))
SHELL_LINES = shell_lines(README.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ the mapping


def test_the_extraction_finds_the_readme_commands() -> None:
    assert "make test" in COMMANDS_IN_README and "make demo" in COMMANDS_IN_README
    assert any(c.startswith("escaler explain") for c in COMMANDS_IN_README)
    assert any(c.startswith("kubectl apply") for c in COMMANDS_IN_README)
    assert readme_commands("```sh\n$ make x \\\n  --y  # why\n```\nrun `make z` or `escaler`") == \
        ["make x --y", "make z"]
    text = "## A\n```sh\nmake a  # why\n```\n## Quick start\n```sh\nkubectl get es\n```\n## B\n"
    assert shell_lines(text) == [("make a", False), ("kubectl get es", True)]
    assert readme_commands(text) == ["make a"]


def test_every_readme_command_is_exercised_or_explained() -> None:
    unmapped = [c for c in COMMANDS_IN_README if _entry(c) is None]
    assert not unmapped, (
        "README commands no test or CI step is known to run — add a test, or map the command in "
        f"tests/unit/test_readme_commands.py: {unmapped}")


def test_every_readme_shell_line_is_run_or_mapped_verbatim() -> None:
    """A shell line is covered verbatim: run by the quick-start e2e test, or mapped exactly here."""
    assert any(quick for _, quick in SHELL_LINES) and any(not quick for _, quick in SHELL_LINES)
    unmapped = [line for line, quick in SHELL_LINES if not quick and line not in VERBATIM]
    assert not unmapped, (
        "README shell lines outside the Quick start that no test runs as written — move them into the "
        f"Quick start (run by {QUICKSTART_E2E}) or map them in VERBATIM: {unmapped}")
    stale = sorted(set(VERBATIM) - {line for line, _ in SHELL_LINES})
    assert not stale, f"VERBATIM maps lines the README no longer has: {stale}"


@pytest.mark.parametrize("line", sorted(VERBATIM))
def test_each_verbatim_line_points_at_a_file_that_runs_it(line: str) -> None:
    for path, needle in VERBATIM[line].items():
        f = ROOT / path
        assert f.is_file(), f"{line}: {path} does not exist"
        assert needle in f.read_text(encoding="utf-8"), f"{line}: {path} does not contain {needle!r}"


def test_the_quick_start_is_run_by_the_e2e_test() -> None:
    """The e2e test runs the whole section through the same reader, and the quick start has the four
    uses the README promises (ElasticScaler on Prometheus, Tidal, prefill/decode RSG, LLMScaler + SLO)."""
    e2e = (ROOT / QUICKSTART_E2E).read_text(encoding="utf-8")
    assert "quickstart_script(README.read_text(" in e2e and '"bash", str(wrapped)' in e2e
    quick = [line for line, q in SHELL_LINES if q]
    for kind in ("ElasticScaler", "Tidal", "ResourceScalingGroup", "LLMSLORequirement", "LLMScaler"):
        assert f"kind: {kind}" in quick, kind
    assert "externalServer:" in quick and "python -m escaler manager" in " ".join(quick)
    script = reader.quickstart_script(README.read_text(encoding="utf-8"))
    assert [_normalise(ln.strip()) for ln in script.splitlines() if ln.strip()
            and not ln.strip().startswith("#")] == quick


def test_the_wheel_the_readme_installs_is_this_version() -> None:
    import escaler

    assert f"pip install dist/escaler-{escaler.__version__}-py3-none-any.whl" in VERBATIM


@pytest.mark.parametrize("entry", [*EXERCISED, *NOT_RUN], ids=lambda e: e.pattern)
def test_each_mapping_points_at_a_file_that_runs_the_command(entry: Exercised | NotRun) -> None:
    evidence = entry.by if isinstance(entry, Exercised) else entry.checks
    for path, needle in evidence.items():
        f = ROOT / path
        assert f.is_file(), f"{entry.pattern}: {path} does not exist"
        assert needle in f.read_text(encoding="utf-8"), f"{entry.pattern}: {path} does not contain {needle!r}"


def test_every_make_target_the_readme_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = {m.group(1) for m in re.finditer(r"^([\w-]+):", makefile, re.M)}
    named = {c.split()[1] for c in COMMANDS_IN_README if c.startswith("make ")}
    assert named and named <= targets, f"README names make targets the Makefile lacks: {named - targets}"


def test_ci_runs_make_test() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, re.M)


def test_named_benchmarks_exist_and_run() -> None:
    for command in COMMANDS_IN_README:
        if command.startswith(("python bench/run.py", "BENCH_")):
            for name in re.findall(r"\bbench_\w+", command):
                module = ROOT / "bench" / f"{name}.py"
                assert module.is_file(), f"{command}: no {module}"
                assert re.search(r"^def run\(", module.read_text(encoding="utf-8"), re.M), module


# ------------------------------------------------------------------ cheap commands, run here


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue() + err.getvalue()


def _subcommands_named() -> set[str]:
    named = set()
    for command in [*COMMANDS_IN_README, *(line for line, _ in SHELL_LINES)]:
        m = re.match(r"(?:python -m )?escaler ([a-z][\w-]*)", command)
        if m:
            named.add(m.group(1))
    return named


def test_every_subcommand_the_readme_names_exists_and_has_help() -> None:
    named = _subcommands_named()
    assert named, "the README names no escaler sub-command"
    assert named <= set(COMMANDS), f"README names sub-commands that do not exist: {named - set(COMMANDS)}"
    for sub in sorted(named):
        code, text = _run([sub, "--help"])
        assert code == 0 and f"escaler {sub}" in text, (sub, text[:200])


def test_python_m_escaler_help_and_version_as_a_user_runs_them() -> None:
    helped = subprocess.run([sys.executable, "-m", "escaler", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    assert helped.returncode == 0, helped.stderr
    for sub in COMMANDS:
        assert sub in helped.stdout
    code, text = _run(["version"])
    assert code == 0 and text.startswith("escaler ")


def test_cluster_py_parser_runs() -> None:
    for argv in (["--help"], ["up", "--help"]):
        done = subprocess.run([sys.executable, str(ROOT / "hack" / "cluster.py"), *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert "usage:" in done.stdout


def test_webhook_patch_cabundle_against_a_stub_kubectl(tmp_path: Path) -> None:
    """hack/webhook-patch-cabundle.sh CA_FILE: one JSON-patch `add` of the base64 CA per webhook."""
    log = tmp_path / "calls"
    stub = tmp_path / "kubectl"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$*" >> {log}\n'
        'if [ "$1" = get ]; then printf "a.escaler.io\\nb.escaler.io\\n"; fi\n',
        encoding="utf-8")
    stub.chmod(0o755)
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", encoding="utf-8")
    script = str(ROOT / "hack" / "webhook-patch-cabundle.sh")
    env = {"KUBECTL": str(stub), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(["bash", script, str(ca)], env=env, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    calls = log.read_text(encoding="utf-8").splitlines()
    assert calls[0].startswith("get validatingwebhookconfiguration escaler-validating-webhook")
    patch = calls[1]
    assert patch.startswith("patch validatingwebhookconfiguration escaler-validating-webhook --type=json -p")
    assert patch.count('"op":"add"') == 2 and "/webhooks/1/clientConfig/caBundle" in patch
    usage = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=30, check=False)
    assert usage.returncode == 2 and "usage:" in usage.stderr


@pytest.mark.parametrize("body", [
    "sleep 0.05 &\nsleep 0.3\n",  # the background job (the quick start's manager) ends first
    "sleep 30 &\ntrue\n",  # it is still running: the trap stops it
])
def test_the_quick_start_wrapper_passes_a_script_whose_lines_all_pass(body: str, tmp_path: Path) -> None:
    """The e2e test runs the quick start inside ``wrapped``; a run whose every line passed must exit
    0 whether or not its background job is still there when the exit trap runs (CI of 2026-12-07
    failed with exit 1 after every line had passed: the manager had stopped first and the trap's
    ``kill`` failed under ``set -e``)."""
    script = tmp_path / "s.sh"
    script.write_text(reader.wrapped(body), encoding="utf-8")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0, done.stderr


def test_the_quick_start_wrapper_fails_a_failing_line(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text(reader.wrapped("sleep 30 &\nfalse\necho never\n"), encoding="utf-8")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 1 and "never" not in done.stdout
