"""Flag value parsers for the command line: each raises ``argparse.ArgumentTypeError`` with the
rule, so argparse reports ``argument --flag: <rule>`` and exits 2.

Durations use Go's ``time.ParseDuration`` syntax, as controller-runtime's flags do (``30s``,
``2m``, ``1h30m``, ``500ms``, ``0``), and also accept a plain number of seconds (``30``, ``0.5``).
Byte sizes are a whole number of bytes, optionally with a binary suffix as Kubernetes quantities
write them (``262144``, ``256Ki``, ``1Mi``).
"""

from __future__ import annotations

import argparse
import math
import re

from escaler.runtime.server import parse_bind_address
from escaler.scaling.endpoints import parse_host_patterns
from escaler.signals.netpolicy import IPNetwork, parse_networks

__all__ = ["bind_address", "byte_size", "duration_seconds", "endpoint_networks", "host_patterns",
           "non_negative_int", "port", "positive_int"]

_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_PLAIN_SECONDS = re.compile(r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$")


def duration_seconds(text: str) -> float:
    """``"30s"`` → 30.0, ``"1h30m"`` → 5400.0, ``"0"`` → 0.0; negative durations are refused."""
    value = text.strip()
    if _PLAIN_SECONDS.match(value):
        seconds = float(value)
    else:
        pos, seconds = 0, 0.0
        for m in _DURATION_PART.finditer(value):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
            pos = m.end()
        if pos != len(value) or not value:
            raise argparse.ArgumentTypeError(
                f"invalid duration {text!r}: use a number with a unit (30s, 2m, 1h30m, 500ms), or 0")
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: too large")
    return seconds


def _int(text: str, minimum: int, maximum: int | None = None) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise argparse.ArgumentTypeError(f"must be an integer {bound}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _int(text, 1)


def non_negative_int(text: str) -> int:
    return _int(text, 0)


_BYTE_UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
_BYTE_SIZE = re.compile(r"^([0-9]+)(Ki|Mi|Gi)?$")


def byte_size(text: str) -> int:
    """``"256Ki"`` → 262144, ``"1Mi"`` → 1048576, ``"4096"`` → 4096; at least 1 byte."""
    m = _BYTE_SIZE.match(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: use bytes, or a number with Ki, Mi or Gi "
                                         "(256Ki)")
    value = int(m.group(1)) * _BYTE_UNITS[m.group(2) or ""]
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, or 0 for *disabled*."""
    return _int(text, 0, 65535)


def bind_address(text: str) -> str:
    """``host:port``, ``:port``, ``[v6]:port``, or ``0`` to disable (controller-runtime's forms)."""
    try:
        parse_bind_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def host_patterns(text: str) -> tuple[str, ...]:
    """A comma list of host names, IPs or ``*.domain`` patterns (empty = every host)."""
    try:
        return parse_host_patterns(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def endpoint_networks(text: str) -> tuple[IPNetwork, ...]:
    """A comma list of CIDRs (``127.0.0.0/8,fd00::/8``; empty = none) for ``--allow-endpoint-networks``."""
    try:
        return parse_networks(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
