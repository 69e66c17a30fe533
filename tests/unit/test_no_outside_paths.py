"""Nothing in the repository points outside it (issue 29).

A user of the repository or of the wheel has only what is tracked here, so no tracked file (outside
``.ci/``, the CI machinery's own) may name the sibling folder the project was first specified in:
its traces ship in ``escaler/sim/data/`` and its notes are retold in ``docs/design.md``. The wheel
is built from tracked files only (``escaler/`` and its package data), so it is covered too. A
failure names each ``file:line``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# spelt in two parts so that this file does not name it
OUTSIDE = ".." + "/shared"
EXEMPT = (".ci/",)


def tracked_files() -> list[str]:
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): nothing to list")
    done = subprocess.run([git, "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True,
                          timeout=60)
    return [f for f in done.stdout.decode().split("\0") if f]


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
