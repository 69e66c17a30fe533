"""What a scaler knows about its target after one read: ``TargetSnapshot``.

Contract:

* A snapshot is immutable and self-contained: the replica counts, the pod selector, the
  ``resourceVersion`` a write must be conditional on, and the two guard inputs of
  docs/concepts.md#the-decision-pipeline step 5, already computed by the kind's ``ResourceHandler``:

  - ``rollout_in_progress``: a *template* rollout is incomplete — ``status.observedGeneration <
    metadata.generation``, or updated replicas behind what the kind expects (each check only where
    the kind has the field; the handler narrows the updated-replicas check with each kind's own
    rules: a paused Deployment, a StatefulSet partition or ``OnDelete``, a StatefulSet whose
    revisions agree). Replicas that are only not Ready yet are *not* a rollout
    (docs/concepts.md#the-decision-pipeline step 5). The reason is in ``rollout_message`` so a condition can
    say *which* check holds the write.
  - ``settling_scale_down``: ``status.replicas > spec.replicas`` (a previous scale-down has not
    finished removing pods, or a rollout surges).

* ``observed_generation``, ``ready_replicas`` and ``updated_replicas`` are ``None`` when the kind has
  no such field (a generic CR that does not report it); a kind that has the field but omits it
  (the API server drops zero counts) reads as 0.
* ``raw`` is the object the numbers came from (possibly a read-only informer-cache object); it
  takes no part in equality.

``TargetUnreadable`` is what ``ResourceHandler.read`` raises for every failure except NotFound:
the reconciler reports it as ``AbleToScale=False/TargetUnreadable``; ``retryable`` says whether the
cause was transient (429, 5xx, connection failure) rather than a malformed object or a refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from escaler.errors import is_retryable

__all__ = ["TargetRefLike", "TargetSnapshot", "TargetUnreadable"]


class TargetRefLike(Protocol):
    """A reference to a workload in the scaler's namespace (``escaler.api.TargetRef`` is one)."""

    @property
    def api_version(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...


class TargetUnreadable(Exception):
    """The target exists (or may exist) but could not be read or understood."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        # True when retrying later may succeed (the cause was a 429, 5xx or connection failure)
        self.retryable = cause is not None and is_retryable(cause)


@dataclass(frozen=True)
class TargetSnapshot:
    """One read of a scale target (see the module docstring)."""

    # apiVersion and kind of the target, as referenced (e.g. "apps/v1", "Deployment")
    api_version: str
    kind: str
    # where it lives and what it is called
    namespace: str
    name: str
    # metadata.uid ("" when the server did not send one)
    uid: str
    # metadata.generation (0 when absent)
    generation: int
    # status.observedGeneration; None when the kind does not report one
    observed_generation: int | None
    # desired replicas (for LWS and RSG: groups), >= 0
    spec_replicas: int
    # replicas that exist (status.replicas; 0 when not reported yet), >= 0
    status_replicas: int
    # status.readyReplicas; None when the kind has no such field
    ready_replicas: int | None
    # status.updatedReplicas; None when the kind has no such field
    updated_replicas: int | None
    # label selector of the pods in string form; "" when unknown
    selector: str
    # metadata.resourceVersion; the precondition of write_replicas ("" = unconditional)
    resource_version: str
    # docs/concepts.md#the-decision-pipeline guard input: the target's rollout is incomplete
    rollout_in_progress: bool
    # docs/concepts.md#the-decision-pipeline guard input: status.replicas > spec.replicas
    settling_scale_down: bool
    # why rollout_in_progress is True ("" when it is False), e.g. "updatedReplicas 1 < spec.replicas 3"
    rollout_message: str = ""
    # the object read; excluded from equality and repr
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> str:
        """``namespace/name``, for messages."""
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        """``Deployment default/web``, for messages."""
        return f"{self.kind} {self.key}"
