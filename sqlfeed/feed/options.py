"""One options vocabulary for every feed facade: the groups of options that travel together.

Every facade (:class:`sqlfeed.Feeder`, :mod:`sqlfeed.tf`, :mod:`sqlfeed.torch`,
:mod:`sqlfeed.ray`, :mod:`sqlfeed.dask`) takes the same flat keywords with the same
defaults, because each group is declared here once:

* :class:`ReadOptions` (how a plan's partitions are read: batch size, shuffle, seed,
  readers, epochs, merged reads, snapshot, progress);
* :class:`JobOptions` (``job=...``: pull partitions from a lease queue instead);
* :class:`ColumnOptions` (how columns become tensors: label, features, NULL fills,
  masks, float dtype, time unit), checked by :func:`sqlfeed.feed.tensors.check_options`;
* :class:`PlanOptions` (what :func:`sqlfeed.plan` takes, for a SQL query), checked once by
  :func:`check_plan_options`.

A facade's signature lists only what is its own and types the rest as
``**options: Unpack[...]`` of the groups' keyword dicts (:class:`ReadKeywords`,
:class:`JobKeywords`, :class:`ColumnKeywords`, :class:`PlanOptions`), so mypy checks every
forwarder; :func:`split_options` cuts the flat keywords into the groups (the defaults
are the dataclasses') and refuses an unknown name in one line, with the closest known one.

:func:`resolve_plan` is "plan this SQL or take this Plan" for every facade, and
:func:`check_int` the one integer check.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypedDict, Unpack, cast

import numpy as np

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.feed.tensors import check_options, column_mappings
from sqlfeed.io import DEFAULT_BATCH_ROWS, Source
from sqlfeed.plans.materialize import drop_scratch_with
from sqlfeed.plans.model import Plan
from sqlfeed.plans.planner import plan as make_plan

__all__ = [
    "DEFAULT_READERS",
    "PLAN_OPTIONS",
    "READ_NAMES",
    "ColumnKeywords",
    "ColumnOptions",
    "FeederKeywords",
    "JobFeederKeywords",
    "JobKeywords",
    "JobOptions",
    "PlanOptions",
    "ReadKeywords",
    "ReadOptions",
    "TensorKeywords",
    "check_given_plan",
    "check_int",
    "check_plan_options",
    "own_scratch",
    "plan_options_of",
    "read_options",
    "resolve_plan",
    "split_options",
]

DEFAULT_READERS = 2
"""Partitions read ahead at once by default, each by its own thread and connection, in
every facade (a torch DataLoader worker process reads its share with as many)."""


def check_int(value: object, what: str, lowest: int = 1) -> int:
    """``value`` if it is an integer (not a bool) ``>= lowest``.

    >>> check_int(3, "readers")
    3
    >>> check_int(0, "readers")
    Traceback (most recent call last):
    ...
    sqlfeed.dialects.errors.InvalidArgumentError: readers must be an integer >= 1, got 0

    Raises:
        InvalidArgumentError: ``{what} must be an integer >= {lowest}, got {value!r}``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise InvalidArgumentError(f"{what} must be an integer >= {lowest}, got {value!r}")
    return value


# -- plan options -------------------------------------------------------------------------


class PlanOptions(TypedDict, total=False):
    """The options of :func:`sqlfeed.plan`, forwarded by every facade for a SQL query."""

    partitions: int | None
    target_rows: int
    strategy: str
    key: str | Sequence[str] | None
    workers: int | None
    scratch: str | None
    allow_unstable: bool
    sample_rows: int
    strict: bool


PLAN_OPTIONS: frozenset[str] = frozenset(PlanOptions.__annotations__)
"""The names of :class:`PlanOptions` (``tests/feed/test_options.py`` checks they are
:func:`sqlfeed.plan`'s keywords)."""


