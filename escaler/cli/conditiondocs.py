"""The condition catalog of the API reference: every condition type and reason each kind's
reconciler writes, when it is set, what to do about it, and the health rule.

``condition_docs() -> {kind: ConditionDocs}`` feeds ``escaler.api.docgen.render_reference``. The
reasons are the reconcilers' own constants (``escaler.scaling.conditions`` for the two scaler
kinds, the ``report``/strategy modules of the Tidal, ResourceScalingGroup and SLO reconcilers),
referenced here by name, so a renamed reason changes the reference; the "when" and "what to do"
texts are written by hand. ``tests/unit/test_reference_docs.py`` checks that the catalog covers
exactly the reasons the code writes — no more, no fewer — so a new reason cannot ship undocumented.

It lives in the command layer because it is the one layer that may import every reconciler
(``escaler.api`` is the bottom layer and renders whatever it is given). Pure: data only.
"""

from __future__ import annotations

from collections.abc import Sequence

from escaler.api.docgen import ConditionDocs, ReasonDoc
from escaler.reconcilers.elasticscaler.state import MAX_CHAIN_HOPS
from escaler.reconcilers.rsg import context as rsg_context
from escaler.reconcilers.rsg import inplace as rsg_inplace
from escaler.reconcilers.rsg import members as rsg_members
from escaler.reconcilers.rsg import reconciler as rsg_reconciler
from escaler.reconcilers.rsg import replication as rsg_replication
from escaler.reconcilers.slo import report as slo
from escaler.reconcilers.tidal import report as tidal
from escaler.scaling import conditions as c
from escaler.targets.pods import UNSCHEDULABLE_GRACE_SECONDS

__all__ = [
    "ES_ONLY",
    "HPA_LITERAL_REASONS",
    "RSG_RANKING_REASONS",
    "condition_docs",
    "scaler_reasons",
]

# reasons the companion-HPA path of an ElasticScaler writes as literals (escaler.reconcilers.
# elasticscaler.hpasync): Validated=True/Valid, an HPA condition not reported yet, a pinned HPA
HPA_LITERAL_REASONS = ("WaitingForHPA",)
# the ScaleDownRanking reasons the GroupReplication strategy writes as literals
# (escaler.reconcilers.rsg.replication._rank)
RSG_RANKING_REASONS = ("LeastLoaded", "HighestIndexFirst", "QueryFailed")
# (type, reason) pairs only an ElasticScaler writes (the LLMScaler has no companion HPA, no
# algorithm registry, no StateTrigger chain, never caps scale-up and may decide from zero); the
# LLMScaler writes every other scaler reason
ES_ONLY = frozenset({
    (c.SCALING_ACTIVE, c.ADVISORY), (c.SCALING_ACTIVE, c.SCALING_DISABLED),
    (c.SCALING_LIMITED, c.SCALE_UP_LIMIT),
    (c.VALIDATED, c.ALGORITHM_NOT_REGISTERED), (c.VALIDATED, c.UNSUPPORTED_METRIC),
    (c.VALIDATED, c.METRIC_NOT_GRANTED),
    (c.VALIDATED, c.TARGET_CHAIN_INVALID),
    (c.SCALING_ACTIVE, "WaitingForHPA"), (c.ABLE_TO_SCALE, "WaitingForHPA"),
})

_REF = "see the Validation rules above"
_TARGET = ("Check `spec.targetRef` (`kubectl get <kind> <name>` in the scaler's namespace) and the "
           "manager's RBAC")


