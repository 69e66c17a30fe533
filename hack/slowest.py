#!/usr/bin/env python3
"""Print the slowest tests of one or more JUnit XML reports (what ``make test`` writes into
``.test-results/``), slowest first, with the tier each ran in and each tier's totals.

    hack/slowest.py [--top 20] [--markdown] REPORT.xml...

The tier is the report's file name without ``.xml`` (``unit``, ``e2e-parallel``, ``e2e-serial``).
A test's time is what pytest measured for it: setup + call + teardown, so a module fixture's
start-up is charged to the first test that uses it. ``--markdown`` prints a table for
docs/testing.md. Standard library only.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Case:
    tier: str
    nodeid: str
    seconds: float
    outcome: str


def _outcome(tc: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if tc.find(tag) is not None:
            return {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
    return "passed"


def read(path: Path) -> tuple[list[Case], float]:
    """The test cases of one report and the wall clock of its run (the testsuite's time)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tier = path.stem
    cases = []
    wall = 0.0
    for suite in suites:
        wall += float(suite.get("time") or 0.0)
        for tc in suite.iter("testcase"):
            module = (tc.get("classname") or "").replace(".", "/")
            nodeid = f"{module}.py::{tc.get('name')}" if module else str(tc.get("name"))
            cases.append(Case(tier, nodeid, float(tc.get("time") or 0.0), _outcome(tc)))
    return cases, wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    cases: list[Case] = []
    print("tiers:")
    for p in args.reports:
        if not p.exists():
            print(f"  {p.stem}: no report ({p} missing: the tier did not run)")
            continue
        got, wall = read(p)
        cases += got
        counts: dict[str, int] = {}
        for c in got:
            counts[c.outcome] = counts.get(c.outcome, 0) + 1
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        print(f"  {p.stem}: {len(got)} tests ({summary}); wall clock {wall:.0f} s, "
              f"sum of test times {sum(c.seconds for c in got):.0f} s")
    top = sorted(cases, key=lambda c: c.seconds, reverse=True)[: args.top]
    print(f"the {len(top)} slowest tests:")
    if args.markdown:
        print("| # | seconds | tier | test |\n|---:|---:|---|---|")
        for i, c in enumerate(top, 1):
            print(f"| {i} | {c.seconds:.1f} | {c.tier} | `{c.nodeid}` |")
    else:
        for c in top:
            print(f"  {c.seconds:8.1f}s  {c.tier:<13} {c.nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