def check_plan_options(options: Mapping[str, Any], known: Iterable[str] = ()) -> PlanOptions:
    """``options`` if every name is a plan option; else the first unknown one, refused.

    Args:
        options: the keywords left over after a facade took its own.
        known: the facade's own keywords, for the "did you mean" hint.

    Raises:
        InvalidArgumentError: ``unknown option 'x' (did you mean 'y'?)``.
    """
    for name in options:
        if name not in PLAN_OPTIONS:
            close = difflib.get_close_matches(name, [*known, *sorted(PLAN_OPTIONS)], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidArgumentError(f"unknown option {name!r}{hint}")
    return cast(PlanOptions, dict(options))


def resolve_plan(
    query: str | Any,
    source: Source,
    *,
    owner: object = None,
    drop_via: Source | str | None = None,
    default_workers: int | None = None,
    **plan_options: Unpack[PlanOptions],
) -> Plan:
    """Plan this SQL on ``source``, or take this :class:`Plan` (checked against ``source``).

    Args:
        query: a SQL SELECT (or a parsed one), or a Plan made by :func:`sqlfeed.plan`.
        source: the connected source.
        owner: for SQL planned here: the object whose garbage collection drops the
            plan's auto-materialized scratch table (see :func:`own_scratch`); None: the
            caller owns it.
        drop_via: what the drop connects through (default ``source``; a URL when the
            source is closed before the owner goes).
        default_workers: the default of the ``workers`` plan option (the readers that will
            share the plan, e.g. a static split's world size), used for SQL only.
        **plan_options: :class:`PlanOptions` (checked here); with a Plan, none.

    Raises:
        InvalidArgumentError: unknown plan options, plan options with a Plan, or a Plan of
            another dialect than ``source``'s.
    """
    check_plan_options(plan_options)
    if isinstance(query, Plan):
        return check_given_plan(query, source.dialect.name, plan_options)
    if default_workers is not None:
        plan_options.setdefault("workers", default_workers)
    made = make_plan(query, source, **plan_options)
    if owner is not None:
        own_scratch(owner, query, made, source if drop_via is None else drop_via)
    return made


def check_given_plan(
    plan: Plan, dialect: str, plan_options: Mapping[str, Any], where: str = "the source"
) -> Plan:
    """``plan``, given instead of SQL, if it can be read on ``dialect``.

    No plan options may come with it. ``dialect`` is the source's engine, or a URL's
    (``where`` says which).

    Raises:
        InvalidArgumentError: plan options with a Plan, or a Plan of another dialect.
    """
    if plan_options:
        raise InvalidArgumentError(
            f"plan options ({', '.join(plan_options)}) need a SQL query, not a Plan"
        )
    if plan.dialect != dialect:
        raise InvalidArgumentError(f"the plan is for {plan.dialect}, {where} is {dialect}")
    return plan


def own_scratch(owner: object, query: object, plan: Plan, source: Source | str) -> None:
    """Drop ``plan``'s scratch table with ``owner`` if sqlfeed planned it from ``query``.

    That is, when ``query`` is SQL: the user never sees the plan to drop it. A Plan given is
    its owner's.

    The one place that decides who drops an auto-materialized table
    (:func:`sqlfeed.plans.drop_scratch_with` does the dropping).
    """
    if not isinstance(query, Plan):
        drop_scratch_with(owner, plan, source)


# -- the option groups --------------------------------------------------------------------


class _FromKeywords:
    """``from_kwargs``: a group from the flat keywords a facade received."""

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The group's keyword names (its fields)."""
        return tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any], **fixed: Any) -> Self:
        """The group of the keywords in ``options`` that are its own, and ``fixed``.

        The others are left alone; the dataclass's defaults for those not given.
        """
        return cls(**{n: options[n] for n in cls.names() if n in options}, **fixed)

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


class ReadKeywords(TypedDict, total=False):
    """The flat keywords of :class:`ReadOptions` (see its fields) but ``batch_size``.

    Each facade declares ``batch_size`` itself: optional in the Feeder, required in tf and
    torch.
    """

    shuffle_buffer: int
    shuffle: bool | None
    shuffle_window: int | None
    seed: int
    readers: int
    read_batch_rows: int
    epochs: int
    drop_remainder: bool
    merge_reads: bool
    snapshot: bool | str
    progress: Callable[[Any], None] | None


