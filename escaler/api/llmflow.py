"""Flow sizing's inputs (docs/llmscaler.md, docs/design.md#the-llm-sizing-policy, docs/slo.md):
``FlowSizing``, and the LLMScaler's ``spec.flow`` (``metricProvider: Flow``), ``FlowProvider``.

Flow sizing (``escaler.scaling.flow``) sizes a fleet on the work flowing through it: prompt
tokens/s over one replica's prefill rate plus generated tokens/s over its decode rate, a waiting
backlog drained over a set time, a trend that only raises, a utilisation target trimmed by
queueing delay and burst headroom learned from latency misses. ``FlowSizing`` names its signals and
what one replica can do — everything but where the signals are read:

* ``engine`` — ``vllm``, ``sglang`` or ``tgi``: a preset writes the PromQL of every signal
  (``escaler.reconcilers.kit.flowpresets``), scoped to the target's pods by ``selector``;
  ``generic``: every signal is given in ``queries``. A preset's query is overridden per signal
  by the same ``queries`` field.
* ``selector`` — a PromQL label-matcher list (``model_name="llama-3-8b"``,
  ``namespace="x",pod=~"llama-.*"``) spliced into the presets' queries. It is tenant input put
  into a query language, so its grammar is strict (``SELECTOR_PATTERN``): ``name op "value"``
  pairs separated by commas, ``op`` one of ``= != =~ !~``, the value a double-quoted string
  without ``"``, ``\\``, ``{``, ``}``, ``,`` or control characters; label names starting with
  ``__`` (``__name__`` would swap the metric) and ``le`` (the presets' histogram buckets) are
  refused. Nothing else is accepted, so a selector can neither close the braces nor the string.
* ``capacity`` — one replica's prefill and decode throughput (tokens/s), both > 0.
* ``ttftSeconds`` / ``tpotSeconds`` — optional latency objectives: with them the latency
  signals are read (the TTFT p90 for the utilisation trim, the shares of requests over each
  objective for the burst headroom); without them there is no latency trim and no headroom
  growth.
* ``utilization`` (0.85), ``coldStartSeconds`` (120: the forecast horizon with one poll, and
  the down delay, twice it), ``rateWindowSeconds`` (60: the range of every ``rate()``).

Where the signals are read is the embedding's: ``FlowProvider`` (the LLMScaler's ``spec.flow``) adds
``endpoint`` and ``timeoutSeconds`` as ``prometheus`` has them (the same URL rule, and the manager's
``--allowed-endpoint-hosts`` and address policy at read time); an ``LLMSLORequirement``'s ``spec.flow``
is a ``FlowSizing``, read through the SLO decision engine's Prometheus as its other signals.

Rules (CEL and ``validate``, each naming its field). On ``FlowSizing``: a preset engine requires
``selector``, and ``generic`` refuses it (it would be ignored); ``generic`` requires
``queries.promptTokensRate`` and ``queries.generationTokensRate``; the selector's grammar as above.
The latency rules (``objective_rules``) are declared by the model that holds the objectives — the flow
itself for ``FlowProvider``, the requirement's spec for an ``LLMSLORequirement``, whose ``ttft`` and
``otps`` set them too: a latency query override needs its objective (``queries.ttft*`` needs
``ttftSeconds``, ``queries.tpot*`` ``tpotSeconds``); an objective on an engine without that preset
(``tgi`` has no TTFT histogram and its TPOT buckets are not round numbers; ``generic`` has none) needs
``queries.<ttft|tpot>MissShare``. ``FlowProvider``'s rules, in order: ``endpoint``'s URL rule, the
``FlowSizing`` rules, the latency rules.

This module imports only pydantic, the standard library and ``escaler.api``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import Field

from escaler.api.common import URL_PATTERN, KubeModel, url_rule
from escaler.api.rules import Rule, cel_matches

__all__ = [
    "DEFAULT_COLD_START_SECONDS",
    "DEFAULT_FLOW_UTILIZATION",
    "DEFAULT_PROVIDER_TIMEOUT_SECONDS",
    "DEFAULT_RATE_WINDOW_SECONDS",
    "FLOW_SIGNALS",
    "LATENCY_SIGNALS",
    "PRESET_ENGINES",
    "REQUIRED_SIGNALS",
    "SELECTOR_FORBIDDEN_NAMES_PATTERN",
    "SELECTOR_PATTERN",
    "FlowEngine",
    "FlowProvider",
    "FlowQueries",
    "FlowSizing",
    "ReplicaCapacity",
    "objective_rules",
    "selector_ok",
]

DEFAULT_FLOW_UTILIZATION = 0.85
DEFAULT_COLD_START_SECONDS = 120
DEFAULT_RATE_WINDOW_SECONDS = 60
# the timeout of one provider read, every LLMScaler provider's (escaler.api.llmscaler re-exports it)
DEFAULT_PROVIDER_TIMEOUT_SECONDS = 5
MAX_SELECTOR_LENGTH = 512


class FlowEngine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    GENERIC = "generic"


# the engines whose queries a preset writes
PRESET_ENGINES = (FlowEngine.VLLM, FlowEngine.SGLANG, FlowEngine.TGI)

# one label matcher: name, operator, a double-quoted value without quote, backslash, braces, comma
# or control characters (RE2 and Python read it alike; written for a CEL raw string)
_MATCHER = r'[a-zA-Z_][a-zA-Z0-9_]* *(=~|!~|!=|=) *"[^"\\{},\x00-\x1f\x7f]*"'
SELECTOR_PATTERN = rf"^ *{_MATCHER}( *, *{_MATCHER})* *$"
# label names a selector may not match on: __name__ and the other reserved ones, and le
SELECTOR_FORBIDDEN_NAMES_PATTERN = r'(^|,) *(__|le *[=!])'


def selector_ok(text: str) -> bool:
    """True when ``text`` is a selector the grammar accepts (see the module docstring)."""
    return (len(text) <= MAX_SELECTOR_LENGTH and cel_matches(SELECTOR_PATTERN, text)
            and not cel_matches(SELECTOR_FORBIDDEN_NAMES_PATTERN, text))


# the signals flow sizing reads, by their spec.flow.queries names, in reading order
FLOW_SIGNALS = (
    "promptTokensRate",
    "generationTokensRate",
    "waiting",
    "requestsRate",
    "ttftP90",
    "ttftMissShare",
    "ttftMissShareLong",
    "tpotMissShare",
    "tpotMissShareLong",
    "burstPromptTokensRate",
    "burstGenerationTokensRate",
)
# the signals without which there is no decision (generic must give them)
REQUIRED_SIGNALS = ("promptTokensRate", "generationTokensRate")
# objective (spec.flow field) → the signals read only with it
LATENCY_SIGNALS = {
    "ttftSeconds": ("ttftP90", "ttftMissShare", "ttftMissShareLong"),
    "tpotSeconds": ("tpotMissShare", "tpotMissShareLong"),
}


def _query(what: str) -> Any:
    return Field(default=None, min_length=1, max_length=4096,
                 description=f"PromQL instant query returning one number: {what}.")


class FlowQueries(KubeModel):
    """The PromQL of each signal: all of them for ``engine: generic``, or per-signal overrides of a
    preset. Each must return one number (a scalar or a one-series vector)."""

    prompt_tokens_rate: str | None = _query(
        "the fleet's prompt tokens per second (e.g. sum(rate(vllm:prompt_tokens_total{...}[60s])))")
    generation_tokens_rate: str | None = _query("the fleet's generated tokens per second")
    waiting: str | None = _query("requests waiting for a replica, over the fleet (the backlog)")
    requests_rate: str | None = _query(
        "requests completed per second over the fleet (the work per request: sizes the backlog, and "
        "the prompt's own prefill time in the TTFT)")
    ttft_p90: str | None = _query("the fleet's TTFT p90 in seconds (the queueing-delay trim)")
    ttft_miss_share: str | None = _query(
        "the share (0..1) of requests whose TTFT was above ttftSeconds over the rate window")
    ttft_miss_share_long: str | None = _query(
        "the same share over a long window (the presets: 900 s); headroom grows only when both exceed "
        "the miss budget")
    tpot_miss_share: str | None = _query(
        "the share (0..1) of requests (or tokens) whose TPOT was above tpotSeconds over the rate window")
    tpot_miss_share_long: str | None = _query("the same share over a long window (the presets: 900 s)")
    burst_prompt_tokens_rate: str | None = _query(
        "the largest prompt-token rate between two consecutive scrapes over the down delay (the burst "
        "floor; the presets: max_over_time(sum(irate(...[1m]))[<down delay>:15s])); read with "
        "burstGenerationTokensRate, no floor without both")
    burst_generation_tokens_rate: str | None = _query(
        "the largest generated-token rate between two consecutive scrapes over the down delay")


class ReplicaCapacity(KubeModel):
    """One replica's throughput with the GPU doing only that (from a benchmark of the engine and model
    on the replica's hardware)."""

    prefill_tokens_per_second: float = Field(
        gt=0, le=1e9, description="Prompt tokens one replica prefills per second.")
    decode_tokens_per_second: float = Field(
        gt=0, le=1e9, description="Tokens one replica decodes per second at its full batch.")


