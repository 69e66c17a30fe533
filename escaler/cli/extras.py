"""The commands' optional dependencies: which extra each command needs, and the one line naming the fix.

A bare ``pip install escaler`` (and the manager's image) carries what the manager, the webhook and
the other commands import; two commands need an extra of the distribution (pyproject.toml's
``[project.optional-dependencies]``, docs/install.md):

- ``escaler slo-api``: ``escaler[sloapi]`` (FastAPI, uvicorn);
- ``escaler simulate``: ``escaler[sim]`` (scipy; matplotlib for the plots).

``missing(modules)`` returns the modules that cannot be imported, without importing them (a module
whose finder refuses it counts as missing); ``missing_message(command, extra, missing)`` is the one
line the command prints on stderr before it exits ``EXIT_MISSING`` (3: neither a usage error, 2, nor
a failure of the run, 1). A command checks before it imports anything of its extra, so the line is
all the user sees: no traceback.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["EXIT_MISSING", "EXTRAS", "Extra", "missing", "missing_message"]

EXIT_MISSING = 3


@dataclass(frozen=True)
class Extra:
    """One extra: its name in ``pip install 'escaler[NAME]'`` and what its packages are for."""

    name: str
    what: str
    modules: tuple[str, ...]


EXTRAS: dict[str, Extra] = {
    "sloapi": Extra("sloapi", "the SLO API's dependencies", ("fastapi", "uvicorn")),
    "sim": Extra("sim", "the simulator's dependencies", ("scipy", "matplotlib")),
}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder refusing it; a module left half-imported
        return False


def missing(modules: Iterable[str]) -> list[str]:
    """The ``modules`` that cannot be imported, in their order (none is imported here)."""
    return [m for m in modules if not _importable(m)]


def missing_message(command: str, extra: str, absent: Iterable[str]) -> str:
    """``escaler slo-api: needs fastapi, uvicorn, the SLO API's dependencies: pip install
    'escaler[sloapi]'`` — one line, the fix last."""
    return (f"escaler {command}: needs {', '.join(absent)}, {EXTRAS[extra].what}: "
            f"pip install 'escaler[{extra}]'")
