"""The commands without their extras (issue 29): a bare ``pip install escaler`` has neither the SLO
API's FastAPI and uvicorn nor the simulator's scipy and matplotlib. Here they are made
unimportable in a child interpreter (a meta-path finder refusing them, first on ``sys.meta_path``,
as a missing package would: ``ModuleNotFoundError``), and:

- ``escaler slo-api`` and ``escaler simulate`` print ONE line naming ``pip install
  'escaler[EXTRA]'`` and exit 3, no traceback;
- the manager's module imports, builds its parser and reaches ``register_reconcilers``; ``escaler
  manager --help`` and ``escaler --help`` (every sub-parser) work;
- the message comes from ``escaler.cli.extras``, whose ``missing`` imports nothing.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from escaler.cli import extras

BLOCKED = ("fastapi", "starlette", "uvicorn", "matplotlib", "scipy", "numpy", "tqdm")

_BLOCKER = textwrap.dedent(f"""\
    import sys

    class _Refuse:
        blocked = {BLOCKED!r}

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.blocked:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, _Refuse())
    """)


def _blocked(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (after the blocker) in a child interpreter with ``argv`` as its arguments."""
    return subprocess.run([sys.executable, "-c", _BLOCKER + textwrap.dedent(code), *argv],
                          capture_output=True, text=True, timeout=120)


def _escaler(*argv: str) -> subprocess.CompletedProcess[str]:
    return _blocked("from escaler.cli.main import main\nsys.exit(main(sys.argv[1:]))", *argv)


def test_the_blocker_really_blocks() -> None:
    r = _blocked("import fastapi")
    assert r.returncode == 1 and "ModuleNotFoundError: No module named 'fastapi'" in r.stderr, r.stderr


@pytest.mark.parametrize(("argv", "line"), [
    (["slo-api", "--auth", "none"],
     "escaler slo-api: needs fastapi, uvicorn, the SLO API's dependencies: pip install 'escaler[sloapi]'"),
    (["simulate", "--out", "/nonexistent/escaler-sim"],
     "escaler simulate: needs scipy, matplotlib, the simulator's dependencies: pip install 'escaler[sim]'"),
    (["simulate", "--no-plots", "--out", "/nonexistent/escaler-sim"],
     "escaler simulate: needs scipy, the simulator's dependencies: pip install 'escaler[sim]'"),
])
def test_a_command_without_its_extra_prints_one_line_naming_the_fix(argv: list[str], line: str) -> None:
    r = _escaler(*argv)
    assert (r.returncode, r.stdout, r.stderr) == (extras.EXIT_MISSING, "", line + "\n")


def test_the_manager_imports_and_builds_its_parser_without_any_extra() -> None:
    r = _blocked("""\
        import argparse
        from escaler.cli.manager import add_parser, register_reconcilers
        parser = argparse.ArgumentParser(prog="escaler")
        handler = add_parser(parser.add_subparsers(dest="command"))
        args = parser.parse_args(["manager", "--log-level", "debug"])
        assert callable(handler) and callable(register_reconcilers) and args.command == "manager"
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in _Refuse.blocked
                       or m.startswith(("escaler.sim", "escaler.sloapi")))
        print(heavy)
        """)
    assert (r.returncode, r.stdout, r.stderr) == (0, "[]\n", ""), r.stderr


@pytest.mark.parametrize("argv", [["manager", "--help"], ["--help"], ["slo-api", "--help"],
                                  ["simulate", "--help"]])
def test_help_works_without_any_extra(argv: list[str]) -> None:
    r = _escaler(*argv)
    assert r.returncode == 0 and r.stdout.startswith("usage: escaler"), r.stderr
    assert r.stderr == ""


def test_missing_imports_nothing_and_names_the_absent_in_order() -> None:
    r = _blocked("""\
        from escaler.cli import extras
        print(extras.missing(["scipy", "json", "fastapi", "escaler_no_such_module"]))
        print(sorted(m for m in ("json", "scipy", "fastapi") if m in sys.modules))
        """)
    assert r.stdout.splitlines() == ["['scipy', 'fastapi', 'escaler_no_such_module']", "[]"], r.stderr


def test_every_extra_is_an_extra_of_the_distribution() -> None:
    import tomllib
    from pathlib import Path

    optional = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    assert set(extras.EXTRAS) <= set(optional)
    assert optional["all"] == [f"escaler[{','.join(extras.EXTRAS)}]"]
