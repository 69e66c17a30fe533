"""The distribution's contents, without building it (tests/e2e/test_distribution.py builds and installs it).

* ``escaler/data/crds`` and ``escaler/data/samples`` (the wheel's package data) are byte-identical to
  ``manifests/crds`` and ``manifests/samples``, file for file (``make crds`` refreshes them);
* pyproject.toml declares them as package data, the two console scripts point at real callables,
  and the version is ``escaler.__version__``;
* ``kubectl-escaler`` is ``escaler`` under the name ``kubectl escaler``;
* ``escaler samples`` prints, selects and writes the packaged samples and refuses unknown names.
"""

from __future__ import annotations

import fnmatch
import importlib
import io
import tomllib
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

import escaler
from escaler.api.crdgen import render_crds_yaml
from escaler.cli import main as cli_main
from escaler.cli import plugin, samples

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "escaler"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.yaml"))}


def _drift(packaged: Path, source: Path) -> list[str]:
    have, want = _files(packaged), _files(source)
    return sorted(set(have) ^ set(want)) + sorted(n for n in want if n in have and have[n] != want[n])


@pytest.mark.parametrize("kind", ["crds", "samples"])
def test_packaged_copies_are_byte_identical_to_manifests(kind: str) -> None:
    source = ROOT / "manifests" / kind
    assert _files(source), f"manifests/{kind} is empty"
    drift = _drift(PACKAGE / "data" / kind, source)
    assert not drift, f"escaler/data/{kind} differs from manifests/{kind} ({', '.join(drift)}): run make crds"


def test_packaged_crds_are_the_generators_output() -> None:
    want = {name: text.encode("utf-8") for name, text in render_crds_yaml().items()}
    assert _files(PACKAGE / "data" / "crds") == want


def test_the_drift_check_names_the_differing_files(tmp_path: Path) -> None:
    packaged, source = tmp_path / "packaged", tmp_path / "source"
    packaged.mkdir()
    source.mkdir()
    for name in ("a.yaml", "b.yaml"):
        (source / name).write_text("x: 1\n")
    (packaged / "a.yaml").write_text("x: 1\n")
    (packaged / "b.yaml").write_text("x: 2\n")
    (packaged / "c.yaml").write_text("stale: true\n")
    assert _drift(packaged, source) == ["c.yaml", "b.yaml"]


def test_package_data_globs_cover_every_data_file() -> None:
    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["escaler"]
    data = [p.relative_to(PACKAGE).as_posix() for p in sorted((PACKAGE / "data").rglob("*")) if p.is_file()]
    data += [p.relative_to(PACKAGE).as_posix() for p in sorted((PACKAGE / "sim" / "data").rglob("*"))
             if p.is_file()]
    uncovered = [f for f in data if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert data and not uncovered, f"package data not shipped in the wheel: {uncovered}"


@pytest.mark.parametrize("script", ["escaler", "kubectl-escaler"])
def test_console_scripts_point_at_callables(script: str) -> None:
    target = PYPROJECT["project"]["scripts"][script]
    module, _, attr = target.partition(":")
    assert callable(getattr(importlib.import_module(module), attr)), target


def test_the_version_has_one_source() -> None:
    assert "version" not in PYPROJECT["project"]
    assert "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "escaler.__version__"}


def _run(fn: object, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = fn(argv)  # type: ignore[operator]
        except SystemExit as exc:  # argparse's --help and usage errors
            code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue()


def test_plugin_help_names_itself_kubectl_escaler() -> None:
    code, out, _ = _run(plugin.main, ["--help"])
    assert code == 0
    assert out.startswith("usage: kubectl escaler ")
    for command in cli_main.COMMANDS:
        assert command in out


@pytest.mark.parametrize("command", ["explain", "crds", "version", "samples"])
def test_plugin_subcommand_help_names_itself(command: str) -> None:
    code, out, _ = _run(plugin.main, [command, "--help"])
    assert code == 0
    assert out.startswith(f"usage: kubectl escaler {command}")


@pytest.mark.parametrize("argv", [["version"], ["crds"], ["samples", "tidal"], ["samples", "--list"]])
def test_plugin_runs_the_same_commands_as_escaler(argv: list[str]) -> None:
    via_plugin = _run(plugin.main, argv)
    via_escaler = _run(cli_main.main, argv)
    assert via_plugin == via_escaler
    assert via_plugin[0] == 0 and via_plugin[1]


def test_version_prints_the_package_version() -> None:
    code, out, _ = _run(plugin.main, ["version"])
    assert code == 0
    assert out.startswith(f"escaler {escaler.__version__} ")


def test_plugin_without_a_command_prints_its_usage_and_exits_2() -> None:
    code, out, err = _run(plugin.main, [])
    assert (code, out) == (2, "")
    assert err.startswith("usage: kubectl escaler ")


def test_samples_are_one_per_kind_and_stream_as_yaml() -> None:
    packaged = samples.packaged_samples()
    assert list(packaged) == sorted(p.stem for p in (ROOT / "manifests" / "samples").glob("*.yaml"))
    code, out, _ = _run(cli_main.main, ["samples"])
    assert code == 0
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = {d["kind"] for d in docs}
    assert kinds == {"ElasticScaler", "Tidal", "ResourceScalingGroup", "LLMScaler", "LLMSLORequirement",
                     "JobSLORequirement"}
    per_file = sum(len([d for d in yaml.safe_load_all(t) if d]) for t in packaged.values())
    assert len(docs) == per_file


def test_samples_selects_by_name_in_the_order_given() -> None:
    chosen = samples.select(samples.packaged_samples(), ["tidal", "llmscaler", "tidal"])
    assert isinstance(chosen, dict) and list(chosen) == ["tidal", "llmscaler"]


def test_samples_refuses_an_unknown_name_listing_the_names() -> None:
    code, out, err = _run(cli_main.main, ["samples", "tidal", "tidals"])
    assert (code, out) == (2, "")
    assert "unknown sample 'tidals'" in err and "NAME must be one of" in err and "elasticscaler" in err


def test_samples_out_writes_the_packaged_bytes(tmp_path: Path) -> None:
    out_dir = tmp_path / "new" / "dir"
    code, out, _ = _run(cli_main.main, ["samples", "--out", str(out_dir)])
    assert code == 0
    assert out.splitlines() == [str(out_dir / f"{n}.yaml") for n in samples.packaged_samples()]
    assert _files(out_dir) == _files(ROOT / "manifests" / "samples")


def test_samples_out_unwritable_exits_1(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    code, _, err = _run(cli_main.main, ["samples", "--out", str(blocker / "sub")])
    assert code == 1
    assert err.startswith("escaler samples: ")
