"""The ``escaler`` command line: one sub-command per product entry point (docs/operations.md#the-commands).

Each sub-command lives in its own module under ``escaler.cli`` and registers itself in
``COMMANDS``; a sub-command is listed only once it is implemented, so ``--help`` never
advertises something that does not work. Exit codes: 0 success, 2 usage error, others as the
sub-command documents.

``main(argv, prog=...)`` takes the name the help shows: ``kubectl-escaler`` (``escaler.cli.plugin``,
the kubectl plugin) runs the same commands as ``kubectl escaler``.

Sub-command modules are imported when used: ``escaler manager`` imports the manager's module
alone, not the simulator's (scipy, matplotlib) nor the SLO API's (FastAPI). Every e2e test starts
managers, so each second of import is paid over a hundred times; ``--help`` and an unknown
command still build every sub-parser.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
from collections.abc import Callable, Sequence

import escaler

__all__ = ["COMMANDS", "main"]

Handler = Callable[[argparse.Namespace], int]


def _version(_: argparse.Namespace) -> int:
    print(f"escaler {escaler.__version__} (python {platform.python_version()})")
    return 0


def _add_version(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> Handler:
    sub.add_parser("version", help="print the escaler version")
    return _version


Adder = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], Handler]

# name -> the module whose ``add_parser`` adds the sub-parser and returns its handler ("" = this one)
COMMANDS: dict[str, str] = {
    "version": "",
    "crds": "escaler.cli.crds",
    "docs": "escaler.cli.docs",
    "samples": "escaler.cli.samples",
    "manager": "escaler.cli.manager",
    "explain": "escaler.cli.explain",
    "slo-api": "escaler.cli.sloapi",
    "simulate": "escaler.cli.simulate",
}


def adder(name: str) -> Adder:
    """The function adding sub-command ``name``'s parser (its module imported now)."""
    module = COMMANDS[name]
    if not module:
        return _add_version
    add: Adder = importlib.import_module(module).add_parser
    return add


def build_parser(prog: str = "escaler", only: str | None = None) -> tuple[argparse.ArgumentParser,
                                                                          dict[str, Handler]]:
    """The parser with every sub-command, or with ``only`` that one (a name of ``COMMANDS``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Elastic scaling for LLM inference on Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = [only] if only in COMMANDS else list(COMMANDS)
    handlers = {name: adder(name)(sub) for name in names}
    return parser, handlers


def main(argv: Sequence[str] | None = None, prog: str = "escaler") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, handlers = build_parser(prog, only=argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return 2
    return handlers[args.command](args)
