"""SQL over a dataset of shardsets, in DuckDB, and its physical (``fragments``) partitions.

:class:`DatasetSource` is a DuckDB :class:`~sqlfeed.io.Source` in which the dataset
is a view (``dataset`` by default) of the joined rows, so plans, stats, the Feeder, the
dispatcher and the tf adapter work on it unchanged.

Two ways of reading, chosen per dataset:

* all shardsets in Parquet: plain DuckDB SQL over ``read_parquet`` (projection and
  filters reach the files). A fragment reads one shard index (or a range of row groups
  of the main shardset's file) and joins the other shardsets' shard of the same index,
  ordered by the main file's row number so that a fragment's rows always come in the
  same order.
* anything else (ORC, read through pyarrow: DuckDB has no ORC reader; CSV; JSONL; tar):
  Arrow streams registered on the DuckDB connection that runs each query. They read
  one shard per shardset at a time and join in Arrow, keeping the main shardset's order.

Fragment queries name everything they read (file paths, or stream names that encode the
shard and the row group / stripe / byte range), so a plan made in one process runs in
any other process that opened the same dataset.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from sqlfeed.dialects import InvalidArgumentError, ShardsetError
from sqlfeed.io import DEFAULT_BATCH_ROWS, DuckDBSource
from sqlfeed.plans.filemeta import even_runs, orc_open, orc_stripes, parquet_row_groups
from sqlfeed.plans.fragments import around_view
from sqlfeed.shards.join import join_on_uid
from sqlfeed.shards.reader import lines_are_rows, read_shard, read_text_range
from sqlfeed.shards.shardset import Shardset
from sqlfeed.sql import ParsedQuery

__all__ = ["TRACE_COLUMNS", "DatasetSource", "Fragment", "JoinedShardsets"]

TRACE_COLUMNS = ("sqlfeed_file", "sqlfeed_row_group", "sqlfeed_row")
"""Provenance columns added with ``trace=True``: the main shardset's shard file, its
Parquet row group / ORC stripe (0 for CSV, JSONL and tar), and the row's index in the file."""

_STREAM = re.compile(r"\bsqlfeed_frag_(\d+)_(all|[rsb]\d+_\d+)\b")


@dataclass(frozen=True)
class Fragment:
    """A piece of the dataset that one partition reads: one shard, or part of its file."""

    shard: int
    kind: str
    """``shard`` (the whole shard), ``rows`` (Parquet row range), ``stripes`` (ORC stripe
    range) or ``bytes`` (CSV/JSONL byte range)."""
    start: int
    end: int
    rows: int
    """Rows of the main shardset in the fragment (estimated for stripes and byte ranges)."""
    file: str
    """The main shardset's shard file."""
    note: str = ""
    """Why a big file stayed one fragment, when it did."""

    @property
    def label(self) -> str:
        where = {
            "shard": "",
            "rows": f" rows [{self.start}, {self.end})",
            "stripes": f" stripes [{self.start}, {self.end})",
            "bytes": f" bytes [{self.start}, {self.end})",
        }[self.kind]
        return f"shard {self.shard}{where}" + (f" ({self.note})" if self.note else "")

    @property
    def stream_name(self) -> str:
        if self.kind == "shard":
            return f"sqlfeed_frag_{self.shard}_all"
        return f"sqlfeed_frag_{self.shard}_{self.kind[0]}{self.start}_{self.end}"


