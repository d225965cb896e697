"""Run one page's examples in order in the current folder (used by test_examples.py).

``python run_blocks.py BLOCKS.json``: Python blocks share one namespace (a page reads as
one session), shell blocks run in bash with ``-euo pipefail``, console commands one by
one with their output checked. The first failure prints where it is and why, and exits 1.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import json
import subprocess
import sys
import traceback

CHECK = doctest.OutputChecker()
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def same(want: str, got: str) -> bool:
    """Whether ``got`` is the ``want`` shown (``...``: any text; blank runs: one space)."""
    return CHECK.check_output(want.strip() + "\n", got.strip() + "\n", FLAGS)


def fail(where: str, message: str) -> None:
    """Report a failed block and stop."""
    print(f"\nFAILED {where}\n{message}", file=sys.stderr)
    sys.exit(1)


def run_python(block: dict[str, str], namespace: dict[str, object]) -> None:
    """Exec the block in the page's namespace; check its stdout if one is shown."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block["code"], block["where"], "exec"), namespace)
    except BaseException:
        fail(block["where"], traceback.format_exc(limit=-8))
    got = out.getvalue()
    sys.stdout.write(got)
    if block.get("expected") is not None and not same(block["expected"], got):
        fail(block["where"], f"expected output:\n{block['expected']}\ngot:\n{got}")


def bash(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in bash, stdout and stderr together."""
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )


def run_shell(block: dict[str, str]) -> None:
    """Run the block as a bash script; it must exit 0."""
    done = bash(block["code"])
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        fail(block["where"], f"exit {done.returncode}:\n{done.stdout}")


def commands(code: str) -> list[tuple[str, str]]:
    """A console block's ``(command, expected output)`` pairs."""
    pairs: list[tuple[str, list[str]]] = []
    going_on = False
    for line in code.splitlines():
        if going_on:
            pairs[-1] = (pairs[-1][0] + "\n" + line, pairs[-1][1])
        elif line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
        going_on = bool(pairs) and not pairs[-1][1] and line.endswith("\\")
    return [(command, "\n".join(out)) for command, out in pairs]


def run_console(block: dict[str, str]) -> None:
    """Run each ``$`` command; its output must match what follows it; an error exit only
    where the output shown is an error."""
    for command, want in commands(block["code"]):
        done = bash(command)
        sys.stdout.write(f"$ {command}\n{done.stdout}")
        shown_error = "error" in want
        if done.returncode != 0 and not shown_error:
            fail(block["where"], f"$ {command}\nexit {done.returncode}:\n{done.stdout}")
        if want.strip() and not same(want, done.stdout):
            fail(block["where"], f"$ {command}\nexpected:\n{want}\ngot:\n{done.stdout}")


def main(path: str) -> None:
    """Run the blocks of the JSON file ``path`` in order."""
    with open(path) as f:
        blocks = json.load(f)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in blocks:
        print(f"--- {block['where']} ({block['kind']})", flush=True)
        if block["kind"] == "python":
            run_python(block, namespace)
        elif block["kind"] == "shell":
            run_shell(block)
        else:
            run_console(block)
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1])
