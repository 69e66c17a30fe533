"""The ``escaler`` command line: one sub-command per product entry point (SPEC §12).

Each sub-command lives in its own module under ``escaler.cli`` and registers itself in
``COMMANDS``; a sub-command is listed only once it is implemented, so ``--help`` never
advertises something that does not work. Exit codes: 0 success, 2 usage error, others as the
sub-command documents.

``main(argv, prog=...)`` takes the name the help shows: ``kubectl-escaler`` (``escaler.cli.plugin``,
the kubectl plugin) runs the same commands as ``kubectl escaler``.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable, Sequence

import escaler
from escaler.cli import crds, docs, explain, manager, samples, simulate, sloapi

__all__ = ["COMMANDS", "main"]

Handler = Callable[[argparse.Namespace], int]


def _version(_: argparse.Namespace) -> int:
    print(f"escaler {escaler.__version__} (python {platform.python_version()})")
    return 0


def _add_version(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> Handler:
    sub.add_parser("version", help="print the escaler version")
    return _version


# name -> function that adds the sub-parser and returns its handler
COMMANDS: dict[str, Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], Handler]] = {
    "version": _add_version,
    "crds": crds.add_parser,
    "docs": docs.add_parser,
    "samples": samples.add_parser,
    "manager": manager.add_parser,
    "explain": explain.add_parser,
    "slo-api": sloapi.add_parser,
    "simulate": simulate.add_parser,
}


def build_parser(prog: str = "escaler") -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Elastic scaling for LLM inference on Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    handlers = {name: add(sub) for name, add in COMMANDS.items()}
    return parser, handlers


def main(argv: Sequence[str] | None = None, prog: str = "escaler") -> int:
    parser, handlers = build_parser(prog)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    return handlers[args.command](args)
