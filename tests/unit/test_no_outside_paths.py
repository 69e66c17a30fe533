"""Nothing in the repository points outside it (issue 29).

A user of the repository or of the wheel has only what is tracked here, so no tracked file (outside
``.ci/``, the CI machinery's own) may name the sibling folder the project was first specified in:
its traces ship in ``escaler/sim/data/`` and its notes are retold in ``docs/design.md``. Nor may one
cite the product specification and architecture notes that lived there by their names (the
section-numbered spec, the architecture file): what they said is in ``docs/design.md``,
``docs/concepts.md`` and the pages ``docs/index.md`` lists, and a reference points there. The
names are matched case-sensitively and as words, so ``spec`` in lowercase, ``INVALID_SPEC`` or an
environment variable ending in ``_SPEC`` are not hits. The wheel is built from tracked files only
(``escaler/`` and its package data), so it is covered too. A failure names each ``file:line``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# spelt in two parts so that this file does not name it
OUTSIDE = ".." + "/shared"
EXEMPT = (".ci/",)
# the outside documents by name: the spec (as a file, or one of its sections) and the architecture
# notes; spelt in parts for the same reason
_S, _A = "SP" + "EC", "ARCHI" + "TECTURE"
CITED = re.compile(rf"(?<![A-Za-z0-9_])(?:{_S}(?:\.md| §| section)|{_A}\.md)")


def tracked_files() -> list[str]:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): nothing to list")
    done = subprocess.run([git, "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True,
                          timeout=60)
    return [f for f in done.stdout.decode().split("\0") if f]


def citations(files: list[str], root: Path = ROOT) -> list[str]:
    """``file:line: text`` for each line of ``files`` (relative to ``root``) citing an outside
    document by name (``CITED``)."""
    found = []
    for name in files:
        if name.startswith(EXEMPT):
            continue
        path = root / name
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        if not CITED.search(text):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if CITED.search(line):
                found.append(f"{name}:{n}: {line.strip()[:120]}")
    return found


def hits(files: list[str], root: Path = ROOT) -> list[str]:
    """``file:line: text`` for each line of ``files`` (relative to ``root``) naming ``OUTSIDE``."""
    found = []
    for name in files:
        if name.startswith(EXEMPT):
            continue
        path = root / name
        if not path.is_file():  # deleted in the working tree, not yet committed
            continue
        data = path.read_bytes()
        if OUTSIDE.encode() not in data:
            continue
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if OUTSIDE in line:
                found.append(f"{name}:{n}: {line.strip()[:120]}")
    return found


def test_no_tracked_file_points_outside_the_repository() -> None:
    files = tracked_files()
    assert "README.md" in files and "escaler/sim/data/README.md" in files
    bad = hits(files)
    assert not bad, (f"tracked files name {OUTSIDE} (ship the file, or say it in our words):\n"
                     + "\n".join(bad))


def test_the_check_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(f"fine\nsee {OUTSIDE}/traces/x.csv\n", encoding="utf-8")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(f"cp {OUTSIDE}/x .\n", encoding="utf-8")
    assert hits(["a.md", ".ci/run"], tmp_path) == [f"a.md:2: see {OUTSIDE}/traces/x.csv"]


def test_no_tracked_file_cites_the_outside_spec_or_architecture_notes() -> None:
    bad = citations(tracked_files())
    assert not bad, ("tracked files cite the outside spec or architecture notes; point to our own page "
                     "and section (docs/index.md lists them), or in a CRD description say the rule "
                     "in words:\n" + "\n".join(bad))


@pytest.mark.parametrize(("line", "cited"), [
    (f"the health rule ({_S} §3)", True),
    (f"see {_S}.md", True),
    (f"webhook ({_S} section 10)", True),
    (f"layers ({_A}.md)", True),
    (f"# {_S}.md §5.4 defaults", True),
    ("return Hold(validation=Validation(INVALID_SPEC, msg))", False),
    (f"INVALID_{_S} section", False),
    (f"export BUILD_{_S}.md=1", False),
    ("the spec says §3", False),
    (f"{_S}_FAMILIES = ()", False),
    (f"{_A} notes", False),
    ("docs/concepts.md#conditions-and-health", False),
], ids=["section", "file", "section-word", "architecture", "file-section", "INVALID_SPEC",
        "identifier-section", "env-var", "lowercase", "identifier", "no-file", "our-page"])
def test_what_counts_as_a_citation(line: str, cited: bool) -> None:
    assert bool(CITED.search(line)) is cited


def test_the_citation_check_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(f"ok = 1\n# after {_S} §4 step 5\n", encoding="utf-8")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "notes").write_text(f"{_S} §3\n", encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(f"name = 'layers'\nx = '{_A}.md'\n", encoding="utf-8")
    assert citations(["a.py", ".ci/notes", "pyproject.toml"], tmp_path) == [
        f"a.py:2: # after {_S} §4 step 5", f"pyproject.toml:2: x = '{_A}.md'"]


def test_the_traces_the_docs_use_ship_as_package_data() -> None:
    import tomllib

    from escaler.sim.trace import SHIPPED_TRACES, resolve_trace

    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "sim/data/*.csv" in data["tool"]["setuptools"]["package-data"]["escaler"]
    attribution = (ROOT / "escaler" / "sim" / "data" / "README.md").read_text(encoding="utf-8")
    for name, file in SHIPPED_TRACES.items():
        assert resolve_trace(name).is_file(), name
        assert f"`{file}`" in attribution, f"escaler/sim/data/README.md does not attribute {file}"
    for licence in ("CC-BY 4.0", "Apache License 2.0", "Splitwise", "alibaba/ServeGen"):
        assert licence in attribution
