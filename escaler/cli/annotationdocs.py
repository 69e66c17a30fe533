"""The scaler annotations' reference page (``docs/reference/annotations.md``), generated from the code.

``render_annotations() -> str`` renders ``escaler.scaling.annotations.ANNOTATIONS`` — the table the
annotation parser itself reads — so the page cannot drift from the parser: for every key its value
type and range, its default (and the StateTrigger default where that differs), what it does, the
kinds and triggers that read it (``READERS``) and what an invalid value does, with the reconciler
and with the admission webhook (the rule of ``escaler.webhook.checks``: a warning and the default
where the reconciler falls back, a denial for what can never work). The example warning is the
parser's own message for a bad value, not a copy of it.

``escaler docs`` writes it beside the per-kind pages (``escaler.api.docgen.render_reference``), so
one command regenerates the whole reference and ``tests/unit/test_reference_docs.py`` keeps it
current. Pure and deterministic: table order.
"""

from __future__ import annotations

from escaler.api.docgen import HEADER, markdown_table
from escaler.scaling.annotations import (
    ANNOTATIONS,
    BEHAVIOR_FAMILY,
    DEFAULTS,
    METRICS_FAMILY,
    MISSING_DATA_POLICY,
    PAUSE_FAMILY,
    POLICY_PREFIXES,
    READERS,
    STATE_TRIGGER_DEFAULTS,
    AnnotationSpec,
    parse_annotations,
    show_default,
)

__all__ = ["EVENT_REASON", "render_annotations"]

# the reconciler's Warning event for an unusable annotation (escaler.reconcilers.kit.report)
EVENT_REASON = "InvalidAnnotation"
# the kinds that read no annotation of escaler (the webhook refuses a bad pause value there)
NON_READERS = ("Tidal", "ResourceScalingGroup", "LLMSLORequirement", "JobSLORequirement")
# family → its section title, in page order
_FAMILY_TITLES = {
    PAUSE_FAMILY: "Pause (`elasticscaler.io/paused`, `elasticscaler.io/paused-replicas`)",
    METRICS_FAMILY: "Metrics (`elasticscaler.io/metrics.*`)",
    BEHAVIOR_FAMILY: "Behavior (`elasticscaler.io/behavior.*`)",
}


def _default(spec: AnnotationSpec) -> str:
    value = getattr(DEFAULTS, spec.field)
    text = spec.unset if value is None else f"`{show_default(value)}`"
    state = getattr(STATE_TRIGGER_DEFAULTS, spec.field)
    if state != value:
        text += f" (`{show_default(state)}` for a StateTrigger)"
    return text


def _read_by(spec: AnnotationSpec) -> str:
    readers = READERS[spec.family]
    return ", ".join(readers.kinds) + ": " + readers.where


def _on_invalid(spec: AnnotationSpec) -> str:
    fallback = "ignored (unlimited)" if spec.unset == "unlimited" else (
        "ignored (not pinned)" if spec.unset else "the default is used")
    text = (f"{fallback}; the reconciler emits a Warning event `{EVENT_REASON}` naming the key, the rule, "
            "the value and the default; the webhook accepts the object with the same words as a warning")
    if spec.family == METRICS_FAMILY:
        text += "; with `scalingAlgorithm: HPA` the webhook denies the key whatever its value"
    return text


def _summary() -> str:
    rows = [(f"[`{a.key}`](#{_anchor(a.key)})", a.value.text, _default(a), ", ".join(READERS[a.family].kinds))
            for a in ANNOTATIONS]
    return markdown_table(("annotation", "value", "default", "read by"), rows)


def _anchor(key: str) -> str:
    """GitHub's heading anchor of ``### `key` ``: lower case, only letters, digits, ``-`` and ``_``."""
    return "".join(c for c in key.lower() if c.isalnum() or c in "-_")


def _section(spec: AnnotationSpec) -> str:
    rows = [
        ("value", spec.value.text),
        ("default", _default(spec)),
        ("read by", _read_by(spec)),
        ("invalid value", _on_invalid(spec)),
    ]
    return f"### `{spec.key}`\n\n{spec.help}\n\n{markdown_table(('', ''), rows)}"


def _families() -> str:
    parts = []
    for family, title in _FAMILY_TITLES.items():
        sections = "\n".join(_section(a) for a in ANNOTATIONS if a.family == family)
        parts.append(f"## {title}\n\n{sections}")
    return "\n".join(parts)


def _example() -> str:
    _, problems = parse_annotations({MISSING_DATA_POLICY: "bogus"})
    return problems[0].fallback_message()


def render_annotations() -> str:
    """The page (see the module docstring)."""
    prefixes = " or ".join(f"`{p}`" for p in POLICY_PREFIXES)
    return (
        f"{HEADER}\n# Annotations\n\n"
        "escaler reads a few annotations on its scaler objects: the pause annotations "
        "([Advisory mode and pausing](../concepts.md#conditions-and-health)) and the "
        "metric-window and behavior policies of an ElasticScaler. Every value is a string, "
        "numbers in plain decimal (`\"60\"`, `\"2.5\"`; not `\" 60\"`, `\"6_0\"`, `\"nan\"`). This page is "
        "generated from `escaler/scaling/annotations.py` (`ANNOTATIONS`), the table the parser reads.\n\n"
        f"{_summary()}\n"
        "## An invalid value\n\n"
        "As in seed 003, an invalid value never stops a scaler: the reconciler uses the default instead "
        f"and says so once, with a Warning event `{EVENT_REASON}` on the object (`kubectl describe`, "
        "`kubectl events`), while the value lasts. With the admission webhook installed "
        "(`manifests/components/webhook`) the object is accepted and `kubectl apply` prints the same "
        "words as a warning, for example:\n\n"
        f"```\nWarning: {_example()}\n```\n\n"
        "The webhook denies (the create or update fails, naming `metadata.annotations[<key>]` and the "
        "rule) only what no default makes work:\n\n"
        "* any `elasticscaler.io/metrics.*` annotation on an ElasticScaler with "
        "`scalingAlgorithm: HPA`: the companion HPA collects and aggregates metrics itself and would "
        "ignore it (the behavior annotations are applied to it);\n"
        f"* an invalid pause annotation on a kind that never reads it ({', '.join(NON_READERS)}): "
        "nothing would fall back from it or report it;\n"
        "* an annotation value that is not a string.\n\n"
        f"A key under {prefixes} on an ElasticScaler that is not listed here is a typo: the reconciler "
        "ignores it with a "
        f"Warning event `{EVENT_REASON}` (naming the closest key) and the webhook warns the same way.\n\n"
        f"{_families()}"
    )
