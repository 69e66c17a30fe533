#!/usr/bin/env python3
"""``make chaos``: the chaos tests (issue 15) in their full form, and their table.

Contract:

* runs ``pytest tests/e2e -m chaos`` with ``ESCALER_CHAOS=full`` (``--reduced``: unset, the
  form every e2e run uses; ``-k EXPR`` narrows it), on the local control plane the e2e fixtures
  start;
* each chaos test reports what it measured with pytest's ``record_property`` (``runs``,
  ``passed``, ``worst_takeover_s``, ``writes``, ``peak_rss_mib``), read back from the JUnit XML
  (``junit_family=xunit1``, which keeps properties per test case);
* prints one row per test: test, runs, passed, worst takeover, writes counted, peak RSS, also
  measured (every other property the test recorded, as ``name value``), seconds, result; and
  writes the table, with the command, the date and the machine's cores and load,
  into ``docs/reliability.md`` between ``<!-- chaos:begin -->`` and ``<!-- chaos:end -->``
  (``--no-docs``: print only);
* ``--snapshot``: the managers and the CRDs come from ``git archive HEAD`` unpacked in a temporary
  directory (``ESCALER_E2E_SRC``), so a long run on a working tree others are editing tests one
  commit throughout (the table names it);
* ``--merge`` (a rerun of some tests with ``-k``): only their rows of the table already in the doc
  are replaced, marked "(rerun)", with the rerun's command, date and machine under the table (an
  earlier rerun's line with the same command is dropped: its rows were replaced);
* exits with pytest's exit code (0 only when every chaos test passed).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- chaos:begin -->", "<!-- chaos:end -->"
COLUMNS = ("test", "runs", "passed", "worst takeover", "writes counted", "peak RSS", "also measured",
           "seconds", "result")
# the properties with a column of their own; any other a test records goes to "also measured"
OWN_COLUMNS = frozenset({"runs", "passed", "worst_takeover_s", "writes", "peak_rss_mib"})


@dataclass
class Row:
    """One chaos test's outcome and what it reported."""

    test: str
    seconds: float
    result: str
    props: dict[str, str] = field(default_factory=dict)

    def cells(self) -> list[str]:
        p = self.props
        return [f"`{self.test}`", p.get("runs", "-"), p.get("passed", "0"),
                f"{p['worst_takeover_s']} s" if "worst_takeover_s" in p else "-",
                p.get("writes", "-"),
                f"{p['peak_rss_mib']} MiB" if "peak_rss_mib" in p else "-",
                ", ".join(f"{k} {v}" for k, v in sorted(p.items()) if k not in OWN_COLUMNS) or "-",
                f"{self.seconds:.0f}", self.result]


def parse_junit(path: Path) -> list[Row]:
    """The rows of a JUnit XML file written by pytest (xunit1)."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        result = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                result = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        rows.append(Row(f"{module}::{case.get('name', '')}", float(case.get("time", "0")), result, props))
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def machine() -> str:
    load = os.getloadavg()
    return f"{os.cpu_count()} cores, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} at the start"


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace what is between the markers of ``doc`` with ``text`` (markers appended if absent)."""
    old = doc.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + block + old[old.index(END) + len(END):]
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(new)


def current_block(doc: Path = DOC) -> str:
    """What is between the markers of ``doc`` now ("" when there is nothing)."""
    old = doc.read_text()
    if BEGIN not in old or END not in old:
        return ""
    return old[old.index(BEGIN) + len(BEGIN):old.index(END)].strip("\n")


def merged(block: str, rows: list[Row], rerun: str) -> str:
    """``block`` with the rows of the rerun tests replaced (marked "(rerun)"), and the rerun's own
    heading line kept under it so the table says where each number came from."""
    fresh = {r.test: r for r in rows}
    lines = []
    for line in block.splitlines():
        test = line.split("`")[1] if line.startswith("| `") else None
        if test in fresh:
            row = fresh.pop(test)
            cells = row.cells()
            cells[0] += " (rerun)"
            line = "| " + " | ".join(cells) + " |"
        lines.append(line)
    for row in fresh.values():  # a test the earlier table did not have
        cells = row.cells()
        cells[0] += " (rerun)"
        lines.append("| " + " | ".join(cells) + " |")
    heading = rerun.split("\n", 1)[0]
    # an earlier rerun by the same command is superseded: its rows were just replaced
    same = "Rows marked (rerun): " + heading.split(" (", 1)[0]
    kept: list[str] = []
    for line in lines:
        if line.startswith(same + " ") or (not line.strip() and kept and not kept[-1].strip()):
            continue
        kept.append(line)
    return "\n".join(kept).rstrip("\n") + f"\n\nRows marked (rerun): {heading}"


def snapshot(dest: Path) -> str:
    """``git archive HEAD`` unpacked into ``dest``; returns the short commit id."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the chaos tests (full form) and write their table.")
    ap.add_argument("--reduced", action="store_true", help="the reduced form (as in every e2e run)")
    ap.add_argument("-k", dest="expr", default="", help="pytest -k expression to run some of them")
    ap.add_argument("--snapshot", action="store_true",
                    help="run the managers from `git archive HEAD` (a tree others edit meanwhile)")
    ap.add_argument("--no-docs", action="store_true", help=f"print the table only, leave {DOC.name} alone")
    ap.add_argument("--merge", action="store_true",
                    help="a rerun of some tests (-k): replace only their rows in the table already in "
                    f"{DOC.name}, each marked (rerun), and say under the table when and how they were rerun")
    args = ap.parse_args(argv)
    form = "reduced" if args.reduced else "full"
    env = dict(os.environ)
    env.pop("ESCALER_CHAOS", None)
    if not args.reduced:
        env["ESCALER_CHAOS"] = "full"
    started, host = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "chaos.xml"
        if args.snapshot:
            commit = snapshot(Path(tmp) / "src")
            env["ESCALER_E2E_SRC"] = str(Path(tmp) / "src")
            host += f"; managers and CRDs from commit {commit}"
        cmd = [sys.executable, "-m", "pytest", "tests/e2e", "-m", "chaos", "-q", "-p", "no:cacheprovider",
               "-o", "junit_family=xunit1", f"--junitxml={junit}"] + (["-k", args.expr] if args.expr else [])
        rc = subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode
        rows = parse_junit(junit) if junit.exists() else []
    took = time.monotonic() - t0
    given = argv if argv is not None else sys.argv[1:]
    shown = "python bench/chaos.py " + " ".join(shlex.quote(a) for a in given) if given else "make chaos"
    text = (f"`{shown}` ({form} form), {started}, {took / 60:.0f} min, on {host}:\n\n{table(rows)}")
    print("\n" + text)
    if not args.no_docs:
        write_doc(merged(current_block(), rows, text) if args.merge else text)
        print(f"\nwritten to {DOC.relative_to(ROOT)}")
    return rc if rows else (rc or 1)


if __name__ == "__main__":
    raise SystemExit(main())
