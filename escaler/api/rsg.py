"""ResourceScalingGroup (``autoscaling.openfuyao.com/v1alpha1``): scale several workloads as
one unit, docs/guide/resourcescalinggroup.md.

``spec.replicas`` is the number of groups and is what the ``scale`` subresource reads and
writes (``.spec.replicas`` / ``.status.replicas`` / ``.status.selector``), so an ElasticScaler or
an HPA can target an RSG. Rules: member names are unique (CEL; they name the clones
``{member}-g{i}``), ``replicasPerGroup >= 1`` (schema minimum), the ranking query's endpoint
names a host (``common.url_rule``), and with ``GroupReplication`` ``replicas <= MAX_GROUPS`` (each
group is workloads the controller creates; the rule applies to ``/scale`` writes too).
``scaleDown`` is read only with ``GroupReplication`` and ignored otherwise (a manifest may set it with
``InplaceScaling``, so it is not refused).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from escaler.api.common import URL_PATTERN, KubeModel, TargetRef, url_rule
from escaler.api.conditions import Condition, conditions_field
from escaler.api.meta import KubeObject
from escaler.api.rules import Rule

__all__ = [
    "MAX_GROUPS",
    "MAX_MEMBERS",
    "RSGGroupMemberStatus",
    "RSGGroupStatus",
    "RSGMember",
    "RSGMemberStatus",
    "RSGPrometheus",
    "RSGScaleDown",
    "ResourceScalingGroup",
    "ResourceScalingGroupSpec",
    "ResourceScalingGroupStatus",
    "Strategy",
]

# Upper bound on members per group; also bounds the CEL cost of the uniqueness rule.
MAX_MEMBERS = 16
DEFAULT_PROMETHEUS_TIMEOUT_SECONDS = 5
# Upper bound on groups with GroupReplication: every group is workloads the controller creates, so
# a spec (or a /scale write) must not be able to make it create an unbounded number of them.
MAX_GROUPS = 1024
# member names end up in clone names ({member}-g{i}), hence a DNS label with room for the suffix
MEMBER_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class Strategy(StrEnum):
    INPLACE_SCALING = "InplaceScaling"
    GROUP_REPLICATION = "GroupReplication"


class RSGMember(KubeModel):
    """One workload of the group."""

    name: str = Field(
        min_length=1,
        max_length=40,
        pattern=MEMBER_NAME_PATTERN,
        description="Name of the member, unique in the group (a DNS label; clones are named <name>-g<i>).",
    )
    target_ref: TargetRef = Field(
        description="The member workload (Deployment, StatefulSet, LeaderWorkerSet, or any object with "
        "/scale). With GroupReplication it is the template the group clones are made from."
    )
    replicas_per_group: int = Field(default=1, ge=1, description="Replicas of this member in one group.")


class RSGPrometheus(KubeModel):
    """A Prometheus query ranking groups by load."""

    RULES = (url_rule("endpoint", "endpoint"),)

    endpoint: str = Field(
        max_length=2048,
        pattern=URL_PATTERN,
        description="Base URL of a Prometheus-compatible query API, e.g. http://prometheus:9090.",
    )
    query: str = Field(
        min_length=1,
        max_length=4096,
        description='Instant query returning one sample per group, labelled "group" with the group '
        'index, e.g. sum by (group) (vllm:num_requests_running{rsg="llama"}).',
    )
    timeout_seconds: int = Field(
        default=DEFAULT_PROMETHEUS_TIMEOUT_SECONDS,
        ge=1,
        le=300,
        description="Timeout of one query, in seconds.",
    )


class RSGScaleDown(KubeModel):
    """Which group goes first on scale-down (GroupReplication only)."""

    prometheus: RSGPrometheus | None = Field(
        default=None,
        description="Delete the least-loaded groups first. Without it, or when the query fails "
        "(reported as a condition), the highest-index groups go first.",
    )


class ResourceScalingGroupSpec(KubeModel):
    """Desired state of a ResourceScalingGroup."""

    RULES = (
        Rule(
            rule="self.members.all(m, self.members.exists_one(o, o.name == m.name))",
            message="members[].name must be unique",
            check=lambda m: len({x.name for x in m.members}) == len(m.members),
            field_path=".members",
        ),
        Rule(
            rule=f"!has(self.strategy) || self.strategy != 'GroupReplication' || !has(self.replicas) || "
            f"self.replicas <= {MAX_GROUPS}",
            message=f"replicas must be at most {MAX_GROUPS} with strategy GroupReplication (each group "
            "is a set of workloads the controller creates)",
            check=lambda m: m.strategy != Strategy.GROUP_REPLICATION or m.replicas <= MAX_GROUPS,
            field_path=".replicas",
        ),
    )

    strategy: Strategy = Field(
        default=Strategy.INPLACE_SCALING,
        description="InplaceScaling (default): each member's replicas = replicas x replicasPerGroup, "
        "written in member order on scale-up and reverse order on scale-down. GroupReplication: each "
        "group is a set of clones of the members, named <member>-g<i> and owned by this object; "
        "whole groups are created and deleted.",
    )
    replicas: int = Field(
        default=1, ge=0, description="Number of groups (the scale subresource's spec.replicas)."
    )
    members: list[RSGMember] = Field(
        min_length=1, max_length=MAX_MEMBERS, description="The workloads scaled together."
    )
    scale_down: RSGScaleDown | None = Field(
        default=None,
        description="Scale-down ordering of groups; used with GroupReplication, ignored with InplaceScaling.",
    )


class RSGMemberStatus(KubeModel):
    """Write state of one member (InplaceScaling)."""

    name: str = Field(description="Member name.")
    desired_replicas: int | None = Field(default=None, ge=0, description="Replicas this member should have.")
    replicas: int | None = Field(
        default=None, ge=0, description="Replicas last read from the member workload."
    )
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Ready replicas of the member workload."
    )
    message: str | None = Field(
        default=None,
        max_length=1024,
        description="Why the last write to this member failed; absent when it succeeded.",
    )


class RSGGroupMemberStatus(KubeModel):
    """One member workload of one group."""

    name: str = Field(description="Member name.")
    workload: str | None = Field(
        default=None, description="Name of the workload object backing this member in the group."
    )
    replicas: int | None = Field(default=None, ge=0, description="Replicas of that workload.")
    ready_replicas: int | None = Field(default=None, ge=0, description="Ready replicas of that workload.")
    ready: bool | None = Field(default=None, description="All of replicasPerGroup replicas are ready.")


class RSGGroupStatus(KubeModel):
    """One group and its members."""

    index: int = Field(ge=0, description="Group index i (clones are named <member>-g<i>).")
    ready: bool | None = Field(default=None, description="Every member of the group is fully ready.")
    members: list[RSGGroupMemberStatus] = Field(default=[], description="Per member of the group.")


class ResourceScalingGroupStatus(KubeModel):
    """Observed state of a ResourceScalingGroup."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation at the last status write."
    )
    replicas: int | None = Field(
        default=None,
        ge=0,
        description="Number of groups that exist (the scale subresource's status.replicas).",
    )
    ready_replicas: int | None = Field(
        default=None, ge=0, description="Number of groups whose every member is fully ready."
    )
    selector: str | None = Field(
        default=None,
        description="Label selector of the groups' pods, in string form (the scale subresource's selector).",
    )
    members: list[RSGMemberStatus] = Field(
        default=[], description="Per member: desired and observed replicas, last write error."
    )
    groups: list[RSGGroupStatus] = Field(default=[], description="Per group: readiness of each member.")
    conditions: list[Condition] = conditions_field(
        "Ready (every group exists and is ready), and conditions reporting partial member writes or "
        "a failed scale-down ranking query."
    )


class ResourceScalingGroup(KubeObject):
    """Scales several workloads as one unit (prefill/decode disaggregation, multi-role serving)."""

    API_VERSION = "autoscaling.openfuyao.com/v1alpha1"
    KIND = "ResourceScalingGroup"

    spec: ResourceScalingGroupSpec = Field(description="Desired state.")
    status: ResourceScalingGroupStatus | None = Field(
        default=None, description="Observed state, written by the controller."
    )