class JoinedShardsets(Protocol):
    """What :class:`DatasetSource` reads of a dataset.

    A :class:`~sqlfeed.shards.datasets.Dataset`, which makes its source with this module: a
    protocol here, not an import of it.
    """

    @property
    def path(self) -> Path:
        """The dataset's folder (for messages)."""
        ...

    @property
    def uid(self) -> str:
        """The column that joins the shardsets."""
        ...

    @property
    def shardsets(self) -> list[Shardset]:
        """Every shardset, oldest first."""
        ...

    @property
    def main(self) -> Shardset:
        """The shardset whose shards the joined rows follow."""
        ...

    @property
    def others(self) -> list[Shardset]:
        """The shardsets joined to the main one, oldest first."""
        ...

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the joined rows."""
        ...


class DatasetSource(DuckDBSource):
    """DuckDB with a dataset as a view; see the module docstring."""

    def __init__(
        self,
        dataset: JoinedShardsets,
        *,
        name: str = "dataset",
        trace: bool = False,
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise InvalidArgumentError(f"the view name {name!r} must be a plain identifier")
        if not dataset.shardsets:
            raise ShardsetError(f"dataset {dataset.path} has no shardsets to query")
        owned = connection is None
        super().__init__(
            connection or duckdb.connect(), owned=owned, label=f"dataset:{dataset.path}"
        )
        self.dataset = dataset
        self.view = name
        self.trace = trace
        self.native = all(s.format == "parquet" for s in dataset.shardsets)
        self._main = dataset.main
        self._others = dataset.others
        self._rowgroup_table = f"sqlfeed_row_groups_{uuid.uuid4().hex[:8]}"
        if self.native:
            self._create_views()

    def close(self) -> None:
        if not self._owned and self.native:
            with self.connection.cursor() as cursor:
                cursor.execute(f'DROP VIEW IF EXISTS "{self.view}"')
                cursor.execute(f'DROP TABLE IF EXISTS "{self._rowgroup_table}"')
        super().close()

    @property
    def schema_of_rows(self) -> pa.Schema:
        """The Arrow schema of the view's rows (with the trace columns when tracing)."""
        schema = self.dataset.schema
        if self.trace:
            for column, arrow_type in zip(
                TRACE_COLUMNS, (pa.string(), pa.int64(), pa.int64()), strict=True
            ):
                schema = schema.append(pa.field(column, arrow_type))
        return schema

    # -- cursors: streams are registered on the connection that runs each query ----------

    def _cursor(self, sql: str = "") -> duckdb.DuckDBPyConnection:
        cursor = self.connection.cursor()
        if self.native:
            return cursor
        if re.search(rf'\b{re.escape(self.view)}\b|"{re.escape(self.view)}"', sql) or not sql:
            cursor.register(self.view, self._reader(None))
        for match in _STREAM.finditer(sql):
            fragment = self._decode(match)
            cursor.register(fragment.stream_name, self._reader(fragment))
        return cursor

    def _decode(self, match: re.Match[str]) -> Fragment:
        shard, spec = int(match.group(1)), match.group(2)
        file = str(self._main.shard_path(shard))
        if spec == "all":
            return Fragment(shard, "shard", 0, 0, 0, file)
        kind = {"r": "rows", "s": "stripes", "b": "bytes"}[spec[0]]
        start, end = (int(part) for part in spec[1:].split("_"))
        return Fragment(shard, kind, start, end, 0, file)

    def _reader(self, fragment: Fragment | None) -> pa.RecordBatchReader:
        """A fresh Arrow stream of the joined rows of one fragment (None: all of them)."""
        schema = self.schema_of_rows

        def batches() -> Iterator[pa.RecordBatch]:
            pieces = (
                [fragment]
                if fragment is not None
                else [
                    Fragment(index, "shard", 0, 0, 0, str(self._main.shard_path(index)))
                    for index in self._main.shard_indices
                ]
            )
            for piece in pieces:
                for table in self._joined(piece):
                    conformed = table.select(schema.names).cast(schema)
                    yield from conformed.to_batches(DEFAULT_BATCH_ROWS)

        return pa.RecordBatchReader.from_batches(schema, batches())

    def _joined(self, fragment: Fragment) -> Iterator[pa.Table]:
        """The fragment's main rows joined with the other shardsets' shard (Arrow).

        A shardset without this shard index joins as an empty table of its columns: its
        samples are missing, so the fragment's rows are skipped, and the columns are there.
        """
        others = [other.read_shard(fragment.shard) for other in self._others]
        for table in _main_pieces(self._main, fragment, self.trace):
            for other in others:
                table = join_on_uid(table, other, self.dataset.uid)
            yield table

    # -- the native (all Parquet) view ------------------------------------------------------

    def _aligned(self, shard: int | None) -> bool:
        """Whether the other shardsets' shard ``shard`` holds the main shard's uids in its order.

        ``shard`` None: every shard. Equal uid digests in the manifests say so, and rows
        then pair up by position: a POSITIONAL JOIN, no hash join and no sort.
        """
        indices = self._main.shard_indices if shard is None else [shard]
        for other in self._others:
            if shard is None and other.shard_indices != indices:
                return False
            for index in indices:
                main, entry = self._main.shard(index), other.shard(index)
                if main is None or entry is None or main.uid_digest is None:
                    return False
                if entry.uid_digest != main.uid_digest or entry.rows != main.rows:
                    return False
        return True

    def _create_views(self) -> None:
        positional = bool(self._others) and self._aligned(None)
        relations = {
            s.name: _parquet_list(
                [str(s.shard_path(index)) for index in s.shard_indices]
                if positional
                else [str(s.path / e.file) for e in s.manifest.shards],
                trace=self.trace and s is self._main,
            )
            for s in self.dataset.shardsets
        }
        sql = self._native_select(relations, ordered=False, positional=positional)
        with self.connection.cursor() as cursor:
            if self.trace:
                cursor.register("sqlfeed_rg_arrow", self._row_group_table())
                cursor.execute(
                    f'CREATE OR REPLACE TABLE "{self._rowgroup_table}" AS '
                    "SELECT * FROM sqlfeed_rg_arrow"
                )
                cursor.unregister("sqlfeed_rg_arrow")
            cursor.execute(f'CREATE OR REPLACE VIEW "{self.view}" AS {sql}')

    def _row_group_table(self) -> pa.Table:
        files, groups, firsts = [], [], []
        for entry in self._main.manifest.shards:
            path = str(self._main.path / entry.file)
            for group, (first, _rows) in enumerate(parquet_row_groups(Path(path))):
                files.append(path)
                groups.append(group)
                firsts.append(first)
        return pa.table(
            {
                "file": pa.array(files, pa.string()),
                "row_group": pa.array(groups, pa.int64()),
                "first_row": pa.array(firsts, pa.int64()),
            }
        )

    def _native_select(
        self,
        relations: dict[str, str],
        *,
        ordered: bool,
        fragment: Fragment | None = None,
        positional: bool = False,
    ) -> str:
        uid = _q(self.dataset.uid)
        aliases = {s.name: f"s{number}" for number, s in enumerate(self.dataset.shardsets)}
        main = aliases[self._main.name]
        items = [f"{main}.{uid}"]
        for shardset in self.dataset.shardsets:
            items.extend(f"{aliases[shardset.name]}.{_q(c)}" for c in shardset.manifest.features)
        if self.trace:
            if (fragment is not None and fragment.kind == "rows") or fragment is not None:
                group = _row_group_case(Path(fragment.file), f"{main}.file_row_number")
            else:
                group = "g.row_group"
            items += [
                f"{main}.filename AS sqlfeed_file",
                f"CAST({group} AS BIGINT) AS sqlfeed_row_group",
                f"{main}.file_row_number AS sqlfeed_row",
            ]
        sql = f"SELECT {', '.join(items)} FROM {relations[self._main.name]} AS {main}"
        for other in self._others:
            alias = aliases[other.name]
            if positional:  # aligned shards: the rows pair up in file order
                sql += f" POSITIONAL JOIN {relations[other.name]} AS {alias}"
                continue
            sql += f" JOIN {relations[other.name]} AS {alias} ON {main}.{uid} = {alias}.{uid}"
        if self.trace and fragment is None:
            sql += (
                f' ASOF LEFT JOIN "{self._rowgroup_table}" AS g ON g.file = {main}.filename '
                f"AND {main}.file_row_number >= g.first_row"
            )
        if ordered and self._others and not positional:
            sql += f" ORDER BY {main}.file_row_number"
        return sql

    def _native_fragment(self, fragment: Fragment) -> str:
        main_file = str(self._main.shard_path(fragment.shard))
        virtual = ", filename = true" if self.trace else ""
        scan = f"read_parquet({_lit(main_file)}{virtual}, file_row_number = true)"
        if fragment.kind == "rows":
            scan = (
                f"(SELECT * FROM {scan} WHERE file_row_number >= {fragment.start} "
                f"AND file_row_number < {fragment.end})"
            )
        relations = {self._main.name: scan}
        positional = bool(self._others) and self._aligned(fragment.shard)
        for other in self._others:
            if positional and fragment.kind == "rows":  # the same rows of the other file
                relations[other.name] = (
                    f"(SELECT * FROM read_parquet({_lit(str(other.shard_path(fragment.shard)))}, "
                    f"file_row_number = true) WHERE file_row_number >= {fragment.start} "
                    f"AND file_row_number < {fragment.end})"
                )
            elif other.shard(fragment.shard) is None:
                any_file = str(other.path / other.manifest.shards[0].file)
                relations[other.name] = f"(SELECT * FROM read_parquet({_lit(any_file)}) LIMIT 0)"
            else:
                relations[other.name] = (
                    f"read_parquet({_lit(str(other.shard_path(fragment.shard)))})"
                )
        return self._native_select(
            relations, ordered=True, fragment=fragment, positional=positional
        )

    # -- fragments (the sqlfeed.plans.fragments.FragmentSource capability) -------------------

    def stored_rows(self) -> int:
        """Rows of the main shardset, from the manifest (no scan).

        Fragment plans are sized by it.
        """
        return self.dataset.main.rows

    def fragments(self, target_rows: int) -> list[Fragment]:
        """The dataset's fragments in storage order.

        Shard by shard, a main shard file of more than ``target_rows`` rows cut at row
        groups, stripes or line starts.
        """
        out: list[Fragment] = []
        for entry in self._main.manifest.shards:
            file = self._main.path / entry.file
            out.extend(_split(self._main, entry.index, file, entry.rows, target_rows))
        return out

    def fragment_sql(self, fragment: Fragment) -> str:
        """A SELECT of the dataset's columns over one fragment (what replaces the view)."""
        if self.native:
            return self._native_fragment(fragment)
        return f"SELECT * FROM {fragment.stream_name}"

    def fragment_partitions(
        self, parsed: ParsedQuery, target_rows: int
    ) -> list[tuple[str, Fragment]]:
        """``(partition SQL, fragment)`` for every fragment.

        The partition SQL is the query with the view replaced by the fragment.
        """
        before, after = around_view(parsed, self.view, self.view)
        return [
            (f"{before}({self.fragment_sql(fragment)}){after}", fragment)
            for fragment in self.fragments(target_rows)
        ]


