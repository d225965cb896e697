"""One options vocabulary (sqlfeed/feed/options.py): every facade takes the same groups with
the same defaults, each keyword declared once, checked once."""

from __future__ import annotations

import dataclasses
import inspect
import sqlite3
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sqlfeed
from sqlfeed import InvalidArgumentError
from sqlfeed.dispatch import JobEpochs, MemoryQueue, create_job
from sqlfeed.dispatch.feeder import Feeder
from sqlfeed.feed.feeder import PartitionFeeder
from sqlfeed.feed.options import (
    DEFAULT_READERS,
    PLAN_OPTIONS,
    ColumnKeywords,
    ColumnOptions,
    JobKeywords,
    JobOptions,
    PlanOptions,
    ReadKeywords,
    ReadOptions,
    check_int,
    resolve_plan,
)
from tests.helpers.resume_contract import make_table

QUERY = "SELECT id, x FROM t"
SHARED = {*ReadOptions.names(), *JobOptions.names(), *ColumnOptions.names(), *PLAN_OPTIONS}


def explicit_keywords(cls: type) -> set[str]:
    """The keywords a facade declares in its own signature (not through ``**options``)."""
    parameters = inspect.signature(cls).parameters.values()
    return {p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def test_plan_options_are_the_planners_keywords() -> None:
    planner = set(inspect.signature(sqlfeed.plan).parameters) - {"query", "source"}
    assert planner == PLAN_OPTIONS == set(typing.get_type_hints(PlanOptions))


@pytest.mark.parametrize(
    ("keywords", "group", "own"),
    [
        (ReadKeywords, ReadOptions, {"batch_size"}),
        (JobKeywords, JobOptions, set()),
        (ColumnKeywords, ColumnOptions, set()),
    ],
)
def test_each_keyword_dict_types_exactly_its_groups_fields(
    keywords: Any, group: Any, own: set[str]
) -> None:
    assert set(typing.get_type_hints(keywords)) == set(group.names()) - own


def test_every_field_of_a_group_has_its_one_default() -> None:
    for group in (ReadOptions, JobOptions, ColumnOptions):
        for field in dataclasses.fields(group):
            assert field.default is not dataclasses.MISSING, (group.__name__, field.name)


def test_no_feeder_redeclares_a_shared_option() -> None:
    for facade in (PartitionFeeder, Feeder):
        assert explicit_keywords(facade) & SHARED == {"batch_size"}, facade


def test_neither_tf_nor_torch_redeclares_a_shared_option() -> None:
    import sqlfeed.tf.feed

    assert explicit_keywords(sqlfeed.tf.feed.Feed) & SHARED == {"batch_size"}
    pytest.importorskip("torch")
    import sqlfeed.torch.dataset

    assert explicit_keywords(sqlfeed.torch.dataset.SQLDataset) & SHARED == {"batch_size"}


def test_readers_default_to_two_in_every_facade(tmp_path: Path) -> None:
    url = make_table(tmp_path / "d.duckdb", 100)
    assert DEFAULT_READERS == ReadOptions().readers == 2
    assert Feeder(QUERY, url).readers == 2
    assert PartitionFeeder(QUERY, url).read.readers == 2
    pytest.importorskip("torch")
    import sqlfeed.torch

    assert sqlfeed.torch.SQLDataset(QUERY, url, batch_size=10).read.readers == 2


def test_check_int_refuses_bools_non_integers_and_values_below_the_lowest() -> None:
    assert check_int(0, "seed", 0) == 0
    for bad in (True, 1.0, "1", 0):
        with pytest.raises(InvalidArgumentError, match=r"readers must be an integer >= 1, got"):
            check_int(bad, "readers")


def test_an_unknown_keyword_names_the_closest_known_one(tmp_path: Path) -> None:
    url = make_table(tmp_path / "d.duckdb", 10)
    with pytest.raises(
        InvalidArgumentError, match=r"'shufle_buffer' \(did you mean 'shuffle_buffer"
    ):
        Feeder(QUERY, url, shufle_buffer=3)  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match=r"'partitons' \(did you mean 'partitions'"):
        Feeder(QUERY, url, partitons=3)  # type: ignore[call-arg]
    with pytest.raises(InvalidArgumentError, match=r"'lease_tt' \(did you mean 'lease_ttl'"):
        Feeder(QUERY, url, lease_tt=3)  # type: ignore[call-arg]


