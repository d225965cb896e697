"""Griffe extension: bare doctests in docstrings render as code.

A docstring may show a doctest in its text (``>>> ...`` lines and their output) outside an
``Examples:`` section. Markdown would render it as a paragraph (and read ``[4, 4, 2]`` as a
link), so this extension fences each such block as ``pycon`` when the docstring is loaded.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLES = re.compile(r"^\s*Examples?:\s*$")


def fence_doctests(text: str) -> str:
    """``text`` with every doctest block outside an Examples section in a pycon fence."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    fenced = False
    while i < len(lines):
        line = lines[i]
        if _EXAMPLES.match(line):
            return "\n".join(out + lines[i:])
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class FenceDoctests(griffe.Extension):
    """Fences bare doctests in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring text before it is parsed."""
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
