"""Reshard's folders: the locked work folders, the atomic output, leftovers of dead runs.

The output is written into ``.<name>.tmp-<random>`` beside it and renamed into place at
the end (:func:`write_aside`); a failed or interrupted run removes that folder, and a
later run removes those of dead runs (a live run holds a lock on its folder).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sqlfeed.shards.paths import remove_path, replace_path

try:
    import fcntl
except ImportError:  # no flock: stale folders are only removed by age
    _FLOCK = False
else:
    _FLOCK = True

T = TypeVar("T")


class LockedFolder:
    """A fresh folder ``<parent>/<prefix><random>`` that this process holds a lock on.

    Creating one first removes the folders of that prefix whose owner is gone (their lock
    can be taken), so a run killed with SIGKILL leaves nothing a later run trips on.
    """

    LOCK = ".lock"

    def __init__(self, parent: Path, prefix: str) -> None:
        _remove_stale(parent, prefix)
        self.path = parent / f"{prefix}{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        self._fd: int | None = os.open(self.path / self.LOCK, os.O_CREAT | os.O_RDWR, 0o644)
        _lock(self._fd, wait=False)

    def release(self) -> None:
        """Forget the lock file (before the folder is renamed) and let go of the lock."""
        with contextlib.suppress(OSError):
            (self.path / self.LOCK).unlink()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """Remove the folder and let go of the lock."""
        remove_path(self.path)
        self.release()


def _lock(fd: int, *, wait: bool) -> bool:
    if not _FLOCK:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        return False
    return True


def _remove_stale(parent: Path, prefix: str, min_age: float = 60.0) -> None:
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.is_dir()]
    except OSError:
        return
    for folder in candidates:
        lock = folder / LockedFolder.LOCK
        try:
            fd = os.open(lock, os.O_RDWR)
        except FileNotFoundError:  # being created or renamed right now, or very old
            with contextlib.suppress(OSError):
                if time.time() - folder.stat().st_mtime > min_age:
                    remove_path(folder)
            continue
        except OSError:
            continue
        try:
            if _lock(fd, wait=False):
                remove_path(folder)
        finally:
            os.close(fd)


def write_aside(out: Path, temp_dir: Path | None, write: Callable[[Path, Path], T]) -> T:
    """Call ``write(folder, work)`` and rename ``folder`` to ``out`` when it returns.

    ``folder`` is a locked folder beside ``out``; ``work`` a locked folder in ``temp_dir``
    or, without one, ``folder/.work`` (removed before the rename). On any error ``folder``
    is removed and ``out`` left as it was.
    """
    out = out.absolute()
    aside = LockedFolder(out.parent, f".{out.name}.tmp-")
    work: LockedFolder | None = None
    try:
        if temp_dir is not None:
            work = LockedFolder(temp_dir, ".sqlfeed-reshard-")
            work_path = work.path
        else:
            work_path = aside.path / ".work"
            work_path.mkdir()
        result = write(aside.path, work_path)
        if work is None:
            remove_path(work_path)
        aside.release()
        replace_path(aside.path, out)
        return result
    except BaseException:
        aside.remove()
        raise
    finally:
        if work is not None:
            work.remove()
