"""Label selectors in their string form (``labels.Parse`` of apimachinery, the subset Kubernetes uses).

``parse_selector(text) -> Selector``; ``Selector.matches(labels) -> bool``. Grammar (comma-separated
requirements, all must hold): ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``
(exists), ``!k`` (does not exist) — exactly what ``escaler.kube.scale.selector_string`` and the
``/scale`` subresource's ``status.selector`` produce. An empty string selects everything (callers that
must not select a whole namespace check for it themselves). A malformed selector raises
``ValueError`` naming the offending term. Pure, thread-safe (a ``Selector`` is immutable).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Requirement", "Selector", "parse_selector"]

_SET_RE = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*$")


@dataclass(frozen=True)
class Requirement:
    """One term: ``key`` ``op`` ``values`` (op: in, notin, exists, !exists)."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return self.key in labels and labels[self.key] in self.values
        # notin: an absent key matches, as in apimachinery
        return self.key not in labels or labels[self.key] not in self.values


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, object] | None) -> bool:
        plain = {str(k): str(v) for k, v in (labels or {}).items()}
        return all(r.matches(plain) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t for t in terms if t.strip()]


def _term(term: str) -> Requirement:
    if m := _SET_RE.match(term):
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        return Requirement(m.group(1), m.group(2), values)
    if m := _EQ_RE.match(term):
        return Requirement(m.group(1), "notin" if m.group(2) == "!=" else "in", frozenset({m.group(3)}))
    if m := _EXISTS_RE.match(term):
        return Requirement(m.group(2), "!exists" if m.group(1) else "exists")
    raise ValueError(f"label selector: cannot parse term {term.strip()!r}")


def parse_selector(text: str) -> Selector:
    """Parse a label selector string; see the module docstring."""
    return Selector(tuple(_term(t) for t in _split(text)))