@dataclass(frozen=True)
class ReadOptions(_FromKeywords):
    """How a plan's partitions are read, shuffled and batched (every facade).

    Attributes:
        batch_size: rows per batch (the last of an epoch may be smaller unless
            ``drop_remainder``); None: batches as the database delivers them (the
            Feeder only: tf and torch need one).
        shuffle_buffer: rows mixed at random before batching (0: no record shuffle): the
            rows, in partition order, are cut into windows of this many rows and each
            window is permuted (seeded by seed, epoch and window), so a restored feed
            replays exactly. The partition order is shuffled too whenever this is > 0 or
            ``shuffle``.
        shuffle: visit the partitions in a seeded random order (default: when
            shuffle_buffer > 0).
        shuffle_window: the partition order of a ``fragments`` plan instead: 0 storage
            order, -1 a seeded shuffle of all fragments, k > 0 files shuffled and then
            fragments shuffled within windows of k (see
            :func:`sqlfeed.plans.model.fragment_order`); seeded, different every epoch.
        seed: makes the partition order and the shuffle repeatable; each epoch differs.
        readers: partitions read ahead at once, each by its own thread and connection
            (default :data:`DEFAULT_READERS`; per DataLoader worker process in torch).
        read_batch_rows: rows per record batch read from the database.
        epochs: passes over the data (the Feeder's iteration; a job's epochs).
        drop_remainder: drop each epoch's last, smaller batch.
        merge_reads: read adjacent partitions that cut one sequence by one query each
            (see :class:`sqlfeed.Feeder`); False: one query per partition.
        snapshot: every epoch reads its partitions inside one snapshot (see
            :mod:`sqlfeed.feed.snapshots`); False: none; a string: a PostgreSQL snapshot
            id another session exported and holds.
        progress: called with a :class:`sqlfeed.feed.feeder.Progress` after each
            partition (in torch: in the process that reads it).
    """

    batch_size: int | None = None
    shuffle_buffer: int = 0
    shuffle: bool | None = None
    shuffle_window: int | None = None
    seed: int = 0
    readers: int = DEFAULT_READERS
    read_batch_rows: int = DEFAULT_BATCH_ROWS
    epochs: int = 1
    drop_remainder: bool = False
    merge_reads: bool = True
    snapshot: bool | str = True
    progress: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        for value, what, lowest in (
            (self.readers, "readers", 1),
            (self.epochs, "epochs", 1),
            (self.shuffle_buffer, "shuffle_buffer", 0),
            (self.read_batch_rows, "read_batch_rows", 1),
        ):
            check_int(value, what, lowest)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", 1)
        flag = self.drop_remainder
        if isinstance(flag, bool | np.bool_) or (type(flag) is int and flag in (0, 1)):
            object.__setattr__(self, "drop_remainder", bool(flag))  # 0/1 as before
        else:  # a string such as "False" would have been a silent True
            raise InvalidArgumentError(f"drop_remainder must be True or False, not {flag!r}")

    @property
    def shuffles(self) -> bool:
        """Whether the partition order is shuffled (``shuffle``, default: a record shuffle)."""
        return self.shuffle_buffer > 0 if self.shuffle is None else self.shuffle


class JobKeywords(TypedDict, total=False):
    """The flat keywords of :class:`JobOptions` (see its fields)."""

    job: str | None
    queue: Any
    worker_id: str | None
    lease_ttl: float
    order: str
    even_batches: bool
    replicas: int | None


@dataclass(frozen=True)
class JobOptions(_FromKeywords):
    """``job=...``: pull partitions dynamically from a job of a lease queue.

    Attributes:
        job: the job's name (created from the plan, epochs, seed, lease_ttl and order if
            it does not exist yet; every worker may create it); None: the static share.
            Batches never span partitions then, and there is no record shuffle across
            partitions (the partition order is shuffled).
        queue: the lease queue's URL (``sqlite:///state.db``, PostgreSQL, MySQL,
            ``memory://``) or object; default ``memory://``.
        worker_id: this worker's unique name in the job (default: host, pid, random).
        lease_ttl: seconds a lease lives without a heartbeat.
        order: hand-out order within an epoch: ``shuffle`` (seeded), ``lpt`` (largest
            first) or ``index``.
        even_batches: every one of ``replicas`` workers delivers the same number of
            batches per epoch, rows // (replicas x batch_size), so synchronous replicas
            stay in lockstep; the rows left over are dropped (torch: without a job too,
            every rank delivers the same number of batches).
        replicas: the number of synchronous replicas, for ``even_batches``.
    """

    job: str | None = None
    queue: Any = None
    worker_id: str | None = None
    lease_ttl: float = 60.0
    order: str = "shuffle"
    even_batches: bool = False
    replicas: int | None = None

    def __post_init__(self) -> None:
        if self.replicas is not None:
            check_int(self.replicas, "replicas", 1)

    @property
    def dynamic(self) -> bool:
        """Whether partitions come from a job (``job`` given)."""
        return self.job is not None


class ColumnKeywords(TypedDict, total=False):
    """The flat keywords of :class:`ColumnOptions` (see its fields)."""

    label: str | Sequence[str] | None
    features: Sequence[str] | None
    fill: Mapping[str, Any] | None
    fill_nulls: bool
    masks: bool | Sequence[str]
    float_dtype: str
    time_unit: str