# -- reading pieces of the main shardset -------------------------------------------------------


def _main_pieces(shardset: Shardset, fragment: Fragment, trace: bool) -> Iterator[pa.Table]:
    """The main shardset's rows of a fragment, with provenance columns when tracing."""
    path = Path(fragment.file)
    fmt = shardset.format
    schema = shardset.manifest.schema
    if shardset.shard(fragment.shard) is None:
        return
    if fmt == "orc":
        orc_file = orc_open(path)
        first, last = (
            (fragment.start, fragment.end) if fragment.kind == "stripes" else (0, orc_file.nstripes)
        )
        row = sum(_stripe_rows(orc_file, s) for s in range(first)) if first else 0
        for stripe in range(first, last):
            table = pa.Table.from_batches([orc_file.read_stripe(stripe)]).cast(schema)
            yield _traced(table, path, stripe, row, trace)
            row += table.num_rows
        return
    if fmt == "parquet":
        groups = parquet_row_groups(path)
        wanted = [
            g
            for g, (first, rows) in enumerate(groups)
            if fragment.kind != "rows" or fragment.start <= first < fragment.end
        ]
        parquet = pq.ParquetFile(path)
        for group in wanted:
            table = parquet.read_row_group(group).cast(schema)
            yield _traced(table, path, group, groups[group][0], trace)
        return
    if fragment.kind == "bytes":
        table = read_text_range(path, fmt, fragment.start, fragment.end, schema)
        yield _traced(
            table, path, 0, _rows_before(path, fmt, fragment.start) if trace else 0, trace
        )
        return
    table = read_shard(path, fmt, schema=schema, key=shardset.manifest.uid)
    yield _traced(table, path, 0, 0, trace)


