"""Strict parsing of the numbers users write as strings (annotations, ``algorithmConfig``).

Python's ``int()``/``float()`` accept far more than a user means: ``"1_000"``, ``" 5 "``,
``"nan"``, ``"inf"``, ``"0x10"`` (with base 0). These parsers accept only plain decimal
notation — ``"60"``, ``"2.5"``, ``".5"``, ``"1e3"`` — so that a typo is reported rather than
read as something surprising. Errors are ``ValueError`` with a short rule the caller prefixes
with the field or key it came from.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_bool", "parse_int", "parse_number"]

_INT_RE = re.compile(r"^[+]?[0-9]+$")
_NUMBER_RE = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
# an integer string longer than this is refused before int() (Python caps int parsing at 4300
# digits anyway; nothing we parse is meaningfully above 10**18)
_MAX_INT_DIGITS = 18


def parse_int(text: str) -> int:
    """A non-negative decimal integer (``"0"``, ``"60"``, ``"+3"``)."""
    if not isinstance(text, str) or not _INT_RE.match(text) or len(text.lstrip("+")) > _MAX_INT_DIGITS:
        raise ValueError("must be a non-negative decimal integer")
    return int(text)


def parse_number(text: str) -> float:
    """A finite decimal number (``"2"``, ``"0.1"``, ``"1e3"``, ``"-1.5"``)."""
    if not isinstance(text, str) or len(text) > 64 or not _NUMBER_RE.match(text):
        raise ValueError("must be a decimal number")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def parse_bool(text: str) -> bool:
    """``"true"`` or ``"false"`` — exactly, as Kubernetes annotations conventionally spell them."""
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError('must be "true" or "false"')