def scaler_reasons() -> tuple[ReasonDoc, ...]:
    """Every (type, status, reason) of the two scaler kinds, before the per-kind filter."""
    R = ReasonDoc
    return (
        R(c.SCALING_ACTIVE, "True", c.METRICS_AVAILABLE,
          "At least one metric was evaluated this sync "
          "(\"evaluated K of M metrics; recommends N replicas\")."),
        R(c.SCALING_ACTIVE, "True", c.DECISION_RECEIVED,
          "A State source's `status.desiredReplicas`, a signal or a custom provider's decision was read "
          "this sync."),
        R(c.SCALING_ACTIVE, "False", c.DECISION_UNAVAILABLE,
          "No usable signal: every metric read failed or was unusable, the State source has no "
          "`desiredReplicas`, or the custom provider gave no `{\"replicas\": n}`. The message names the "
          "source and the error (capped at 1 KiB); replicas are held at the current count, apart from "
          "the min/max bounds. With `spec.fallback` (LLMScaler, ElasticScaler MetricsTrigger) the "
          "message starts with the fallback: `fallback not engaged: k of N consecutive metric polls "
          "...` while counting, then `fallback engaged: ... recommending fallback.replicas R` from "
          "the Nth poll: R goes through stabilization, step limits and the clamp (`status.fallback` "
          "holds the count).",
          "Read the message and `status.currentMetrics[].error`; check the metric source (metrics API, "
          "Prometheus, provider URL) and `--allow-endpoint-networks` / `--allowed-endpoint-hosts`."),
        R(c.SCALING_ACTIVE, "False", c.INVALID_SPEC,
          "The spec cannot produce a decision: a rule is broken (an object stored before the rule "
          "existed), an endpoint is outside `--allowed-endpoint-hosts`, or a Custom provider has no "
          "`customProvider`. Replicas are held.",
          f"Fix the field the message names ({_REF})."),
        R(c.SCALING_ACTIVE, "False", c.SCALING_DISABLED,
          "MetricsTrigger: the target is at 0 replicas and metrics cannot scale it from zero; nothing "
          "is written (0 is how a workload is switched off).",
          "Scale the target to 1 or more by hand, or use a SignalTrigger for scale-to-zero."),
        R(c.SCALING_ACTIVE, "False", c.ADVISORY,
          "`mode: Advisory` with `scalingAlgorithm: HPA`: the companion HPA is not created (it would "
          "scale the target), so nothing computes a decision.",
          "Use an escaler algorithm such as `apa` for advisory decisions, or `mode: Active`."),
        R(c.SCALING_ACTIVE, "Unknown", "WaitingForHPA",
          "`scalingAlgorithm: HPA`: the companion HPA `<name>-hpa` has not reported this condition yet "
          "(the same for AbleToScale).",
          "Wait for the HPA controller's first sync; `kubectl describe hpa <name>-hpa`."),
        R(c.ABLE_TO_SCALE, "True", c.SYNCED,
          "A normal write or a no-op: the target is at the desired count."),
        R(c.ABLE_TO_SCALE, "True", c.ROLLOUT_IN_PROGRESS,
          "A guard holds the write while the target's template rollout is incomplete (its own kind's "
          "rules: a paused Deployment, a StatefulSet partition or OnDelete is not in progress); "
          "`status.deferredSince` is set.",
          "Wait for the rollout (`kubectl rollout status`); it is forced after `deferTimeoutSeconds`."),
        R(c.ABLE_TO_SCALE, "True", c.SCALE_DOWN_SETTLING,
          "A guard holds a scale-down while a previous one has not settled (target `status.replicas` > "
          "`spec.replicas`).",
          "Wait for the terminating pods; it is forced after `deferTimeoutSeconds`."),
        R(c.ABLE_TO_SCALE, "True", c.INSUFFICIENT_CAPACITY,
          f"Pods of the target are Pending as Unschedulable beyond the grace period "
          f"({UNSCHEDULABLE_GRACE_SECONDS:g} s): further "
          "scale-up waits for them (a guard hold, or a report when nothing would be written), a "
          "scale-down never does. The message quotes the scheduler.",
          "Add nodes or capacity (the scheduler's message says what is missing), or lower `maxReplicas`."),
        R(c.ABLE_TO_SCALE, "True", c.DEFERRAL_TIMED_OUT,
          "A write held by a guard was forced after `deferTimeoutSeconds`; forced writes are then "
          "paced to one per `deferTimeoutSeconds`.",
          "Look at why the guard held (the message names it)."),
        R(c.ABLE_TO_SCALE, "True", c.SCALE_DOWN_STABILIZED,
          "The scale-down stabilization window kept the count above this sync's recommendation (not "
          "a guard)."),
        R(c.ABLE_TO_SCALE, "True", c.PAUSED,
          "`elasticscaler.io/paused: \"true\"` (nothing is written) or `elasticscaler.io/paused-replicas: "
          "\"N\"` (pinned to N; the pipeline is bypassed).",
          "Remove the annotation to resume."),
        R(c.ABLE_TO_SCALE, "False", c.INVALID_SPEC,
          "`spec.targetRef.apiVersion` does not parse, or its kind cannot be a scale target.",
          "Fix `spec.targetRef`."),
        R(c.ABLE_TO_SCALE, "False", c.TARGET_NOT_FOUND,
          "The target (or its kind) does not exist.", _TARGET + "."),
        R(c.ABLE_TO_SCALE, "False", c.TARGET_UNREADABLE,
          "Reading the target failed (an API error, or neither `/scale` nor `spec.replicas`).",
          _TARGET + " (`get` on the kind and its `scale` subresource)."),
        R(c.ABLE_TO_SCALE, "False", c.TARGET_WRITE_FAILED,
          "Writing the target's replicas failed; what the sync computed is still written to status.",
          "Read the API error in the message; check RBAC (`update`/`patch` on the `scale` subresource) "
          "and admission policies."),
        R(c.ABLE_TO_SCALE, "Unknown", "WaitingForHPA",
          "`scalingAlgorithm: HPA`: the companion HPA has not reported AbleToScale yet.",
          "Wait for the HPA controller's first sync."),
        R(c.SCALING_LIMITED, "True", c.TOO_FEW_REPLICAS, "The count was raised to `minReplicas`."),
        R(c.SCALING_LIMITED, "True", c.TOO_MANY_REPLICAS, "The count was capped at `maxReplicas`.",
          "Raise `maxReplicas` if the load is real."),
        R(c.SCALING_LIMITED, "True", c.SCALE_UP_LIMIT,
          "A scale-up step limit (`elasticscaler.io/behavior.scaleUp.maxPodsPerStep`) or the "
          "algorithm's own rate (apa's `scaleUpRate`; the message says which) capped this sync."),
        R(c.SCALING_LIMITED, "True", c.SCALE_DOWN_LIMIT,
          "A scale-down step limit (`maxPodsPerStep`, an LLMScaler's `scaleDown.maxStepReplicas`) or the "
          "algorithm's rate (`scaleDownRate`) capped this sync."),
        R(c.SCALING_LIMITED, "False", c.DESIRED_WITHIN_RANGE, "Nothing bound the count."),
        R(c.VALIDATED, "True", c.VALID, "The spec is usable and this scaler owns its target."),
        R(c.VALIDATED, "False", c.INVALID_SPEC,
          "The spec breaks a rule (the message names each field and rule); nothing is written.",
          f"Fix the named field ({_REF})."),
        R(c.VALIDATED, "False", c.TARGET_CONFLICT,
          "Another escaler scaler (of any kind) or an HPA escaler does not own already manages the "
          "target; the older scaler (creationTimestamp, then kind, then name) wins and this one never "
          "writes.",
          "Delete one of the two scalers (or the foreign HPA); the message names the other."),
        R(c.VALIDATED, "False", c.ALGORITHM_NOT_REGISTERED,
          "`scalingAlgorithm` names no algorithm registered in this manager.",
          "Use `apa`, `HPA` or a name registered with `escaler.scaling.register_algorithm`."),
        R(c.VALIDATED, "False", c.UNSUPPORTED_METRIC,
          "`scalingAlgorithm: HPA` with an ExternalServer metric (the HPA cannot read one).",
          "Use `apa`, or an External metric through a metrics adapter."),
        R(c.VALIDATED, "False", c.METRIC_NOT_GRANTED,
          "`scalingAlgorithm: HPA` with a Custom or External metric the manager's own account may "
          "not read: the kube-controller-manager reading the companion HPA could, and its values "
          "would reach the scaler's status, so no companion is created (an existing one is deleted).",
          "Grant the metric to the manager (the ClusterRole `escaler-manager-metrics`: the chart's "
          "`rbac.customMetrics` / `rbac.externalMetrics`); the scaler looks again within a minute."),
        R(c.VALIDATED, "False", c.TARGET_CHAIN_INVALID,
          "StateTrigger: following `spec.targetRef` links from the source found a cycle, a dangling "
          f"link or more than {MAX_CHAIN_HOPS} hops.",
          "Fix the chain's `spec.targetRef`s; the message names the broken link."),
        R(c.METRICS_PIPELINE, "True", c.ALL_METRICS_AVAILABLE,
          "Every metric read succeeded and was evaluated this sync."),
        R(c.METRICS_PIPELINE, "False", c.PARTIAL_METRICS,
          "Some metric reads failed this sync (each named with its error); the decision used the "
          "others, or the window's earlier samples.",
          "Fix the failing source named in the message."),
        R(c.METRICS_PIPELINE, "False", c.NO_METRICS,
          "Every metric read failed (or there are no metrics).", "Fix the sources named in the message."),
        R(c.SCHEDULE_FLOOR, "True", c.FLOOR_ACTIVE,
          "`spec.floorFrom`: a rule of the named Tidal is active (or its `defaultReplicas` applies); the "
          "recommendation is raised to that floor before stabilization (the message names the replicas "
          "and the rules)."),
        R(c.SCHEDULE_FLOOR, "False", c.NO_FLOOR,
          "`spec.floorFrom`: no rule of the Tidal is active now (or today's date is in its "
          "`excludeDates`) and it has no `defaultReplicas`: no floor; the scaler scales on its signal."),
        R(c.SCHEDULE_FLOOR, "False", c.TIDAL_NOT_FOUND,
          "`spec.floorFrom.name` names no Tidal in the scaler's namespace: no floor (never a failed sync).",
          "Create the Tidal in the scaler's namespace, or fix `spec.floorFrom.name`."),
        R(c.SCHEDULE_FLOOR, "False", c.TIDAL_INVALID,
          "The named Tidal's schedules or dates do not parse (the message names the rule and field): "
          "no floor.", "Fix the Tidal (`kubectl get tidal <name>` shows Ready=False/InvalidSchedule)."),
    )


