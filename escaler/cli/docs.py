"""``escaler docs [--out DIR]``: the API reference, generated from the models and the annotation table.

Renders ``escaler.api.docgen.render_reference`` with the condition catalog of
``escaler.cli.conditiondocs`` and the annotations page of ``escaler.cli.annotationdocs``. Without
``--out``, prints the pages one after another (each starts with the generated-file header). With
``--out DIR``, writes one ``<kind>.md`` per kind, ``annotations.md`` and ``README.md`` (the index)
into DIR (created if missing) and removes any other generated page there (one that starts with the
header), so a renamed kind leaves nothing stale; other files are left alone. ``docs/reference/``
holds the output of ``escaler docs --out docs/reference``, and ``tests/unit/test_reference_docs.py``
keeps it equal to the generator's. Exit code 0, or 1 when DIR cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from escaler.api.docgen import HEADER, render_reference
from escaler.cli.annotationdocs import render_annotations
from escaler.cli.conditiondocs import condition_docs
from escaler.cli.generated import emit, write_generated

__all__ = ["add_parser", "render", "run", "write_dir"]


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[argparse.Namespace], int]:
    p = sub.add_parser(
        "docs",
        help="print or write the per-kind API reference (Markdown)",
        description="Generate the API reference of every escaler kind (fields, validation rules, condition "
        "reasons, health rule) from the models, and the scaler annotations page; --out writes one <kind>.md "
        "per kind plus annotations.md and README.md.",
    )
    p.add_argument("--out", metavar="DIR", type=Path, help="write the Markdown pages into DIR")
    return run


def render() -> dict[str, str]:
    """File name → Markdown of every reference page."""
    return render_reference(condition_docs(), render_annotations())


def write_dir(out: Path) -> list[Path]:
    """Write every page into ``out`` and remove stale generated pages (``escaler.cli.generated``)."""
    return write_generated(out, render(), "*.md", HEADER)


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        sys.stdout.write("".join(render().values()))
        return 0
    return emit("docs", lambda: write_dir(args.out))
