"""What a finished write reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["MODES", "WriteReport"]

MODES = ("create", "replace", "append")
"""How the rows land: a new table, a table replaced atomically, rows added to a table."""


@dataclass
class WriteReport:
    """What a finished write put where."""

    table: str
    rows: int
    mode: str
    seconds: float = 0.0
    finished_by: str = "this process"
    """``this process``, or ``before`` when an earlier finish had put the rows in place."""

    def to_dict(self) -> dict[str, Any]:
        """The report as plain data."""
        return asdict(self)