def _for_kind(kind: str, reasons: Sequence[ReasonDoc]) -> tuple[ReasonDoc, ...]:
    if kind == "ElasticScaler":
        return tuple(reasons)
    return tuple(r for r in reasons if (r.type, r.reason) not in ES_ONLY)


_SCALER_TYPES = (
    (c.SCALING_ACTIVE, "A decision could be computed this sync."),
    (c.ABLE_TO_SCALE, "The target can be written; with True, the reason says whether a guard, "
                      "stabilization or a pause is holding."),
    (c.SCALING_LIMITED, "A bound or step limit changed the count (informational)."),
    (c.VALIDATED, "The spec is usable and this scaler owns its target (escaler addition)."),
    (c.METRICS_PIPELINE, "Every metric read of this sync succeeded (metric-based decisions only; "
                         "removed for decision-based ones)."),
    (c.SCHEDULE_FLOOR, "`spec.floorFrom` only: whether the named Tidal's floor is in force "
                       "(informational, not part of the health rule)."),
)


def _scaler_health() -> str:
    waiting = ", ".join(f"`{r}`" for r in sorted(c.WAITING_REASONS))
    return (
        "`escaler.scaling.conditions.health`, what `escaler explain` prints and the Active/AbleToScale/"
        "Scaling printer columns show ([conditions and health](../concepts.md#conditions-and-health)):\n\n"
        "* **failing** when AbleToScale, ScalingActive or Validated is False (a refused scaler never "
        "writes);\n"
        f"* **waiting** when AbleToScale is True with a guard or stabilization reason: {waiting};\n"
        "* **ok** otherwise. ScalingLimited is informational.\n\n"
        "Scalers have no summary `Ready` condition: conditions are the source of truth "
        "(`kubectl wait --for=condition=AbleToScale` works as on any object)."
    )


