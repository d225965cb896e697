"""Helpers every benchmark uses: progress on stderr and this process's memory figures."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def progress(message: str) -> None:
    """Print a progress line to stderr."""
    print(message, file=sys.stderr, flush=True)


def status_bytes(key: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (e.g. ``VmHWM``, the peak RSS) in bytes, or -1.

    ``VmHWM`` belongs to this address space; ``ru_maxrss`` would be inherited across fork.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return -1


def run_child(command: list[str], mark: str, cwd: str, timeout: float) -> dict[str, Any]:
    """Run a benchmark child (a fresh interpreter) and return the JSON result it printed
    after ``mark`` on stdout, or ``{"error": ...}`` when it timed out or printed none."""
    try:
        proc = subprocess.run(
            command, cwd=cwd, stdout=subprocess.PIPE, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(mark):
            result: dict[str, Any] = json.loads(line[len(mark) :])
            return result
    return {"error": f"child exited with status {proc.returncode} and no result"}
