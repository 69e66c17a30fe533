"""Kubernetes quantities (``resource.Quantity``) as floats: ``parse_quantity("250m") == 0.25``.

The one quantity parser of escaler: spec fields (``escaler.api``), the HPA translation and the
metric collectors (``escaler.signals``) all use it.

The grammar is the one ``k8s.io/apimachinery/pkg/api/resource.ParseQuantity`` accepts::

    quantity  ::= [+-] number [suffix]
    number    ::= digits | digits "." [digits] | "." digits
    suffix    ::= binarySI | decimalSI | decimalExponent
    binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei                 (powers of 1024)
    decimalSI ::= n | u | m | k | M | G | T | P | E           (10^-9 ... 10^18)
    decimalExponent ::= ("e" | "E") [+-] digits               (an *integer* exponent)

So ``"1.5"``, ``"2e3"``, ``"123456Ki"``, ``"100Mi"``, ``"12345678n"`` (metrics-server's CPU) parse;
``"1K"`` (capital K), ``"1e"``, ``"1e1.5"``, ``" 1"`` and ``"1.2.3"`` do not. (The CRD pattern that
controller-gen emits also admits a fractional exponent; the apimachinery parser, and this one,
refuse it.) Arithmetic is exact (``Decimal``) up to the final conversion to ``float``; a value
that does not fit a float (``"1e400"``) is refused rather than returned as infinity.

``int`` and finite ``float`` inputs are returned as floats (JSON may carry a bare number where a
quantity is expected); ``bool`` is refused. Pure: no I/O.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

__all__ = ["parse_quantity"]

_QUANTITY_RE = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_SCALE: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
# exponents beyond this cannot give a finite float (and would make Decimal work hard for nothing)
_MAX_EXPONENT = 400


def parse_quantity(q: object) -> float:
    """The value of a quantity as a float; ``ValueError`` naming the input when it is not one."""
    if isinstance(q, bool):
        raise ValueError(f"{q!r} is not a quantity")
    if isinstance(q, int | float):
        value = float(q)
        if not math.isfinite(value):
            raise ValueError(f"{q!r} is not a finite quantity")
        return value
    if not isinstance(q, str):
        raise ValueError(f"{q!r} is not a quantity (want a string such as 250m, 1.5, 2Gi or 1e3)")
    m = _QUANTITY_RE.fullmatch(q)
    if m is None:
        raise ValueError(f"{q!r} is not a Kubernetes quantity (e.g. 250m, 1.5, 2Gi, 1e3)")
    exponent = m.group("exponent")
    try:
        number = Decimal(m.group("number"))
        if exponent is not None:
            if abs(int(exponent)) > _MAX_EXPONENT:
                raise ValueError(f"{q!r}: exponent out of range")
            scaled = number.scaleb(int(exponent))
        else:
            scaled = number * _SCALE[m.group("suffix") or ""]
        value = float(scaled)
    except (InvalidOperation, OverflowError) as err:  # pragma: no cover - excluded by the pattern
        raise ValueError(f"{q!r} is not a Kubernetes quantity") from err
    if not math.isfinite(value):
        raise ValueError(f"{q!r} is out of range")
    return value
