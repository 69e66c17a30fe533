"""The records kept per scaler have no instance dict (issue 30, third memory pass).

Each is held once or more per scaler for as long as the scaler lives: the key of every per-scaler
table (``Request``), the algorithm's and the stabilizer's past recommendations (``Recommendation``,
up to 64 of them a scaler), the parse cache's entry (``Parsed``), the status writer's memo
(``_Memo``), the watch index's wants (``_Want``) and the target a scaler names (``ObjectRef``).
A plain class keeps a values array per instance on CPython 3.11 and a ~300-byte dict once anything
reads its ``__dict__`` (``copy``, ``vars``, a memory walker); a slotted one has neither. Nothing
assigns them an attribute they do not declare (they are frozen dataclasses), and they compare,
hash, order, print and unpack as before.
"""

from __future__ import annotations

import copy
import pickle
from dataclasses import FrozenInstanceError, astuple
from typing import Any

import pytest

from escaler.reconcilers.elasticscaler.parsecache import Parsed
from escaler.reconcilers.kit.ports import ObjectRef
from escaler.reconcilers.kit.status import _Memo
from escaler.reconcilers.kit.watchindex import _Want
from escaler.runtime.types import Request
from escaler.scaling.algorithm import Recommendation
from escaler.scaling.annotations import DEFAULTS


def _records() -> list[Any]:
    return [
        Request("team", "web"),
        Recommendation(30.0, 4),
        ObjectRef("apps/v1", "Deployment", "web"),
        _Memo(None, 12.5, "7"),
        _Want("target", None, "team/web"),  # type: ignore[arg-type]
        Parsed(None, (), DEFAULTS, ()),  # type: ignore[arg-type]
    ]


@pytest.mark.parametrize("record", _records(), ids=lambda r: type(r).__name__)
def test_a_per_scaler_record_has_no_instance_dict(record: Any) -> None:
    assert not hasattr(record, "__dict__"), f"{type(record).__name__} has an instance dict"
    with pytest.raises((FrozenInstanceError, AttributeError, TypeError)):
        record.extra = 1


@pytest.mark.parametrize("record", _records(), ids=lambda r: type(r).__name__)
def test_a_slotted_record_still_compares_copies_and_pickles(record: Any) -> None:
    twin = type(record)(*astuple(record)) if not isinstance(record, Parsed | _Want) else record
    assert twin == record and hash(twin) == hash(record)
    assert copy.copy(record) == record and copy.deepcopy(record) == record
    if not isinstance(record, Parsed | _Want):  # these hold non-picklable test stand-ins
        assert pickle.loads(pickle.dumps(record)) == record


def test_request_orders_prints_and_parses_as_before() -> None:
    assert sorted([Request("b", "x"), Request("a", "y")]) == [Request("a", "y"), Request("b", "x")]
    assert str(Request("team", "web")) == "team/web"
    assert Request.from_key("team/web") == Request("team", "web")
    with pytest.raises(ValueError, match=r"Request\.name: must not be empty"):
        Request("team", "")
