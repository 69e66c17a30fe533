"""``escaler crds [--out DIR]``: the CustomResourceDefinitions generated from ``escaler.api``.

Without ``--out``, prints every CRD as one multi-document YAML stream (``kubectl apply -f -``).
With ``--out DIR``, writes one ``<plural>.<group>.yaml`` per CRD into DIR (created if missing)
and removes any other generated CRD file there (one that starts with the generated-file header),
so a renamed kind leaves nothing stale behind; other files are left alone. ``make crds`` runs
``escaler crds --out manifests/crds`` (and ``--out`` the package's copy ``escaler/data/crds``, the
wheel's package data, and the chart's ``charts/escaler/crds``), and unit tests keep
``manifests/crds`` equal to the generator's output and the package's copy byte-identical to it.
From a wheel install, ``escaler crds | kubectl apply --server-side -f -`` installs the CRDs.
Exit code 0, or 1 when DIR cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from escaler.api.crdgen import HEADER, render_crds_yaml, render_stream
from escaler.cli.generated import emit, write_generated

__all__ = ["add_parser", "run", "write_dir"]


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[argparse.Namespace], int]:
    p = sub.add_parser(
        "crds",
        help="print the generated CustomResourceDefinitions",
        description="Print the CRDs of every escaler kind (generated from escaler.api), or write one file "
        "per CRD into --out.",
    )
    p.add_argument("--out", metavar="DIR", type=Path, help="write <plural>.<group>.yaml files into DIR")
    return run


def write_dir(out: Path) -> list[Path]:
    """Write every CRD into ``out`` and remove stale generated files (``escaler.cli.generated``)."""
    return write_generated(out, render_crds_yaml(), "*.yaml", HEADER)


def run(args: argparse.Namespace) -> int:
    if args.out is None:
        sys.stdout.write(render_stream())
        return 0
    return emit("crds", lambda: write_dir(args.out))
