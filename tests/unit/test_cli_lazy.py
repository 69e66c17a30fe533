"""``escaler.cli.main`` imports a sub-command's module only when that sub-command runs: a manager
process (started over a hundred times by the e2e suite, and on every pod restart) does not pay for
the simulator's scipy and matplotlib nor the SLO API's FastAPI; ``--help`` still lists them all."""

from __future__ import annotations

import json
import subprocess
import sys

from escaler.cli.main import COMMANDS, build_parser

HEAVY = ("scipy", "matplotlib", "fastapi", "uvicorn", "escaler.sim", "escaler.sloapi")


def _imported_after(code: str) -> set[str]:
    probe = (f"import sys\n{code}\nimport json\n"
             f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_manager_command_imports_none_of_the_other_commands_heavy_modules() -> None:
    assert _imported_after("from escaler.cli.main import build_parser; build_parser(only='manager')") == set()
    assert _imported_after("from escaler.cli.main import main\n"
                           "try:\n    main(['manager', '--help'])\nexcept SystemExit:\n    pass") == set()


def test_the_full_parser_still_has_every_command_and_one_command_builds_alone() -> None:
    _, handlers = build_parser()
    assert set(handlers) == set(COMMANDS)
    _, one = build_parser(only="version")
    assert set(one) == {"version"}
    # an unknown first word builds them all, so argparse names the choices in its error
    _, every = build_parser(only="nope")
    assert set(every) == set(COMMANDS)
