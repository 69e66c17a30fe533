"""``escaler samples [NAME ...] [--out DIR]``: the sample objects shipped inside the package.

The wheel carries ``manifests/samples/`` as package data (``escaler/data/samples/``, refreshed by
``make crds``; a unit test keeps the two byte-identical), so a user who installed only the wheel can
run ``escaler samples tidal | kubectl apply -n NS -f -``. NAME is a sample file's stem (one per kind:
``elasticscaler``, ``tidal``, ``resourcescalinggroup``, ``llmscaler``, ``llmslorequirement``,
``jobslorequirement``); none means all, in name order. Without ``--out`` the files are printed as
one multi-document YAML stream; with ``--out DIR`` each is written to ``DIR/<name>.yaml`` (DIR is
created if missing) and the paths written are printed. ``--list`` prints the names.
Exit code 0; 1 when DIR cannot be written; 2 for an unknown NAME (the message lists the names).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

__all__ = ["add_parser", "packaged_samples", "run", "select", "stream"]


def packaged_samples() -> dict[str, str]:
    """Sample name (file stem) → the file's text, from the installed package, in name order."""
    folder = resources.files("escaler").joinpath("data", "samples")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda f: f.name)
    return {f.name.removesuffix(".yaml"): f.read_text(encoding="utf-8") for f in files}


def select(samples: dict[str, str], names: Sequence[str]) -> dict[str, str] | str:
    """The samples named (all when none), or the error message for the first unknown name."""
    if not names:
        return samples
    unknown = [n for n in names if n not in samples]
    if unknown:
        return f"unknown sample {unknown[0]!r}: NAME must be one of {', '.join(samples)}"
    return {n: samples[n] for n in dict.fromkeys(names)}


def stream(samples: dict[str, str]) -> str:
    """The files as one multi-document YAML stream (``---`` between files)."""
    texts = [t if t.endswith("\n") else t + "\n" for t in samples.values()]
    return "---\n".join(texts)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> Callable[[argparse.Namespace], int]:
    p = sub.add_parser(
        "samples",
        help="print the sample objects of every kind",
        description="Print the shipped sample objects (one file per kind) as one YAML stream, or write "
        "them into --out.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="sample names (default: all; see --list)")
    p.add_argument("--out", metavar="DIR", type=Path, help="write <name>.yaml files into DIR")
    p.add_argument("--list", action="store_true", help="print the sample names and exit")
    return run


def run(args: argparse.Namespace) -> int:
    samples = packaged_samples()
    if args.list:
        print("\n".join(samples))
        return 0
    chosen = select(samples, args.names)
    if isinstance(chosen, str):
        print(f"escaler samples: {chosen}", file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(stream(chosen))
        return 0
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in chosen.items():
            path = args.out / f"{name}.yaml"
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as err:
        print(f"escaler samples: {err}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
