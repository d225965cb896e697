"""What a reshard did: :class:`ReshardMetrics`, with its JSON form and its summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ReshardMetrics:
    """What a reshard did: its phases, volumes and the shards it wrote."""

    out: str
    format: str
    rows: int
    shards: int
    uid: str
    uid_generated: bool
    order: str
    """``shuffle``, ``sort`` or ``query`` (the query's own order)."""
    seed: int | None
    sort: list[str] | None
    group_by: list[str] | None
    target_rows: int | None
    target_bytes: int | None
    bytes_in: int
    bytes_in_from: str
    """``files``: the sizes of the input files; ``arrow``: the Arrow bytes of the rows."""
    bytes_extracted: int
    """Size of the extracted rows in DuckDB's format (the work database file)."""
    bytes_spilled: int
    """Peak size of DuckDB's temp files (sampled during the run)."""
    bytes_out: int
    phase_seconds: dict[str, float]
    seconds: float
    shard_rows: dict[str, float]
    shard_bytes: dict[str, float]
    deviation: float | None
    """Largest relative deviation from the target of a shard other than the last."""
    memory_limit: str | None = None
    threads: int | None = None
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "out": self.out,
            "format": self.format,
            "rows": self.rows,
            "shards": self.shards,
            "uid": self.uid,
            "uid_generated": self.uid_generated,
            "order": self.order,
            "seed": self.seed,
            "sort": self.sort,
            "group_by": self.group_by,
            "target_rows": self.target_rows,
            "target_bytes": self.target_bytes,
            "bytes_in": self.bytes_in,
            "bytes_in_from": self.bytes_in_from,
            "bytes_extracted": self.bytes_extracted,
            "bytes_spilled": self.bytes_spilled,
            "bytes_out": self.bytes_out,
            "phase_seconds": dict(self.phase_seconds),
            "seconds": self.seconds,
            "shard_rows": dict(self.shard_rows),
            "shard_bytes": dict(self.shard_bytes),
            "deviation": self.deviation,
            "memory_limit": self.memory_limit,
            "threads": self.threads,
        }

    def summary(self) -> str:
        """A few lines for people."""
        how = {"shuffle": f"shuffled (seed {self.seed})", "query": "in the query's order"}.get(
            self.order, f"sorted by {', '.join(self.sort or [])}"
        )
        groups = f", grouped by {', '.join(self.group_by)}" if self.group_by else ""
        target = f"{self.target_rows} rows" if self.target_rows else f"{_human(self.target_bytes)}"
        phases = ", ".join(f"{name} {sec:.1f}s" for name, sec in self.phase_seconds.items())
        deviation = "" if self.deviation is None else f", at most {self.deviation:.1%} off"
        uid = f"{self.uid} (generated: 0..{self.rows - 1})" if self.uid_generated else self.uid
        return "\n".join(
            [
                f"wrote {self.rows} rows {how}{groups} to {self.out}: {self.shards} {self.format} "
                f"shard(s), uid {uid}",
                f"time {self.seconds:.1f}s ({phases})",
                f"bytes in {_human(self.bytes_in)} ({self.bytes_in_from}), extracted "
                f"{_human(self.bytes_extracted)}, spilled {_human(self.bytes_spilled)}, "
                f"out {_human(self.bytes_out)}",
                f"shards of {target}: {_human(self.shard_bytes['min'])} to "
                f"{_human(self.shard_bytes['max'])}, mean {_human(self.shard_bytes['mean'])}; "
                f"{self.shard_rows['min']:.0f} to {self.shard_rows['max']:.0f} rows{deviation}",
            ]
        )


def _human(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}B"


def spread(values: Sequence[int]) -> dict[str, float]:
    """The min, max, mean and standard deviation of ``values`` (zeros when empty)."""
    if not values:
        return {"min": 0, "max": 0, "mean": 0.0, "stdev": 0.0}
    mean = sum(values) / len(values)
    stdev = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {
        "min": min(values),
        "max": max(values),
        "mean": round(mean, 1),
        "stdev": round(stdev, 1),
    }