def _rows_before(path: Path, fmt: str, start: int) -> int:
    """The index of the first row whose line starts at or after byte ``start``."""
    if start <= 0:
        return 0
    newlines = 0
    with open(path, "rb") as handle:
        remaining = start - 1
        while remaining > 0 and (block := handle.read(min(remaining, 1 << 20))):
            newlines += block.count(b"\n")
            remaining -= len(block)
    return 1 + newlines - (1 if fmt == "csv" else 0)


def _traced(table: pa.Table, path: Path, group: int, first_row: int, trace: bool) -> pa.Table:
    if not trace:
        return table
    n = table.num_rows
    rows = np.arange(first_row, first_row + n, dtype=np.int64)
    return (
        table.append_column(TRACE_COLUMNS[0], pa.array([str(path)] * n, pa.string()))
        .append_column(TRACE_COLUMNS[1], pa.array(np.full(n, group, dtype=np.int64)))
        .append_column(TRACE_COLUMNS[2], pa.array(rows))
    )


def _split(
    shardset: Shardset, index: int, file: Path, rows: int, target_rows: int
) -> list[Fragment]:
    fmt = shardset.format
    whole = [Fragment(index, "shard", 0, 0, rows, str(file))]
    if rows <= target_rows:
        return whole
    if fmt in ("parquet", "orc"):
        kind = "rows" if fmt == "parquet" else "stripes"
        units = parquet_row_groups(file) if fmt == "parquet" else orc_stripes(file)
        runs = even_runs(str(file), kind, units, target_rows, by_rows=fmt == "parquet")
        return [
            Fragment(
                index, "shard" if p.kind == "file" else kind, p.start, p.end, p.rows, str(file)
            )
            for p in runs
        ]
    if fmt in ("csv", "jsonl"):
        if not lines_are_rows(file, fmt, rows):  # a byte range could cut a row in two
            note = "one partition: the CSV has quoted newlines, so it cannot be cut at lines"
            return [Fragment(index, "shard", 0, 0, rows, str(file), note)]
        size = file.stat().st_size
        pieces = -(-rows // target_rows)
        bounds = [size * k // pieces for k in range(pieces + 1)]
        return [
            Fragment(index, "bytes", bounds[k], bounds[k + 1], rows // pieces, str(file))
            for k in range(pieces)
        ]
    note = "one partition: a tar shard is read whole, records are never split"
    return [Fragment(index, "shard", 0, 0, rows, str(file), note)]


def _stripe_rows(orc_file: Any, stripe: int) -> int:
    """Rows in one ORC stripe (pyarrow exposes no per-stripe count without reading it)."""
    return int(orc_file.read_stripe(stripe, columns=[0]).num_rows)


def _row_group_case(path: Path, row: str) -> str:
    groups = parquet_row_groups(path)
    if len(groups) <= 1:
        return "0"
    whens = " ".join(
        f"WHEN {row} < {first + rows} THEN {g}" for g, (first, rows) in enumerate(groups)
    )
    return f"CASE {whens} END"


def _parquet_list(files: Sequence[str], *, trace: bool) -> str:
    listed = ", ".join(_lit(f) for f in files)
    virtual = ", filename = true, file_row_number = true" if trace else ""
    return f"read_parquet([{listed}]{virtual})"


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
