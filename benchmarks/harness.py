"""The one harness every benchmark runs its contenders through.

A benchmark is a list of :class:`Contender` s (a name, a label, the function that reads,
the optional packages it needs) and a config (a frozen dataclass, passed to the child as
JSON). :func:`measure` runs every contender ``repeat`` times, interleaved (round 1 runs
each contender once, then round 2, ...: a change of the machine's load touches them all
alike), each run in a fresh interpreter (``python -m benchmarks.<name> --child <id>
--child-config <json>``), so its imports, caches and peak memory are its own. The child
(:func:`child_main`) runs the contender and prints one line after :data:`RESULT_MARK`:
rows, wall seconds (the contender starts the clock with :func:`start`, after its
imports), the peak RSS (``VmHWM`` of the child's own address space), its RSS and CPU
time when the clock started, the details it reported and, when checking is on, a
checksum of the rows it read (:class:`Tally`).

:func:`agreement` checks that the contenders of one group read the same rows (the same
count and, where both report one, the same checksum); ``--smoke`` turns checking on and
runs every benchmark at a tiny scale (``make bench-smoke``). A contender whose optional
package is missing is skipped with the reason, never an error.

The report helpers: :func:`table` (aligned text), :func:`ratio`, :class:`Goal` (a goal
line marked met or MISSED) and :func:`load_line` (the load average for the header:
figures taken while other work runs are not comparable).
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from benchmarks.common import progress, status_bytes

ROOT = Path(__file__).resolve().parents[1]
"""The repository."""

__all__ = [
    "CHECK_ENV",
    "RESULT_MARK",
    "Contender",
    "Goal",
    "Outcome",
    "Result",
    "Run",
    "Tally",
    "add_smoke_flag",
    "agreement",
    "checking",
    "child_main",
    "load_line",
    "measure",
    "ratio",
    "run_child",
    "start",
    "summaries",
    "table",
]

C = TypeVar("C")

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULT_MARK = "@@sqlfeed-bench@@ "
"""Prefix of the one stdout line on which a child process reports its result."""
CHECK_ENV = "SQLFEED_BENCH_CHECK"
"""Set to ``1`` in a child's environment when its contender must compute a checksum."""

Outcome = tuple[int, float, dict[str, Any]]
"""What a contender returns: (rows, seconds, details)."""


@dataclass(frozen=True)
class Contender(Generic[C]):
    """One way of doing what a benchmark measures.

    Attributes:
        id: Its name for ``--only`` and the tables.
        label: What it runs, for the tables.
        run: Does its imports, calls :func:`start`, does the work; returns an
            :data:`Outcome`. Runs in the child process.
        group: Contenders of one group read the same rows (an engine, a format).
        requires: Optional top-level modules it imports; one missing skips it.
        partial: It reads a subset on purpose (pandas' first 1M rows): its rows are not
            compared with its group's.
    """

    id: str
    label: str
    run: Callable[[C], Outcome]
    group: str = ""
    requires: tuple[str, ...] = ()
    partial: bool = False

    def missing(self) -> str | None:
        """``not installed (<module>)`` when one of :attr:`requires` is missing."""
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return f"not installed ({module})"
        return None


# -- the child side ------------------------------------------------------------------------

_CLOCK: dict[str, float] = {}


def start() -> float:
    """Record the RSS and CPU time after the contender's imports; return the start time."""
    _CLOCK["rss"] = status_bytes("VmRSS")
    _CLOCK["cpu"] = _cpu_seconds()
    return time.perf_counter()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def checking() -> bool:
    """Whether this child must compute checksums (``--smoke`` or ``--check``)."""
    return os.environ.get(CHECK_ENV) == "1"


