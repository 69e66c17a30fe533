"""House rules that a reviewer would otherwise check by hand (issue 8: "a reconciler a newcomer can
read"): no function in ``escaler/reconcilers/`` longer than 60 lines, and one condition engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECONCILERS = ROOT / "escaler" / "reconcilers"
MAX_FUNCTION_LINES = 60


def _functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(f"{path.relative_to(ROOT)}:{n.lineno} {n.name}", (n.end_lineno or n.lineno) - n.lineno + 1)
            for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


@pytest.mark.parametrize("path", sorted(RECONCILERS.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(RECONCILERS)))
def test_no_reconciler_function_is_longer_than_60_lines(path: Path) -> None:
    long = [(name, n) for name, n in _functions(path) if n > MAX_FUNCTION_LINES]
    assert long == []


def test_one_condition_engine() -> None:
    """Conditions are computed by ``escaler.scaling.conditions`` only: no reconciler builds its own
    ``metav1.Condition`` transition logic (the old ``condset.py`` duplicated it)."""
    assert not (RECONCILERS / "elasticscaler" / "condset.py").exists()
    offenders = [str(p.relative_to(ROOT)) for p in RECONCILERS.rglob("*.py")
                 if "lastTransitionTime" in p.read_text(encoding="utf-8")
                 and "last_transition_time" in p.read_text(encoding="utf-8")
                 # kit/sync.py only converts between the two shapes (to_value, to_condition)
                 and p.relative_to(RECONCILERS) != Path("kit", "sync.py")]
    assert offenders == []