@dataclass(frozen=True)
class ColumnOptions(_FromKeywords):
    """How columns become tensors (tf and torch): checked when made.

    Attributes:
        label: the label column (element ``(features, label)``), a list of them (element
            ``(features, {name: label})``), or None (element ``features``).
        features: the feature columns in order (default: every column but the labels).
        fill: per column, the value its NULLs become (default: see :mod:`sqlfeed.tf`).
        fill_nulls: False: a NULL in a column without a ``fill`` is an error.
        masks: True, or feature names: add a boolean ``<name>_is_null`` feature.
        float_dtype: what Arrow floats become, ``float32`` or ``float64``.
        time_unit: the unit of timestamps, times and durations (``s``, ``ms``, ``us``,
            ``ns``); dates are days.
    """

    label: str | Sequence[str] | None = None
    features: Sequence[str] | None = None
    fill: Mapping[str, Any] | None = None
    fill_nulls: bool = True
    masks: bool | Sequence[str] = False
    float_dtype: str = "float32"
    time_unit: str = "us"

    def __post_init__(self) -> None:
        check_options(**self.keywords())

    def keywords(self) -> dict[str, Any]:
        """The options as keywords of :func:`sqlfeed.feed.tensors.column_mappings`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def mappings(self, schema: Any) -> list[Any]:
        """The :class:`~sqlfeed.feed.tensors.ColumnMapping` of each column of ``schema``.

        Raises:
            InvalidArgumentError: unknown columns, unmappable types, bad fills.
        """
        return column_mappings(schema, **self.keywords())

    @property
    def single_label(self) -> bool:
        """Whether the element's label is one tensor (``label`` is one name)."""
        return isinstance(self.label, str)


class FeederKeywords(ReadKeywords, PlanOptions, total=False):
    """The flat keywords of the static Feeder beside its own: read and plan options."""


class JobFeederKeywords(FeederKeywords, JobKeywords, total=False):
    """The flat keywords of :class:`sqlfeed.Feeder` beside its own: read, job and plan options."""


class TensorKeywords(ReadKeywords, JobKeywords, ColumnKeywords, PlanOptions, total=False):
    """The flat keywords tf's ``Feed`` and torch's ``SQLDataset`` share beside their own.

    Read, job, column and plan options.
    """


def read_options(
    read: ReadOptions | None, batch_size: int | None, options: Mapping[str, Any]
) -> ReadOptions:
    """The read options of a facade.

    ``read`` given as one object, or made from the :class:`ReadOptions` keywords in
    ``options``; an explicit ``batch_size`` wins.

    Raises:
        InvalidArgumentError: ``read`` and some of its keywords both given, or a check of
            :class:`ReadOptions`.
    """
    if read is None:
        return ReadOptions.from_kwargs(options, batch_size=batch_size)
    given = [name for name in ReadOptions.names() if name in options]
    if given:
        raise InvalidArgumentError(
            f"give read=ReadOptions(...) or its keywords ({', '.join(given)}), not both"
        )
    return read if batch_size is None else read.replace(batch_size=batch_size)


def plan_options_of(
    options: Mapping[str, Any], groups: Iterable[type[_FromKeywords]], own: Iterable[str] = ()
) -> PlanOptions:
    """The keywords of ``options`` that belong to none of ``groups``: plan options, checked.

    See :func:`check_plan_options`; ``own`` and the groups' names are the known names of the
    hint.
    """
    names = [name for group in groups for name in group.names()]
    rest = {k: v for k, v in options.items() if k not in names}
    return check_plan_options(rest, [*own, *names])


def split_options(
    options: Mapping[str, Any],
    *groups: type[_FromKeywords],
    own: Iterable[str] = (),
) -> tuple[list[Any], PlanOptions]:
    """The flat keywords ``options`` cut into ``groups`` and the plan options that remain.

    Each group is made by its ``from_kwargs``; the plan options are checked.

    Args:
        options: the keywords a facade received beside its own.
        groups: the option classes the facade takes, in order.
        own: the facade's own keyword names, for the "did you mean" hint.

    Raises:
        InvalidArgumentError: an unknown keyword (with the closest known name), or a
            group's check.
    """
    plan_options = plan_options_of(options, groups, own)
    return [group.from_kwargs(options) for group in groups], plan_options


READ_NAMES = ReadOptions.names()
"""The keywords of :class:`ReadOptions`."""
