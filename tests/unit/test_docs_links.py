"""The documentation holds together (issue 29).

* ``README.md`` stays short (at most 250 lines) and ``docs/index.md`` links every page under
  ``docs/`` (``docs/**/*.md``).
* Every relative link in ``README.md`` and ``docs/**/*.md`` resolves: the file or folder exists, and
  a ``#anchor`` is a heading of the target page under GitHub's slug rules (lower case, punctuation
  dropped, spaces to ``-``, ``-1``, ``-2`` ... for repeated headings). Links inside code are not links.
* Every command the docs write in code (a span or a code block) names what exists:
  ``python -m escaler SUB`` / ``escaler SUB`` / ``kubectl escaler SUB`` a sub-command of
  ``escaler.cli.main.build_parser`` and each of its ``--flag``\\ s an option of that sub-command's
  parser; ``make TARGET`` a target of the Makefile.

Each check is shown to bite on a broken sample (the ``*_bites`` tests), so a parser that finds
nothing cannot pass silently.
"""

from __future__ import annotations

import argparse
import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from escaler.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


# ------------------------------------------------------------------ Markdown, as GitHub reads it

FENCE = re.compile(r"^(```|~~~)")


def split_code(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the prose with fenced blocks blanked, line numbers kept; [(language, body)] of the blocks)."""
    prose: list[str] = []
    blocks: list[tuple[str, str]] = []
    lang, body, inside = "", [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            if inside:
                blocks.append((lang, "\n".join(body)))
                inside, body = False, []
            else:
                inside, lang = True, line.strip()[3:].strip()
            prose.append("")
        elif inside:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def code_spans(prose: str) -> list[str]:
    return [" ".join(s.split()) for s in re.findall(r"(?<!`)`([^`]+)`(?!`)", prose.replace("\n", " "))]


def github_slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = "".join(ch for ch in text
                   if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    prose, _ = split_code(text)
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", prose, re.M):
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    out |= set(re.findall(r'<a\s+(?:name|id)="([^"]+)"', prose))
    return out


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def links(page: Path, text: str | None = None) -> list[Link]:
    prose, _ = split_code(page.read_text(encoding="utf-8") if text is None else text)
    prose = re.sub(r"(?<!`)`[^`\n]+`", "", prose)  # a link inside a code span is not a link
    found = []
    for n, line in enumerate(prose.splitlines(), 1):
        for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            found.append(Link(page, n, m.group(1)))
    return found


def broken(link: Link) -> str | None:
    """Why ``link`` does not resolve, or None."""
    target = link.target
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path_part, _, anchor = target.partition("#")
    dest = (link.page.parent / path_part).resolve() if path_part else link.page
    if not dest.exists():
        return f"{path_part}: no such file"
    if (anchor and dest.is_file() and dest.suffix == ".md"
            and anchor not in anchors(dest.read_text(encoding="utf-8"))):
        return f"#{anchor}: no such heading in {_rel(dest)}"
    return None


# ------------------------------------------------------------------ commands

@cache
def subcommands() -> dict[str, set[str]]:
    """Sub-command -> its option strings (with the global ones), from the CLI's own parsers."""
    parser, _ = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    top = set(parser._option_string_actions)
    return {name: set(sub._option_string_actions) | top for name, sub in action.choices.items()}


@cache
def make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^([\w.-]+)\s*:(?!=)", makefile, re.M)}


# a command begins the line (after env assignments, `do`/`then`, `sudo`): what follows is its words
_LEAD = r"^(?:(?:do|then|sudo|nice|time)\s+|[A-Z_][A-Z0-9_]*=\S*\s+)*"
ESCALER = re.compile(_LEAD + r"(?:python3? -m escaler|kubectl escaler|kubectl-escaler|escaler)((?:\s+\S+)*)$")
MAKE = re.compile(_LEAD + r"make((?:\s+\S+)*)$")


def commands_in(text: str) -> list[str]:
    """Every command line written in code: code spans and the lines of code blocks (``\\``
    continuations joined), each cut at a pipe, ``;``, ``&&``, ``&`` or a comment."""
    prose, blocks = split_code(text)
    lines = code_spans(prose)
    for lang, body in blocks:
        if lang in ("", "sh", "bash", "console", "shell", "text"):
            body = re.sub(r"\\\n\s*", " ", body)
            lines += [re.sub(r"^\$ ", "", ln.strip()) for ln in body.splitlines()]
    out = []
    for line in lines:
        for part in re.split(r"\s*(?:\|\|?|;|&&|&|\s#\s.*)\s*", line):
            if part.strip():
                out.append(part.strip())
    return out