def _has_query(m: FlowSizing, signal: str) -> bool:
    return m.queries is not None and getattr(m.queries, _attr(signal)) is not None


def _attr(signal: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in signal)


_PRESETS_CEL = "['" + "', '".join(str(e) for e in PRESET_ENGINES) + "']"
# objective → the engines that preset its miss share
_SHARE_PRESETS = {"ttftSeconds": (FlowEngine.VLLM, FlowEngine.SGLANG),
                  "tpotSeconds": (FlowEngine.VLLM, FlowEngine.SGLANG)}
# objective → why tgi and generic need its miss share given
_SHARE_WHY = {"ttftSeconds": "tgi has no TTFT histogram",
              "tpotSeconds": "tgi's TPOT buckets are not round numbers"}


def _required_query(signal: str) -> Rule:
    return Rule(
        rule=f"self.engine != 'generic' || (has(self.queries) && has(self.queries.{signal}))",
        message=f"queries.{signal} is required with engine generic (no preset writes it)",
        check=lambda m: m.engine != FlowEngine.GENERIC or _has_query(m, signal),
        field_path=f".queries.{signal}",
        reason="FieldValueRequired",
    )


@dataclass(frozen=True)
class _Where:
    """Where the flow is, seen from the model a latency rule is declared on (``self``), and which of that
    model's fields also set an objective (see ``objective_rules``)."""

    # "" (``self`` is the flow) or the name of the field holding it (``self.<at>``)
    at: str
    # objective (``ttftSeconds``, ``tpotSeconds``) → the field of ``self`` that also sets it
    alternates: Mapping[str, str]

    @property
    def guard(self) -> str:
        return f"!has(self.{self.at}) || " if self.at else ""

    def cel(self, path: str) -> str:
        return f"self.{self.at}.{path}" if self.at else f"self.{path}"

    def name(self, path: str) -> str:
        return f"{self.at}.{path}" if self.at else path

    def objective_cel(self, objective: str) -> str:
        alt = self.alternates.get(objective)
        own = f"has({self.cel(objective)})"
        return f"{own} || has(self.{alt})" if alt else own

    def objective_words(self, objective: str) -> str:
        alt = self.alternates.get(objective)
        return f"a {objective[:4].upper()} objective ({self.name(objective)} or {alt})" if alt else objective

    def flow(self, m: Any) -> Any:
        return getattr(m, self.at) if self.at else m

    def objective_set(self, m: Any, objective: str) -> bool:
        alt = self.alternates.get(objective)
        return getattr(self.flow(m), _attr(objective)) is not None or (
            alt is not None and getattr(m, _attr(alt)) is not None)


