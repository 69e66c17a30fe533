"""The demo's live view and summary: what the scalers say, read from the API server.

Contract:

* ``read_rows(api, namespace)`` lists the namespace's ElasticScalers, Tidals,
  ResourceScalingGroups, LLMScalers and Deployments (five LISTs through one official-client
  ``ApiClient``) and returns one ``RowState`` per line of ``objects.ROWS``: desired and current
  replicas, ready pods (groups for an RSG), and a state word with the condition reason that
  decides it, after the health rule of docs/concepts.md#conditions-and-health (*failing* when AbleToScale,
  ScalingActive or Validated is False — or Ready for a Tidal or an RSG, except an RSG's groups still starting
  —; *waiting* on a guard or stabilization reason, or ``GroupsNotReady``; else *ok*). An object not there yet
  reads as ``pending``.
* ``render_block(elapsed, load, speedup, rows)`` is one refresh of the live view as plain lines
  (no escape codes: the caller decides whether to redraw in place).
* ``Tracker`` folds the refreshes into the summary: per line, the lowest and highest current
  replicas seen, the number of scale events (a new ``status.lastScaleTime`` for the scalers, a
  change of the desired count for the Tidal and of the group count for the RSG), the distinct
  values seen, and the last state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from .load import Load
from .objects import ES_API, LLM_API, ROWS, RSG_API, Row

WAITING_REASONS = frozenset({"RolloutInProgress", "ScaleDownSettling", "DeferralTimedOut",
                             "InsufficientCapacity", "ScaleDownStabilized", "Paused", "GroupsNotReady"})


@dataclass(frozen=True)
class RowState:
    row: Row
    desired: int | None
    current: int | None
    ready: int | None
    state: str
    target: str
    # changes when the scaler scales (see the module docstring); None before the first
    scale_key: Any = None


def _conds(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def scaler_state(obj: dict[str, Any] | None) -> str:
    conds = _conds(obj)
    if not conds:
        return "pending"
    for t in ("Validated", "ScalingActive", "AbleToScale"):
        c = conds.get(t)
        if c and c.get("status") == "False":
            return f"failing: {t}=False/{c.get('reason')}"
    able = (conds.get("AbleToScale") or {}).get("reason") or "?"
    return f"{'waiting' if able in WAITING_REASONS else 'ok'}: {able}"


def ready_state(obj: dict[str, Any] | None, extra: str = "") -> str:
    c = _conds(obj).get("Ready")
    if not c:
        return "pending"
    if c.get("status") != "True":
        # an RSG's groups on their way to Ready (pods starting) are not a failure
        word = "waiting" if c.get("reason") in WAITING_REASONS else "failing"
        return f"{word}: Ready=False/{c.get('reason')}"
    return f"ok: {c.get('reason')}{extra}"


def _by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in items}


def _list(custom: k8s.CustomObjectsApi, api_version: str, plural: str, ns: str) -> dict[str, dict[str, Any]]:
    group, version = api_version.split("/")
    out = custom.list_namespaced_custom_object(group, version, ns, plural, _request_timeout=5)
    return _by_name(out.get("items") or [])


def read_rows(api: k8s.ApiClient, namespace: str) -> list[RowState]:
    custom = k8s.CustomObjectsApi(api)
    es = _list(custom, ES_API, "elasticscalers", namespace)
    tidals = _list(custom, "tidal.io/v1alpha1", "tidals", namespace)
    rsgs = _list(custom, RSG_API, "resourcescalinggroups", namespace)
    llms = _list(custom, LLM_API, "llmscalers", namespace)
    deps = {d.metadata.name: d for d in
            k8s.AppsV1Api(api).list_namespaced_deployment(namespace, _request_timeout=5).items}

    def dep_ready(name: str) -> int | None:
        d = deps.get(name)
        return None if d is None else int((d.status.ready_replicas if d.status else 0) or 0)

    def dep_replicas(name: str) -> int | None:
        d = deps.get(name)
        return None if d is None else int(d.spec.replicas or 0)

    out = []
    for row in ROWS:
        if row.kind in ("elasticscaler", "llmscaler"):
            obj = (es if row.kind == "elasticscaler" else llms).get(row.name)
            st = (obj or {}).get("status") or {}
            ref = ((obj or {}).get("spec") or {}).get("targetRef") or _ref_of(row)
            if ref.get("kind") == "ResourceScalingGroup":
                rsg_st = (rsgs.get(ref["name"]) or {}).get("status") or {}
                ready, now = rsg_st.get("readyReplicas"), rsg_st.get("replicas")
            else:
                dep = ref.get("name", "")
                if ref.get("kind") == "Tidal":
                    dep = (((tidals.get(ref["name"]) or {}).get("spec") or {}).get("targetRef") or {}).get(
                        "name", "")
                ready, now = dep_ready(dep), dep_replicas(dep)
            # before its first status, a scaler's "current" is what its target has
            current = st.get("currentReplicas", now)
            out.append(RowState(row, st.get("desiredReplicas"), current, ready,
                                scaler_state(obj), row.target, st.get("lastScaleTime")))
        elif row.kind == "tidal":
            obj = tidals.get(row.name)
            st = (obj or {}).get("status") or {}
            target = ((obj or {}).get("spec") or {}).get("targetRef", {}).get("name", "")
            rules = ",".join(st.get("activeRules") or []) or "default"
            desired = st.get("desiredReplicas")
            out.append(RowState(row, desired, dep_replicas(target), dep_ready(target),
                                ready_state(obj, f" [{rules}]"), row.target,
                                None if desired is None else (desired, rules)))
        else:
            obj = rsgs.get(row.name)
            spec, st = (obj or {}).get("spec") or {}, (obj or {}).get("status") or {}
            members = " ".join(f"{m['name']}={dep_replicas(m['targetRef']['name'])}"
                               for m in spec.get("members") or [])
            out.append(RowState(row, spec.get("replicas"), st.get("replicas"), st.get("readyReplicas"),
                                ready_state(obj), f"groups of {members}" if members else row.target,
                                spec.get("replicas")))
    return out


def _ref_of(row: Row) -> dict[str, str]:
    """The target a line shows (``deploy/x`` or ``rsg/x``), as a targetRef, for a scaler not
    created yet."""
    short, _, name = row.target.partition(" ")[0].partition("/")
    return {"kind": "ResourceScalingGroup" if short == "rsg" else "Deployment", "name": name}


def _n(v: int | None) -> str:
    return "-" if v is None else str(v)


def fmt_clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def render_block(elapsed: float, load: Load, speedup: float, rows: list[RowState]) -> list[str]:
    head = (f"t+{elapsed:4.0f}s  trace {fmt_clock(load.trace_s)} ({speedup:.0f}x)  "
            f"load {load.rate:4.1f} req/s, {load.in_flight:4.1f} in flight, "
            f"{load.prompt_tps / 1000:4.1f}k prompt tok/s, {load.total_tps / 1000:4.1f}k tok/s")
    lines = [head, f"  {'SCALER':<24} {'TARGET':<32} {'DESIRED':>7} {'CURRENT':>7} {'READY':>5}  STATE"]
    for r in rows:
        lines.append(f"  {r.row.label:<24} {r.target:<32} {_n(r.desired):>7} {_n(r.current):>7} "
                     f"{_n(r.ready):>5}  {r.state}")
    return lines


@dataclass
class Seen:
    """What one line showed over the run."""

    # current replicas seen, in order of first appearance
    values: list[int] = field(default_factory=list)
    lo: int | None = None
    hi: int | None = None
    # scale events counted so far, and the scale key they were counted against
    events: int = 0
    last_key: Any = None
    state: str = "pending"


@dataclass
class Tracker:
    """Per line of the view (keyed by its label), what the run showed."""

    seen: dict[str, Seen] = field(default_factory=dict)

    def add(self, rows: list[RowState]) -> None:
        for r in rows:
            s = self.seen.setdefault(r.row.label, Seen())
            if r.current is not None:
                if r.current not in s.values:
                    s.values.append(r.current)
                s.lo = r.current if s.lo is None else min(s.lo, r.current)
                s.hi = r.current if s.hi is None else max(s.hi, r.current)
            if r.scale_key is not None and r.scale_key != s.last_key:
                # a scaler's first lastScaleTime is a write; a Tidal's or an RSG's first value is not
                if s.last_key is not None or r.row.short in ("es", "llmscaler"):
                    s.events += 1
                s.last_key = r.scale_key
            s.state = r.state

    def summary(self) -> list[str]:
        lines = [f"  {'SCALER':<24} {'MIN':>4} {'MAX':>4} {'SCALE EVENTS':>12}  FINAL STATE"]
        for row in ROWS:
            s = self.seen.get(row.label, Seen())
            lines.append(f"  {row.label:<24} {_n(s.lo):>4} {_n(s.hi):>4} {s.events:>12}  {s.state}")
        return lines