_SCALER_NOTES = (
    "AbleToScale=True precedence in one sync: `Paused`, then a guard hold "
    "(`RolloutInProgress`/`ScaleDownSettling`/`InsufficientCapacity`) or `DeferralTimedOut`, then "
    "`ScaleDownStabilized`, then `InsufficientCapacity` as a report, then `Synced`.",
    "ScalingLimited names the last pipeline step that changed the count and is only updated on a sync "
    "where ScalingActive is True (and not while paused or pinned); otherwise it is left as it was.",
    "Target read errors touch only AbleToScale (and observedGeneration); a failed write also keeps "
    "what the sync computed (ScalingActive, ScalingLimited, MetricsPipeline).",
    "`lastTransitionTime` moves only when a condition's status flips; a stale `ScalingDeferred` "
    "condition written by older controllers is removed.",
    "`scalingAlgorithm: HPA` (ElasticScaler): ScalingActive, AbleToScale and ScalingLimited mirror "
    "the companion HPA's conditions, reasons included (the HPA's own, e.g. `ValidMetricFound`, "
    "`ReadyForNewScale`), with the message prefixed `HPA <name>-hpa:`; a pinned HPA reads "
    "AbleToScale=True/`Paused`.",
    "Events: `SuccessfulRescale`, `ScalingDeferred`, `DeferralTimedOut`, `FailedGetScale`, "
    "`FailedRescale`, `FailedComputeMetricsReplicas`, `TargetConflict` (`kubectl events --for "
    "<kind>/<name>`).",
)


