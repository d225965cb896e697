"""Write the development and CI lock from a virtual environment, and say what changed.

``make lock`` installs the project's extras, newest versions allowed by ``setup.cfg``, into a
fresh virtual environment and runs this script with that environment's Python::

    python .ci/lock.py --python build/lock-venv/bin/python --lock constraints-py311.txt

The lock is ``pip freeze`` of that environment (the editable project left out), each version
without its local label (``torch==2.13.0+cpu`` is locked as ``torch==2.13.0``, which pip
matches to the CPU wheel the Makefile's index gives, never to a CUDA build of another
version). ``make demo`` and ``make test`` install with ``pip install -c`` the lock, so a new
clone and CI get exactly these versions; ``tests/arch/test_lock.py`` checks that the lock
covers ``setup.cfg``'s extras, holds nothing stale, and is what the environment has.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

HEADER = """\
# The versions `make demo` and `make test` install (pip constraints), transitive ones included,
# for Python 3.11: the environment the test suite passed with. Refresh with `make lock`, which
# installs the newest versions setup.cfg allows into a fresh environment, writes this file and
# prints what changed; then run `make test` and commit both. Library users are not bound by it:
# setup.cfg keeps its ranges.
"""


def frozen(python: str) -> dict[str, str]:
    """``name -> version`` of every distribution installed in ``python``'s environment."""
    out = subprocess.run(
        [python, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    pins: dict[str, str] = {}
    for line in out.splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^+\s]+)(\+\S+)?", line.strip())
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def canonical(name: str) -> str:
    """A distribution name as PEP 503 normalizes it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    """``name -> version`` of a lock file (empty when it does not exist)."""
    if not path.exists():
        return {}
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonical(name)] = version
    return pins


def changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """One line per package added, removed or moved to another version."""
    lines = [f"+ {n}=={new[n]}" for n in sorted(new.keys() - old.keys())]
    lines += [f"- {n}=={old[n]}" for n in sorted(old.keys() - new.keys())]
    lines += [
        f"~ {n} {old[n]} -> {new[n]}" for n in sorted(old.keys() & new.keys()) if old[n] != new[n]
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the Python of the freshly made venv")
    parser.add_argument("--lock", required=True, type=Path, help="the lock file to write")
    args = parser.parse_args(argv)
    old, new = read_lock(args.lock), frozen(args.python)
    args.lock.write_text(HEADER + "".join(f"{n}=={v}\n" for n, v in sorted(new.items())))
    diff = changes(old, new)
    print(f"{args.lock}: {len(new)} packages, {len(diff)} changed")
    print("\n".join(diff))
    return 0


if __name__ == "__main__":
    sys.exit(main())