def test_a_given_plan_takes_no_plan_options_and_must_be_of_the_sources_engine(
    tmp_path: Path,
) -> None:
    url = make_table(tmp_path / "d.duckdb", 10)
    plan = sqlfeed.plan(QUERY, url, partitions=2)
    with pytest.raises(InvalidArgumentError, match=r"plan options \(partitions\) need a SQL query"):
        Feeder(plan, url, partitions=3)
    sqlite3.connect(tmp_path / "s.db").close()
    sqlite = sqlfeed.connect(f"sqlite:///{tmp_path / 's.db'}")
    with pytest.raises(InvalidArgumentError, match="the plan is for duckdb, the source is sqlite"):
        resolve_plan(plan, sqlite)
    assert resolve_plan(plan, sqlfeed.connect(url)) is plan


def test_the_job_mode_feeder_takes_every_read_option(tmp_path: Path) -> None:
    """merge_reads and snapshot used to be refused by sqlfeed.Feeder (a TypeError from the
    planner); they reach it now, as progress does."""
    url = make_table(tmp_path / "d.duckdb", 100)
    seen: list[Any] = []
    feeder = Feeder(
        QUERY,
        url,
        batch_size=10,
        merge_reads=False,
        snapshot=False,
        progress=seen.append,
        partitions=4,
        strategy="range",
        key="id",
    )
    assert sum(b.num_rows for b in feeder) == 100
    assert feeder.queries == len(seen) == 4


def test_read_options_come_as_keywords_or_one_object(tmp_path: Path) -> None:
    url = make_table(tmp_path / "d.duckdb", 30)
    read = ReadOptions(batch_size=7, seed=3, shuffle=True)
    feeder = PartitionFeeder(QUERY, url, read=read, partitions=3)
    assert (feeder.read, feeder.seed, feeder.shuffle) == (read, 3, True)
    assert [b.num_rows for b in feeder] == [7, 7, 7, 7, 2]
    with pytest.raises(InvalidArgumentError, match=r"read=ReadOptions\(...\) or its keywords"):
        PartitionFeeder(QUERY, url, read=read, seed=4)


def test_option_groups_are_checked_when_made() -> None:
    with pytest.raises(InvalidArgumentError, match="float_dtype must be one of"):
        ColumnOptions(float_dtype="float16")
    with pytest.raises(InvalidArgumentError, match="shuffle_buffer must be an integer >= 0"):
        ReadOptions(shuffle_buffer=-1)
    with pytest.raises(InvalidArgumentError, match="replicas must be an integer >= 1"):
        JobOptions(job="j", replicas=0)
    assert ReadOptions(shuffle_buffer=5).shuffles
    assert not ReadOptions().shuffles
    assert ColumnOptions(label="y").single_label
    assert not ColumnOptions(label=["y"]).single_label


def test_the_static_feeders_old_names_are_deprecated_aliases() -> None:
    import sqlfeed.feed
    import sqlfeed.feed.feeder

    with pytest.warns(DeprecationWarning, match="sqlfeed.feed.Feeder is now"):
        assert sqlfeed.feed.Feeder is PartitionFeeder
    with pytest.warns(DeprecationWarning, match="use sqlfeed.Feeder"):
        assert sqlfeed.feed.feeder.Feeder is PartitionFeeder
    assert sqlfeed.Feeder is Feeder
    assert issubclass(Feeder, PartitionFeeder)