def _ready_health(kind: str, extra: str = "") -> str:
    return (
        f"A {kind} is healthy when its `Ready` condition is True; False names the first problem in its "
        f"reason and every problem in its message.{extra} `kubectl wait --for=condition=Ready` works."
    )


def _tidal() -> ConditionDocs:
    R = ReasonDoc
    return ConditionDocs(
        types=((tidal.READY, "Every schedule parses and the binding labels name the follower."),),
        reasons=(
            R(tidal.READY, "True", tidal.SCHEDULED,
              "Every schedule parses and `elasticscaler.io/name`/`namespace` label the follower."),
            R(tidal.READY, "False", tidal.INVALID_SPEC,
              "The object does not parse as a Tidal; `desiredReplicas` and `activeRules` are held and "
              "`nextTransitionTime` removed.", f"Fix the field the message names ({_REF})."),
            R(tidal.READY, "False", tidal.INVALID_SCHEDULE,
              "A rule's `start` or `end` does not parse (the message names the rule and field); "
              "`desiredReplicas` and `activeRules` are held until it is fixed.",
              "Write `CRON_TZ=<IANA zone> <5 cron fields>`; the zone must exist in the tz database."),
            R(tidal.READY, "False", tidal.MISSING_REQUIRED_LABELS,
              "The `elasticscaler.io/name`/`elasticscaler.io/namespace` labels are missing: the status "
              "is still computed, but no ElasticScaler is told of changes.",
              "Label the Tidal with the name and namespace of its StateTrigger ElasticScaler."),
            R(tidal.READY, "False", tidal.TARGET_CONFLICT,
              "The workload is written by a scaler that does not follow this Tidal, or by an HPA escaler "
              "does not own (the Tidal's own follower is never a conflict). Evaluation still runs.",
              "Remove the other scaler, or point this Tidal's follower at the workload."),
        ),
        health=_ready_health("Tidal"),
        notes=(
            "Events: Normal `DesiredReplicasChanged` when `desiredReplicas` changes (naming the active "
            "rules); Warning `<reason>` when Ready turns False or changes reason.",
        ),
    )


