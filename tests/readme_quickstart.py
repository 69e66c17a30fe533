"""The README's shell blocks, as the tests read them (issue 29).

``shell_blocks(text)`` gives the body of every ```sh/```bash/```console/```shell block, in order;
``quickstart_script(text)`` joins the blocks of the ``## Quick start`` section (its ``###``
subsections included) into the one script ``tests/e2e/test_readme_quickstart.py`` runs, line by
line as written, against the local control plane, inside ``wrapped(script)``: bash's
``set -euo pipefail`` (a failing line fails the run) and an exit trap that stops a background job
the script left behind — and that succeeds when the job has already ended (the quick start's own
``kill %1`` stops its manager, which may be gone before the trap runs).
``tests/unit/test_readme_commands.py`` counts a README shell line as covered when it is in that
section, and otherwise asks for an explicit mapping.
"""

from __future__ import annotations

import re

__all__ = ["QUICK_START", "SHELL_LANGS", "quickstart_script", "section", "shell_blocks", "wrapped"]

QUICK_START = "Quick start"
SHELL_LANGS = ("sh", "bash", "console", "shell")


def section(text: str, title: str) -> str:
    """The ``## title`` section of ``text``: from its heading to the next ``## `` heading."""
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def shell_blocks(text: str) -> list[str]:
    return [body for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M)
            if lang in SHELL_LANGS]


def quickstart_script(text: str) -> str:
    return "\n".join(block.rstrip("\n") for block in shell_blocks(section(text, QUICK_START))) + "\n"


def wrapped(script: str) -> str:
    """``script`` with ``set -euo pipefail`` and an exit trap that stops any background job still
    running; under ``set -e`` a failing ``kill`` of a job that already ended would fail the run, so
    the trap tolerates it (CI of 2026-12-07: the manager stopped before the trap, ``kill`` said "no
    such process", and the quick start failed with exit 1 after every line had passed)."""
    return "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\nset -x\n" + script
