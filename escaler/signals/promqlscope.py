"""Tenant PromQL confined to the tenant's namespace (issue 27 item 4).

One manager serves every namespace, and the PromQL a namespace user writes (an ElasticScaler
``ExternalServer`` query, an LLMScaler's Prometheus metrics or flow signals, an SLO requirement's
queries, an RSG's ranking query, a pod-deletion-cost query) runs against a Prometheus the manager
can reach — often the cluster's shared one, which holds every namespace's series. Without a bound,
``sum(x{namespace="someone-else"})`` reads another tenant's numbers into status, ``/decisions`` and
``/metrics``. So, by default, a query is **refused** unless every series selector in it carries an
equality matcher on the namespace label naming the object's own namespace:

* ``PromQLScope(label="namespace", unconfined_hosts=())`` — ``refusal(query, namespace, endpoint)``
  returns None when the query may run, else the rule it breaks, in words (the caller prefixes the
  field path). The query is parsed with a real PromQL parser (``promql_parser``, the Rust
  ``promql-parser`` crate's binding); every ``VectorSelector`` — in a range, a subquery, a function's
  arguments, either side of a binary operator, ``absent(...)`` included — must hold
  ``<label>="<namespace>"``; a selector with ``or`` groups (Prometheus 3) needs it in each group. A
  regex or negative matcher on the label does not count (``=~"team|other"`` is two namespaces). A
  query the parser refuses is refused (the manager cannot tell what it reads).
* Refusal, not injection: a rewritten query would be a query the tenant did not write and cannot
  see; a refusal names what to add, and the tenant's query runs as written.
* ``label=""`` turns confinement off (``--promql-namespace-label=""``: a single-tenant cluster). A
  host in ``unconfined_hosts`` (``--promql-unconfined-hosts``, patterns as
  ``--allowed-endpoint-hosts``: ``prom.team-a.svc``, ``*.tenant.example``) is a Prometheus that
  holds one tenant's series only (a tenant's own): its queries run unchecked.
* The number literal and string literal queries (``vector(1)``, ``1``) read no series: allowed.

Pure apart from the parser; a verdict is remembered per (query, label) in the namespace's share of
one bounded cache (``escaler.tenantcache.TenantLRU``: ``_CACHED_VERDICTS`` weight in all, a verdict
weighing 1 plus 1 per KiB of its query; each namespace keeps at least ``_VERDICTS_FLOOR``), so a
fleet polling the same queries parses each once, and a namespace writing thousands of distinct
queries evicts only its own verdicts. A query longer than ``_MAX_QUERY_CHARS`` is refused without
being kept.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import promql_parser

from escaler.scaling.endpoints import check_endpoint_url, host_allowed, parse_host_patterns
from escaler.tenantcache import TenantLRU

__all__ = ["DEFAULT_NAMESPACE_LABEL", "DEFAULT_SCOPE", "PromQLScope", "confinement_error"]

DEFAULT_NAMESPACE_LABEL = "namespace"
# longest parser message quoted in a refusal (the parser echoes parts of the query, which is the
# tenant's own text, but a message must stay short)
_MAX_PARSE_ERROR = 200
# nesting deeper than this is refused before the parser sees it: the Rust parser recurses on the
# native stack and a query nested ~20,000 deep kills the process (measured); the CRDs bound a query at
# 4,096 characters, but an object stored before that rule, or a flow query built from a selector,
# must not reach it either. The walk below is recursive too.
_MAX_DEPTH = 256
# longest query parsed (a flow preset's query repeats its selector a few times)
_MAX_QUERY_CHARS = 64 * 1024
# verdicts remembered (query, namespace, label): a fleet polls the same queries every interval, so a
# poll costs a dictionary look-up, not a parse; bounded by weight (1, plus 1 per KiB of the query:
# ~4 MiB of query text at most), each namespace held to its share, least recently used out
_CACHED_VERDICTS = 4096
# the share a namespace keeps however many namespaces are active (64 queries of up to 1 KiB)
_VERDICTS_FLOOR = 64


def _verdict_weight(entry: tuple[int, str | None]) -> int:
    return entry[0]


# namespace → (query, label) → (weight, verdict)
_VERDICTS: TenantLRU[tuple[str, str], tuple[int, str | None]] = TenantLRU(
    _CACHED_VERDICTS, _VERDICTS_FLOOR, _verdict_weight)


@dataclass(frozen=True)
class PromQLScope:
    """What tenant PromQL may read; see the module docstring."""

    # the series label that carries the namespace; "" = confinement off
    label: str = DEFAULT_NAMESPACE_LABEL
    # host patterns whose Prometheus holds one tenant's series only (checked as --allowed-endpoint-hosts)
    unconfined_hosts: tuple[str, ...] = ()

    @classmethod
    def from_flags(cls, label: str, unconfined_hosts: Sequence[str]) -> PromQLScope:
        """``ValueError`` naming the flag for a bad host pattern or label."""
        if label and not _label_ok(label):
            raise ValueError(f"--promql-namespace-label {label!r}: must be a Prometheus label name "
                             "([a-zA-Z_][a-zA-Z0-9_]*), or empty to turn confinement off")
        try:
            patterns = parse_host_patterns(",".join(unconfined_hosts))
        except ValueError as err:
            raise ValueError(f"--promql-unconfined-hosts: {err}") from None
        return cls(label=label, unconfined_hosts=tuple(patterns))

    @property
    def confined(self) -> bool:
        return bool(self.label)

    def refusal(self, query: str, namespace: str, endpoint: str) -> str | None:
        """None when ``query`` (sent to ``endpoint`` for an object of ``namespace``) may run; else
        the rule it breaks."""
        if not self.confined:
            return None
        if self.unconfined_hosts:
            try:
                host = check_endpoint_url(endpoint, base=True)
            except ValueError:
                host = ""
            if host and host_allowed(host, self.unconfined_hosts):
                return None
        return confinement_error(query, namespace, self.label)


# what the manager's setups confine to unless told otherwise
DEFAULT_SCOPE = PromQLScope()


def _label_ok(label: str) -> bool:
    return (label[0].isalpha() or label[0] == "_") and all(c.isalnum() or c == "_" for c in label) \
        and label.isascii()


def confinement_error(query: str, namespace: str, label: str = DEFAULT_NAMESPACE_LABEL) -> str | None:
    """None when every series selector of ``query`` holds ``label="namespace"``; else why not
    (remembered in ``namespace``'s share of the verdict cache)."""
    kept = _VERDICTS.get(namespace, (query, label))  # (weight, verdict): a verdict None is kept too
    if kept is not None:
        return kept[1]
    verdict = _checked(query, namespace, label)
    if len(query) <= _MAX_QUERY_CHARS:
        _VERDICTS.put(namespace, (query, label), (1 + len(query) // 1024, verdict))
    return verdict


def _checked(query: str, namespace: str, label: str) -> str | None:
    """``confinement_error`` computed (uncached)."""
    rule = (f'every series selector must hold {label}="{namespace}" (PromQL of a namespace reads only '
            "that namespace's series)")
    if len(query) > _MAX_QUERY_CHARS:
        return f"is longer than {_MAX_QUERY_CHARS} characters; {rule}"
    if _nesting(query) > _MAX_DEPTH:
        return f"nests deeper than {_MAX_DEPTH} levels; {rule}"
    try:
        expr = promql_parser.parse(query)
    except Exception as err:  # the parser raises ValueError on syntax; anything else is refusal too
        text = " ".join(str(err).split())[:_MAX_PARSE_ERROR]
        return f"is not PromQL the manager can check ({text}); {rule}"
    for selector in _selectors(expr, 0):
        if selector is None:
            return f"nests deeper than {_MAX_DEPTH} levels; {rule}"
        if not _confined(selector, namespace, label):
            return f"{rule}; {_shown(selector)} does not"
    return None


def _nesting(query: str) -> int:
    """The deepest bracket nesting of ``query`` (quotes not skipped: a bracket in a label value only
    counts against the bound, never for it)."""
    depth = deepest = 0
    for c in query:
        if c in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in ")]}":
            depth -= 1
    return deepest


def _selectors(node: Any, depth: int) -> Iterator[Any]:
    """Every VectorSelector under ``node`` (None once the walk is deeper than ``_MAX_DEPTH``)."""
    if depth > _MAX_DEPTH:
        yield None
        return
    if isinstance(node, promql_parser.VectorSelector):
        yield node
    elif isinstance(node, promql_parser.MatrixSelector):
        yield node.vector_selector
    elif isinstance(node, promql_parser.BinaryExpr):
        yield from _selectors(node.lhs, depth + 1)
        yield from _selectors(node.rhs, depth + 1)
    elif isinstance(node, promql_parser.AggregateExpr):
        yield from _selectors(node.expr, depth + 1)
        if node.param is not None:
            yield from _selectors(node.param, depth + 1)
    elif isinstance(node, promql_parser.Call):
        for arg in node.args:
            yield from _selectors(arg, depth + 1)
    elif isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
        yield from _selectors(node.expr, depth + 1)
    # NumberLiteral, StringLiteral: no series


def _confined(selector: Any, namespace: str, label: str) -> bool:
    groups = selector.matchers.or_matchers or [selector.matchers.matchers]
    return all(any(m.name == label and m.op == promql_parser.MatchOp.Equal and m.value == namespace
                   for m in group) for group in groups)


_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}


def _shown(selector: Any) -> str:
    """A selector as the tenant wrote it, roughly (name and matchers), capped."""
    groups = selector.matchers.or_matchers or [selector.matchers.matchers]
    inner = " or ".join(", ".join(f'{m.name}{_OPS.get(str(m.op).rsplit(".", 1)[-1], "?")}"{m.value}"'
                                  for m in group) for group in groups)
    text = (selector.name or "") + (f"{{{inner}}}" if inner else "")
    return text if len(text) <= _MAX_PARSE_ERROR else text[:_MAX_PARSE_ERROR] + "…"