def _rsg() -> ConditionDocs:
    R = ReasonDoc
    ready, ranking = rsg_context.READY, rsg_context.SCALE_DOWN_RANKING
    return ConditionDocs(
        types=(
            (ready, "Every group is whole and every member fully ready."),
            (ranking, "GroupReplication: how the last scale-down chose the groups to delete "
                      "(informational)."),
        ),
        reasons=(
            R(ready, "True", rsg_inplace.ALL_READY,
              "`readyReplicas` equals `replicas`: every group's members are fully ready "
              "(\"N of N groups ready\")."),
            R(ready, "False", rsg_inplace.NOT_READY,
              "Some group is not whole or not ready yet (the message lists them): pods starting, clones "
              "being created.",
              "Usually transient; look at the members' pods if it lasts."),
            R(ready, "False", rsg_members.INVALID_SPEC,
              "The object does not parse, breaks a rule, or a member's `targetRef` cannot be a scale target.",
              f"Fix the field the message names ({_REF})."),
            R(ready, "False", rsg_members.MEMBER_NOT_FOUND,
              "A member's workload (or its kind) does not exist.",
              "Create the member workload, or fix `spec.members[].targetRef`."),
            R(ready, "False", rsg_inplace.MEMBER_UNREADABLE,
              "InplaceScaling: reading a member's replicas failed (retried).",
              "Check the manager's RBAC on the member's kind and `scale` subresource."),
            R(ready, "False", rsg_inplace.MEMBER_WRITE_FAILED,
              "InplaceScaling: a member's write was refused (RBAC, an admission policy, a 5xx); the members "
              "after it wait, retried with backoff (1 s doubling to 10 s).",
              "Read the API error in the message and `status.members[].message`."),
            R(ready, "False", rsg_replication.CLONE_WRITE_FAILED,
              "GroupReplication: creating, updating or deleting a clone failed; retried with backoff.",
              "Read the API error in the message; check RBAC on the member kinds (create/update/delete)."),
            R(ready, "False", rsg_replication.CLONE_NAME_TAKEN,
              "GroupReplication: an object named `<member>-g<i>` exists and is not this RSG's clone.",
              "Rename the member or delete that object."),
            R(ready, "False", rsg_replication.PROGRESSING,
              "GroupReplication: this pass made as many clone creates and deletes as one reconcile may "
              "(`--max-clone-writes-per-sync`, default 16; a new group is never split); the next pass "
              "follows within a second (\"created 16 of 1024 groups; continuing ...\").",
              "Nothing: it converges pass by pass."),
            R(ready, "False", rsg_replication.CLONE_LIMIT_REACHED,
              "GroupReplication: the namespace holds as many clones of ResourceScalingGroups as the manager "
              "allows (`--max-clones-per-namespace`, default 256, every RSG of the namespace together); the "
              "groups beyond it are not created (looked at again every 30 s).",
              "Lower `spec.replicas` here or in another RSG of the namespace, or ask the cluster admin to "
              "raise the limit."),
            R(ready, "False", rsg_replication.TEMPLATE_TOO_LARGE,
              "GroupReplication: a member's clone would be larger than the manager allows "
              "(`--max-clone-template-bytes`, default 256 KiB of JSON); no clone is created.",
              "Shrink the member's template (large annotations, args, inline config: move them to a "
              "ConfigMap), or ask the cluster admin to raise the limit."),
            R(ready, "False", rsg_reconciler.TARGET_CONFLICT,
              "A member (or clone) is already written by an older escaler scaler or RSG; this RSG holds.",
              "Remove the other scaler of that workload; the message names it."),
            R(ranking, "True", "LeastLoaded",
              "`scaleDown.prometheus` answered: the least loaded groups are deleted first (the message "
              "shows each group's load)."),
            R(ranking, "True", "HighestIndexFirst",
              "No `scaleDown.prometheus`: the highest-index groups are deleted first."),
            R(ranking, "False", "QueryFailed",
              "The `scaleDown.prometheus` query failed: the highest-index groups are deleted first (the "
              "scale-down is never stuck).",
              "Check the endpoint, the query (one sample per group, labelled `group`) and "
              "`--allow-endpoint-networks`."),
        ),
        health=_ready_health("ResourceScalingGroup",
                             " `ScaleDownRanking` is informational: a failed ranking query never blocks "
                             "a scale-down."),
    )


