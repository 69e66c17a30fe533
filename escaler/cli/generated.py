"""Generated files on disk: the one rule ``escaler crds --out`` and ``escaler docs --out`` share.

``write_generated(out, files, pattern, header)`` writes every ``name → text`` of ``files`` into
``out`` (created if missing) and removes any other file matching ``pattern`` there that starts
with ``header`` (a file the generator wrote earlier), so a renamed kind leaves nothing stale; files
without the header are left alone. ``emit(command, out, write)`` is the shared ``--out`` ending of
both commands: the written paths one per line and exit 0, or the OSError on stderr and exit 1.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["emit", "write_generated"]


def write_generated(out: Path, files: Mapping[str, str], pattern: str, header: str) -> list[Path]:
    """See the module docstring; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in sorted(out.glob(pattern)):
        if stale.name not in files and stale.read_text(encoding="utf-8").startswith(header):
            stale.unlink()
    written = []
    for name, text in files.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def emit(command: str, write: Callable[[], list[Path]]) -> int:
    """Run ``write``; print what it wrote (0) or why it could not (1, on stderr)."""
    try:
        written = write()
    except OSError as err:
        print(f"escaler {command}: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