def test_a_job_is_created_in_one_place_with_its_even_batches_count(tmp_path: Path) -> None:
    url = make_table(tmp_path / "d.duckdb", 95)
    source = sqlfeed.connect(url)
    plan = sqlfeed.plan(QUERY, source, partitions=3)
    queue = MemoryQueue()
    job = JobOptions(job="j", even_batches=True, replicas=2, order="index")
    spec = create_job(queue, job, plan, source, epochs=2, seed=5, batch_size=10)
    assert (spec.name, spec.epochs, spec.seed, spec.order) == ("j", 2, 5, "index")
    assert (spec.rows, spec.replicas, spec.batch_size, spec.share) == (95, 2, 10, 4)
    again = create_job(queue, job, plan, source, epochs=2, seed=5, batch_size=10)
    assert again.definition() == spec.definition()


# -- the one job-epoch cutter ------------------------------------------------------------


@dataclasses.dataclass
class FakeDelivery:
    epoch: int
    n: int

    @property
    def batch(self) -> pa.RecordBatch:
        return pa.record_batch({"n": [self.n]})


class FakeWorker:
    def __init__(self, epochs: list[list[int]]) -> None:
        self.items = [FakeDelivery(e, n) for e, ns in enumerate(epochs) for n in ns]

    def deliveries(self) -> Any:
        yield from self.items


def test_the_job_epoch_cutter_ends_an_epoch_at_the_next_ones_first_delivery() -> None:
    epochs = JobEpochs(FakeWorker([[1, 2], [3]]))
    assert [d.n for d in epochs.epoch_deliveries()] == [1, 2]
    assert [d.n for d in epochs.untaken()] == [3]  # read ahead, not taken
    assert [b.column("n")[0].as_py() for b in epochs.epoch_batches()] == [3]
    assert list(epochs.epoch_deliveries()) == []


@pytest.mark.parametrize(("redeliver", "again"), [(True, [1, 2]), (False, [2])])
def test_an_abandoned_iterations_batch_is_handed_out_again_only_with_redeliver(
    redeliver: bool, again: list[int]
) -> None:
    """tf.data (Keras' throw-away iterator) redelivers; a torch loop that broke after
    training on the batch does not."""
    epochs = JobEpochs(FakeWorker([[1, 2]]), redeliver=redeliver)
    first = epochs.epoch_deliveries()
    assert next(first).n == 1
    assert [d.n for d in epochs.epoch_deliveries()] == again


def test_progress_merge_reads_and_shuffle_reach_torch_and_tf(tmp_path: Path) -> None:
    """They never did before: the read options are one group now, in every facade."""
    url = make_table(tmp_path / "d.duckdb", 100)
    plan = {"partitions": 4, "strategy": "range", "key": "id"}
    pytest.importorskip("torch")
    import sqlfeed.torch

    seen: list[Any] = []
    dataset = sqlfeed.torch.SQLDataset(
        QUERY, url, batch_size=10, progress=seen.append, merge_reads=False, shuffle=True, **plan
    )
    ids = [i for batch in dataset for i in batch["id"].tolist()]
    assert sorted(ids) == list(range(100))
    assert ids != list(range(100))  # the partition order is shuffled
    assert len(seen) == 4  # one query per partition, each reported
    pytest.importorskip("tensorflow")
    import sqlfeed.tf

    seen.clear()
    feed = sqlfeed.tf.Feed(
        QUERY, url, batch_size=10, progress=seen.append, merge_reads=False, **plan
    )
    assert sum(len(f["id"]) for f in feed.dataset) == 100
    assert len(seen) == 4


@pytest.mark.parametrize("flag", [True, False, 1, 0, np.True_, np.False_])
def test_drop_remainder_takes_what_the_feeder_took_before(flag: Any) -> None:
    feeder = sqlfeed.Feeder(
        "SELECT range AS x FROM range(10)", batch_size=4, partitions=2, drop_remainder=flag
    )
    rows = sum(batch.num_rows for batch in feeder)
    assert rows == (8 if flag else 10)


@pytest.mark.parametrize("flag", ["False", "true", 2, None, 0.0])
def test_drop_remainder_refuses_what_would_be_a_silent_guess(flag: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="drop_remainder must be True or False"):
        sqlfeed.Feeder("SELECT 1 AS x", batch_size=4, drop_remainder=flag)