def _needs_objective(w: _Where, objective: str, signal: str) -> Rule:
    query = w.name(f"queries.{signal}")
    return Rule(
        rule=f"{w.guard}!has({w.cel('queries')}) || !has({w.cel(f'queries.{signal}')}) || "
        f"{w.objective_cel(objective)}",
        message=f"{query} needs {w.objective_words(objective)}: the latency signals are read only with "
        "their objective",
        check=lambda m: (w.flow(m) is None or not _has_query(w.flow(m), signal)
                         or w.objective_set(m, objective)),
        field_path=f".{query}",
    )


def _share_for_objective(w: _Where, objective: str) -> Rule:
    signal = f"{objective[:4]}MissShare"
    share = w.name(f"queries.{signal}")
    engines = _SHARE_PRESETS[objective]
    cel_engines = "['" + "', '".join(str(e) for e in engines) + "']"
    objective_cel = w.objective_cel(objective)
    unset = f"!({objective_cel})" if objective in w.alternates else f"!{objective_cel}"
    return Rule(
        rule=f"{w.guard}{unset} || {w.cel('engine')} in {cel_engines} || "
        f"(has({w.cel('queries')}) && has({w.cel(f'queries.{signal}')}))",
        message=f"{w.objective_words(objective)} needs {share} with engine tgi or generic (no preset reads "
        f"it: {_SHARE_WHY[objective]})",
        check=lambda m: (w.flow(m) is None or not w.objective_set(m, objective)
                         or w.flow(m).engine in engines or _has_query(w.flow(m), signal)),
        field_path=f".{share}",
        reason="FieldValueRequired",
    )


def objective_rules(at: str = "", alternates: Mapping[str, str] | None = None) -> tuple[Rule, ...]:
    """The latency rules of a flow (see the module docstring), declared on the model that holds the
    objectives: the flow itself (``at=""``: ``FlowProvider``), or the model whose field ``at`` is the
    flow (``LLMSLORequirementSpec``, ``at="flow"``), where ``alternates`` names, per objective, a field of
    that model that sets it too (``{"ttftSeconds": "ttft"}``). A query override of a latency signal
    needs its objective; an objective with ``tgi`` or ``generic`` needs its miss share given."""
    w = _Where(at, dict(alternates or {}))
    return (
        *(_needs_objective(w, o, s) for o, signals in LATENCY_SIGNALS.items() for s in signals),
        *(_share_for_objective(w, o) for o in LATENCY_SIGNALS),
    )


