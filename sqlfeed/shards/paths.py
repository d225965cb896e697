"""Atomic replacement of files and folders: a new shardset or export appears whole.

Write into a temporary sibling, then :func:`replace_path` moves it over the target (the
old one is moved aside first and removed after).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

__all__ = ["remove_path", "replace_path"]


def replace_path(temporary: Path, target: Path) -> None:
    """Move ``temporary`` to ``target``, replacing what is there."""
    if target.exists():
        aside = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
        os.replace(target, aside)
        os.replace(temporary, target)
        remove_path(aside)
    else:
        os.replace(temporary, target)


def remove_path(path: Path) -> None:
    """Remove a file or folder if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()