def command_errors(command: str) -> list[str]:
    errors = []
    subs = subcommands()
    m = ESCALER.match(command)
    if m and m.group(1).strip():
        words = m.group(1).split()
        sub = words[0]
        if re.fullmatch(r"[a-z][a-z-]*", sub):
            if sub not in subs:
                errors.append(f"`{command}`: no sub-command {sub!r}")
            else:
                for word in words[1:]:
                    flag = word.split("=", 1)[0]
                    if re.fullmatch(r"--[a-z][\w-]*", flag) and flag not in subs[sub]:
                        errors.append(f"`{command}`: `escaler {sub}` has no flag {flag}")
    m = MAKE.match(command)
    if m and m.group(1).strip():
        target = next((w for w in m.group(1).split() if not w.startswith("-") and "=" not in w), None)
        if target and re.fullmatch(r"[a-z][\w-]*", target) and target not in make_targets():
            errors.append(f"`{command}`: no make target {target!r}")
    return errors


# ------------------------------------------------------------------ the checks

def test_the_readme_reads_in_five_minutes() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move the detail under docs/"


def test_the_index_links_every_page_under_docs() -> None:
    linked = {(INDEX.parent / link.target.partition("#")[0]).resolve()
              for link in links(INDEX) if not re.match(r"^[a-z]+:", link.target)}
    missing = [_rel(p) for p in sorted(DOCS.rglob("*.md")) if p != INDEX and p.resolve() not in linked]
    assert not missing, f"docs/index.md does not link: {missing}"


def test_every_relative_link_resolves() -> None:
    found = [link for page in pages() for link in links(page)]
    assert len(found) > 100, "the link parser found almost nothing"
    bad = [f"{_rel(link.page)}:{link.line}: {link.target}: {why}"
           for link in found if (why := broken(link))]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_every_command_the_docs_write_exists() -> None:
    checked = 0
    bad = []
    for page in pages():
        for command in commands_in(page.read_text(encoding="utf-8")):
            if ESCALER.match(command) or MAKE.match(command):
                checked += 1
            bad += [f"{_rel(page)}: {e}" for e in command_errors(command)]
    assert checked > 50, f"only {checked} commands found"
    assert not bad, "\n".join(bad)


# ------------------------------------------------------------------ each check bites

def test_slugs_follow_github() -> None:
    assert github_slug("Migration (0.1 → this release)") == "migration-01--this-release"
    assert github_slug("Some components only (`--controllers`)") == "some-components-only---controllers"
    assert github_slug("metricProvider: Flow (flow sizing)") == "metricprovider-flow-flow-sizing"
    assert github_slug("`GET /decisions/v1/namespaces/{namespace}/{serviceId}`") == \
        "get-decisionsv1namespacesnamespaceserviceid"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_a_broken_link_or_anchor_fails(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    (tmp_path / "q.md").write_text("# Q\n## Some part\n", encoding="utf-8")
    page.write_text("[ok](q.md#some-part) [gone](nope.md) [bad anchor](q.md#no-part) `[code](x.md)`\n"
                    "[self](#missing)\n```\n[in a block](y.md)\n```\n", encoding="utf-8")
    why = {link.target: broken(link) for link in links(page)}
    assert why == {"q.md#some-part": None, "nope.md": "nope.md: no such file",
                   "q.md#no-part": "#no-part: no such heading in " + _rel(tmp_path / "q.md"),
                   "#missing": "#missing: no such heading in " + _rel(page)}


def test_a_misspelt_flag_subcommand_or_target_fails() -> None:
    assert command_errors("python -m escaler manager --webhook-port=0 --metrics-bind-address :8080") == []
    assert command_errors("python -m escaler manager --webhok-port=0") == [
        "`python -m escaler manager --webhok-port=0`: `escaler manager` has no flag --webhok-port"]
    assert command_errors("escaler simulate --trace code --out /tmp/x") == []
    assert command_errors("escaler explan -n NS x") == ["`escaler explan -n NS x`: no sub-command 'explan'"]
    assert command_errors("make e2e E2E_CLUSTER=kind") == []
    assert command_errors("make tests") == ["`make tests`: no make target 'tests'"]
    text = "run `kubectl escaler explain --kindd LLMScaler x`\n```sh\nmake demo  # the demo\nmake dmeo\n```\n"
    errors = [e for c in commands_in(text) for e in command_errors(c)]
    assert errors == ["`kubectl escaler explain --kindd LLMScaler x`: `escaler explain` has no flag --kindd",
                      "`make dmeo`: no make target 'dmeo'"]