class FlowSizing(KubeModel):
    """Flow sizing's inputs: the engine's signals, one replica's capacity, the objectives (where the
    signals are read from is the embedding's: ``FlowProvider`` adds an endpoint)."""

    # the rules on the signals; the latency rules (objective_rules) are declared by the model holding
    # the objectives
    RULES = (
        Rule(
            rule=f"!(self.engine in {_PRESETS_CEL}) || has(self.selector)",
            message="selector is required with a preset engine (vllm, sglang, tgi): without it the "
            "presets would sum every server Prometheus holds",
            check=lambda m: m.engine not in PRESET_ENGINES or m.selector is not None,
            field_path=".selector",
            reason="FieldValueRequired",
        ),
        Rule(
            rule="self.engine != 'generic' || !has(self.selector)",
            message="selector is not used with engine generic (its queries are given whole): remove it",
            check=lambda m: m.engine != FlowEngine.GENERIC or m.selector is None,
            field_path=".selector",
            reason="FieldValueForbidden",
        ),
        Rule(
            rule=f"!has(self.selector) || (self.selector.matches(r'{SELECTOR_PATTERN}') && "
            f"!self.selector.matches(r'{SELECTOR_FORBIDDEN_NAMES_PATTERN}'))",
            message='selector must be a PromQL label-matcher list: name op "value" pairs separated by '
            "commas, op one of = != =~ !~, values without \", \\, {, }, commas or control characters, "
            "and no label names starting with __ or named le",
            check=lambda m: m.selector is None or selector_ok(m.selector),
            field_path=".selector",
        ),
        *(_required_query(s) for s in REQUIRED_SIGNALS),
    )

    engine: FlowEngine = Field(
        description="vllm, sglang or tgi: a preset writes the PromQL of every signal, scoped by "
        "selector (docs/llmscaler.md lists the queries); generic: every signal is given in queries.",
    )
    selector: str | None = Field(
        default=None,
        max_length=MAX_SELECTOR_LENGTH,
        description='PromQL label matchers scoping a preset\'s queries to the target\'s pods, e.g. '
        'model_name="llama-3-8b" or namespace="team",pod=~"llama-.*": name op "value" pairs separated '
        "by commas (op = != =~ !~; values without \", \\, {, }, commas or control characters; no label "
        "names starting with __ or named le). Required with a preset, refused with generic.",
    )
    queries: FlowQueries | None = Field(
        default=None,
        description="The PromQL of the signals: required (promptTokensRate, generationTokensRate at "
        "least) with engine generic; with a preset, each one given replaces the preset's query.",
    )
    capacity: ReplicaCapacity = Field(description="One replica's throughput.")
    ttft_seconds: float | None = Field(
        default=None,
        gt=0,
        le=600,
        description="TTFT objective in seconds. With it the TTFT signals are read: the TTFT p90 less the "
        "prompt's prefill time trims the utilisation target (down when above half the objective), and "
        "the share of requests over it grows the burst headroom. Without it, neither.",
    )
    tpot_seconds: float | None = Field(
        default=None,
        gt=0,
        le=60,
        description="TPOT objective in seconds. With it the share of output over it grows the burst "
        "headroom too.",
    )
    utilization: float = Field(
        default=DEFAULT_FLOW_UTILIZATION,
        gt=0,
        le=1,
        description="The utilisation target a replica is sized for, in (0, 1]; the queueing delay trims it "
        "slowly between 0.5 and 0.92 (or this value when outside that range).",
    )
    cold_start_seconds: int = Field(
        default=DEFAULT_COLD_START_SECONDS,
        ge=1,
        le=3600,
        description="Seconds from ordering a replica to its serving: the load is forecast this plus one "
        "poll ahead (the forecast only raises), and the flow lowers its count only after twice this "
        "(the scale-down stabilization window applies after it).",
    )
    rate_window_seconds: int = Field(
        default=DEFAULT_RATE_WINDOW_SECONDS,
        ge=10,
        le=3600,
        description="The range of the presets' rate() (at least twice the scrape interval).",
    )


class FlowProvider(FlowSizing):
    """Flow sizing's inputs: the engine's signals, one replica's capacity, the objectives."""

    RULES = (url_rule("endpoint", "endpoint"), *FlowSizing.RULES, *objective_rules())

    endpoint: str = Field(
        max_length=2048,
        pattern=URL_PATTERN,
        description="Base URL of a Prometheus-compatible query API, e.g. http://prometheus:9090.",
    )
    timeout_seconds: int = Field(
        default=DEFAULT_PROVIDER_TIMEOUT_SECONDS,
        ge=1,
        le=300,
        description="Timeout of one query, in seconds.",
    )