class Tally:
    """Rows read, and (when :func:`checking`) a checksum: the sum of an integer column.

    Every benchmark on ``lineitem`` sums ``l_orderkey``; the sum is order-free, so
    contenders that read the same rows in any order and any batching agree.
    """

    def __init__(self, key: str = "l_orderkey") -> None:
        self.key = key
        self.rows = 0
        self.checksum: int | None = 0 if checking() else None

    def add(self, batch: Any) -> None:
        """Count an Arrow ``RecordBatch`` / ``Table`` (and sum its key column)."""
        self.rows += int(batch.num_rows)
        if self.checksum is not None and batch.num_rows:
            import pyarrow.compute as pc

            self.checksum += int(pc.sum(batch.column(self.key)).as_py() or 0)

    def add_frame(self, frame: Any) -> None:
        """Count a pandas ``DataFrame`` (and sum its key column)."""
        self.rows += len(frame)
        if self.checksum is not None and len(frame):
            self.checksum += int(frame[self.key].sum())

    def add_values(self, rows: int, values: Any) -> None:
        """Count ``rows`` rows whose key column is ``values`` (NumPy array or tensor)."""
        self.rows += int(rows)
        if self.checksum is not None and rows:
            import numpy as np

            to_numpy = getattr(values, "numpy", None)
            self.checksum += int(np.asarray(to_numpy() if callable(to_numpy) else values).sum())

    def details(self) -> dict[str, Any]:
        """``{"checksum": ...}`` when checking, else ``{}``: merged into the details."""
        return {} if self.checksum is None else {"checksum": self.checksum}


