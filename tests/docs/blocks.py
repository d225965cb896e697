"""The fenced examples of README.md and docs/: found, classified and marked.

A block runs when its language is one of :data:`LANGUAGES`. One that cannot run says so
with an HTML comment on the line before its fence, with the reason:
``<!-- not-run: needs a BigQuery project -->``. A ``text`` block after a Python block,
marked ``<!-- expected-output -->``, is that block's expected output. In a ``console``
block, ``$ `` starts a command (a line ending in ``\\`` goes on) and the lines up to the
next one are its expected output. Expected output is compared as doctest does with
ELLIPSIS: ``...`` stands for any text (times, rates, metrics that vary). A block that is
not an example but follows one (what a not-run command prints, a folder it writes) is
compared or says why not: ``<!-- not-compared: the command needs a Spark cluster -->``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = {
    "python": "python",
    "py": "python",
    "bash": "shell",
    "sh": "shell",
    "shell": "shell",
    "console": "console",
}
"""Fence languages that are examples, and how each is run."""

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
_MARK = re.compile(
    r"^\s*<!--\s*(?P<word>not-run|not-compared|expected-output)\s*(?::\s*(?P<why>.*?))?\s*-->\s*$"
)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    path: Path
    line: int
    lang: str
    code: str
    not_run: str | None = None
    expected: str | None = None
    not_compared: str | None = None
    """Why a block that shows output (it follows an example) is not compared."""

    @property
    def kind(self) -> str | None:
        """``python``, ``shell``, ``console``, or None: not an example (a table, a tree)."""
        return LANGUAGES.get(self.lang)

    @property
    def where(self) -> str:
        """``docs/x.md:12`` (the fence's line)."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/ (hooks excluded)."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)
    return [ROOT / "README.md", *docs]


def blocks(path: Path) -> list[Block]:
    """The page's fenced blocks in order; expected-output blocks folded into their block."""
    lines = path.read_text().split("\n")
    found: list[Block] = []
    mark: tuple[str, str | None] | None = None
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        marked = _MARK.match(lines[i])
        if marked:
            mark = (marked["word"], marked["why"])
            i += 1
            continue
        if not fence:
            if lines[i].strip():
                mark = None
            i += 1
            continue
        start, close, indent = i, fence["fence"], len(fence["indent"])
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(close):
            body.append(lines[i][indent:])
            i += 1
        i += 1
        code = "\n".join(body) + "\n"
        if mark and mark[0] == "expected-output" and found and found[-1].kind == "python":
            last = found.pop()
            found.append(Block(last.path, last.line, last.lang, last.code, last.not_run, code))
        else:
            why = mark[1] if mark and mark[0] == "not-run" else None
            unmatched = mark[1] if mark and mark[0] == "not-compared" else None
            block = Block(path, start + 1, fence["lang"].lower(), code, why, None, unmatched)
            found.append(block)
        mark = None
    return found


def examples(path: Path) -> list[Block]:
    """The page's examples: the blocks in a language that runs."""
    return [b for b in blocks(path) if b.kind is not None]
