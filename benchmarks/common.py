"""Helpers every benchmark uses: progress on stderr and this process's memory figures.

The child-process protocol, repeats, agreement checks and the report are in
:mod:`benchmarks.harness`.
"""

from __future__ import annotations

import sys


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