def child_main(
    contenders: Mapping[str, Contender[C]], config: Callable[..., C], name: str, text: str
) -> int:
    """Run contender ``name`` in this (fresh) process and print its result on stdout.

    ``config`` builds the config from the JSON object's keys (the dataclass itself, or a
    function for a nested one)."""
    cfg = config(**json.loads(text or "{}"))
    result: dict[str, Any] = {"id": name}
    try:
        rows, seconds, details = contenders[name].run(cfg)
        checksum = details.pop("checksum", None)
        result.update(rows=rows, seconds=seconds, details=details, checksum=checksum)
    except ImportError as err:
        if _installed(err.name):
            traceback.print_exc()
            result["error"] = f"ImportError: {err}"
        else:
            result["skipped"] = f"not installed ({err.name})"
    except Exception as err:
        traceback.print_exc()
        result["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
    result["peak_rss_bytes"] = status_bytes("VmHWM")
    result["rss_after_imports_bytes"] = int(_CLOCK.get("rss", -1))
    result["cpu_seconds"] = _cpu_seconds() - _CLOCK.get("cpu", 0.0)
    result["load"] = os.getloadavg()[0]
    print(RESULT_MARK + json.dumps(result, default=str), flush=True)
    return 1 if "error" in result else 0


def _installed(module: str | None) -> bool:
    """Whether ``module``'s top-level package can be found: an ImportError from inside an
    installed package (sqlfeed's own, say) is a failure, not a missing optional package."""
    if not module:
        return True
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


# -- the parent side -----------------------------------------------------------------------


def run_child(
    module: str, name: str, cfg: Any, timeout: float, check: bool = False
) -> dict[str, Any]:
    """Run contender ``name`` of ``benchmarks.<module>`` in a fresh interpreter and return
    the result it printed (``{"error": ...}`` when it timed out or printed none)."""
    config = asdict(cfg) if is_dataclass(cfg) and not isinstance(cfg, type) else cfg
    command = [sys.executable, "-m", f"benchmarks.{module}", "--child", name]
    command += ["--child-config", json.dumps(config, default=str)]
    env = dict(os.environ)
    env[CHECK_ENV] = "1" if check else "0"
    try:
        proc = subprocess.run(
            command,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
            return result
    return {"error": f"child exited with status {proc.returncode} and no result"}


@dataclass
class Run:
    """One run of one contender, as its child reported it."""

    seconds: float
    rows: int
    peak_rss_bytes: int = -1
    rss_after_imports_bytes: int = -1
    cpu_seconds: float = 0.0
    load: float = -1.0
    checksum: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    """All runs of one contender.

    Attributes:
        id: The contender's id.
        label: What it runs.
        group: Its group (contenders of one group read the same rows).
        partial: It reads a subset on purpose.
        runs: Every successful run, in order.
        error: The error of a failed run (the contender is not run again).
        skipped: Why it was not run (an optional package missing).
    """

    id: str
    label: str
    group: str = ""
    partial: bool = False
    runs: list[Run] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    @property
    def best_run(self) -> Run | None:
        """The fastest run."""
        return min(self.runs, key=lambda r: r.seconds, default=None)

    @property
    def best(self) -> float | None:
        """The fastest run's seconds."""
        run = self.best_run
        return run.seconds if run else None

    @property
    def median(self) -> float | None:
        """The median run's seconds."""
        return statistics.median(r.seconds for r in self.runs) if self.runs else None

    @property
    def rows(self) -> int:
        """Rows read by the fastest run (-1 when none succeeded)."""
        run = self.best_run
        return run.rows if run else -1

    @property
    def peak_rss_bytes(self) -> int:
        """The largest peak RSS of its runs."""
        return max((r.peak_rss_bytes for r in self.runs), default=-1)

    def rate(self, seconds: float | None = None) -> float | None:
        """Rows per second at ``seconds`` (default: the best run's)."""
        seconds = self.best if seconds is None else seconds
        return self.rows / seconds if seconds and self.rows >= 0 else None


def compile_project() -> None:
    """Byte-compile sqlfeed, dialects and stats, as installing a wheel does.

    The project is installed in development mode; where ``PYTHONDONTWRITEBYTECODE`` is set
    (this machine sets it), every child would otherwise compile the modules it imports
    lazily from source inside its clock (about 0.2 s), a cost no user's installed copy has
    (other contenders come from wheels, compiled when installed).
    """
    compileall.compile_dir(str(ROOT / "sqlfeed"), quiet=1)  # with sqlfeed.stats, .dialects


def measure(
    module: str,
    entries: Sequence[tuple[Contender[C], C]],
    repeat: int,
    timeout: float,
    *,
    check: bool = False,
    before: Callable[[Contender[C], C], None] | None = None,
    after: Callable[[Contender[C], C, Run], None] | None = None,
) -> list[Result]:
    """Run every ``(contender, config)`` ``repeat`` times, interleaved, each run in a fresh
    interpreter (``benchmarks.<module>``).

    Args:
        module: The benchmark's module name under ``benchmarks``.
        entries: What to run, each contender with its config.
        repeat: Rounds.
        timeout: Seconds after which a child is killed.
        check: Whether the children compute checksums (see :class:`Tally`).
        before: Called before each run (to clear an output folder, say).
        after: Called after each successful run (to measure what it wrote, say).

    Returns:
        One :class:`Result` per entry, in order.
    """
    compile_project()
    results = [Result(c.id, c.label, c.group, c.partial) for c, _ in entries]
    for result, (contender, _) in zip(results, entries, strict=True):
        result.skipped = contender.missing()
        if result.skipped:
            progress(f"[{contender.id}] skipped: {result.skipped}")
    for round_ in range(1, repeat + 1):
        for result, (contender, cfg) in zip(results, entries, strict=True):
            if result.error or result.skipped:
                continue
            if before is not None:
                before(contender, cfg)
            got = run_child(module, contender.id, cfg, timeout, check)
            tag = f"[{contender.id}] run {round_}/{repeat}"
            if "skipped" in got or "error" in got:
                result.skipped, result.error = got.get("skipped"), got.get("error")
                progress(f"{tag}: {'ERROR ' + str(result.error) if result.error else 'skipped'}")
                continue
            run = Run(
                seconds=float(got["seconds"]),
                rows=int(got["rows"]),
                peak_rss_bytes=int(got.get("peak_rss_bytes", -1)),
                rss_after_imports_bytes=int(got.get("rss_after_imports_bytes", -1)),
                cpu_seconds=float(got.get("cpu_seconds", 0.0)),
                load=float(got.get("load", -1.0)),
                checksum=got.get("checksum"),
                details=dict(got.get("details") or {}),
            )
            if after is not None:
                after(contender, cfg, run)
            first = result.runs[0] if result.runs else run
            if (run.rows, run.checksum) != (first.rows, first.checksum):
                result.error = (
                    f"run {round_} read {run.rows} rows (checksum {run.checksum}), "
                    f"run 1 {first.rows} ({first.checksum})"
                )
            result.runs.append(run)
            progress(
                f"{tag}: {run.rows:,} rows in {run.seconds:.2f}s, "
                f"peak RSS {run.peak_rss_bytes / 2**20:,.0f} MB"
            )
    return results


def summaries(results: Sequence[Result]) -> dict[str, dict[str, Any]]:
    """Each result's best run as a plain dict (``rows``, ``seconds``, ``rows_per_second``,
    ``peak_rss_bytes``, ``details``, ``runs``), or ``{"error": ...}``: the JSON form."""
    out: dict[str, dict[str, Any]] = {}
    for result in results:
        run = result.best_run
        if run is None or result.error:
            out[result.id] = {"error": result.error or result.skipped or "no run"}
            continue
        out[result.id] = {
            "rows": run.rows,
            "seconds": run.seconds,
            "rows_per_second": run.rows / max(run.seconds, 1e-9),
            "peak_rss_bytes": run.peak_rss_bytes,
            "details": dict(run.details),
            "runs": [r.seconds for r in result.runs],
        }
    return out


def agreement(results: Sequence[Result]) -> list[str]:
    """The disagreements within each group: rows (and checksums, where both have one) that
    differ from the group's first successful contender. Empty when all agree."""
    problems = []
    first: dict[str, Result] = {}
    for result in results:
        run = result.best_run
        if run is None or result.partial:
            continue
        reference = first.setdefault(result.group, result)
        ref = reference.best_run
        if ref is None or reference is result:
            continue
        if run.rows != ref.rows:
            problems.append(f"{result.id} read {run.rows} rows, {reference.id} {ref.rows}")
        elif None not in (run.checksum, ref.checksum) and run.checksum != ref.checksum:
            problems.append(f"{result.id} checksum {run.checksum}, {reference.id} {ref.checksum}")
    return problems


# -- the report ----------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    return a / b if a is not None and b else None


@dataclass(frozen=True)
class Goal:
    """A goal and the figure measured for it.

    Attributes:
        text: What is compared, e.g. ``"sqlfeed rows/s vs ConnectorX"``.
        value: The measured figure (None: not measured).
        target: The bound.
        at_most: True when the figure must stay at or below the bound (a cost); by
            default it must reach it.
    """

    text: str
    value: float | None
    target: float
    at_most: bool = False

    @property
    def met(self) -> bool:
        """Whether the figure was measured and is on the right side of the bound."""
        if self.value is None:
            return False
        return self.value <= self.target if self.at_most else self.value >= self.target

    def line(self) -> str:
        """``met: <text> 1.23x (goal >= 1.0x)``, or ``MISSED: ...``."""
        shown = "n/a" if self.value is None else f"{self.value:.2f}x"
        sign = "<=" if self.at_most else ">="
        verdict = "met" if self.met else "MISSED"
        return f"{verdict}: {self.text} {shown} (goal {sign} {self.target:g}x)"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], right: Iterable[int] = ()) -> str:
    """An aligned text table (columns in ``right`` right-aligned)."""
    body = [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in [list(header), *body]) for i in range(len(header))]
    right_set = set(right)

    def render(row: Sequence[str]) -> str:
        cells = [
            c.rjust(w) if i in right_set else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    lines = [render(list(header)), "  ".join("-" * w for w in widths)]
    return "\n".join(lines + [render(r) for r in body])


def load_line() -> str:
    """``load average 1.02 0.97 0.88 (2 CPUs)``: for a report's header."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def add_smoke_flag(parser: argparse.ArgumentParser) -> None:
    """``--smoke``: a tiny scale, one round, contenders checked to agree (``make bench-smoke``)."""
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny scale, one round, check that the contenders agree (make bench-smoke)",
    )