def _slo(kind: str) -> ConditionDocs:
    R = ReasonDoc
    return ConditionDocs(
        types=((slo.READY, "The route is sized from its signals."),),
        reasons=(
            R(slo.READY, "True", slo.SIZED, "Every signal was read and the decision computed from them."),
            R(slo.READY, "False", slo.SIGNALS_MISSING,
              "A signal could not be read (the message names each and its error, or the missing "
              "`--slo-prometheus-endpoint`); the last decision is held.",
              "Set `--slo-prometheus-endpoint`; make each query return one number (wrap it in `sum()`; "
              "`or vector(0)` when absence means zero)."),
            R(slo.READY, "False", slo.INVALID_SPEC,
              "The spec breaks a rule or `targetRef` cannot be a scale target (the message names each "
              "field and rule).", f"Fix the named field ({_REF})."),
            R(slo.READY, "False", slo.TARGET_NOT_FOUND,
              "The `targetRef` workload (or its kind) does not exist; the last decision is held.",
              "Create the workload or fix `spec.targetRef`."),
            R(slo.READY, "False", slo.TARGET_UNREADABLE,
              "Reading the `targetRef`'s replicas failed; the last decision is held.",
              "Check the manager's RBAC on the target's kind."),
            R(slo.READY, "False", slo.SERVICE_ID_CONFLICT,
              "Another SLO requirement (of either kind) in the same namespace has the same `serviceId` "
              "(other namespaces never count): the decision is computed, but the decisions route "
              "answers 409 until one of them goes.",
              "Give each requirement its own `serviceId`."),
        ),
        health=_ready_health(kind, " The decision itself is in `status.decision` and at "
                                   "`GET /decisions/v1/namespaces/{namespace}/{serviceId}`."),
    )


_DECISION_AVAILABLE = (
    "**Deprecated**: mirrors ScalingActive exactly (status, reason, message, observedGeneration, "
    "lastTransitionTime) whenever ScalingActive is written; read ScalingActive instead.")


def condition_docs() -> dict[str, ConditionDocs]:
    """``ConditionDocs`` for every kind, keyed by kind name."""
    scaler = scaler_reasons()
    llm_types = (*_SCALER_TYPES, (c.DECISION_AVAILABLE, _DECISION_AVAILABLE))
    return {
        "ElasticScaler": ConditionDocs(_SCALER_TYPES, _for_kind("ElasticScaler", scaler), _scaler_health(),
                                       _SCALER_NOTES),
        "Tidal": _tidal(),
        "ResourceScalingGroup": _rsg(),
        "LLMScaler": ConditionDocs(llm_types, _for_kind("LLMScaler", scaler), _scaler_health(),
                                   tuple(n for n in _SCALER_NOTES if "scalingAlgorithm: HPA" not in n)),
        "LLMSLORequirement": _slo("LLMSLORequirement"),
        "JobSLORequirement": _slo("JobSLORequirement"),
    }

