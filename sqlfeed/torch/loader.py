"""The DataLoader of a :class:`~sqlfeed.torch.dataset.SQLDataset`: :func:`dataloader`.

Owns the choice of loader class (``torchdata``'s ``StatefulDataLoader`` when installed),
the mixin that notes a job's deliveries for checkpoints (:class:`_Noting`), and the check
of a loader state before it is restored (:func:`check_loader_state`): a state saved with
another number of DataLoader workers, world size or rank is refused in one line, because
each worker's share of the partitions depends on them. Imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import torch

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.torch.split import shard_of

__all__ = ["LoadedDataset", "check_loader_state", "dataloader"]


class LoadedDataset(Protocol):
    """What the loader needs of a :class:`~sqlfeed.torch.dataset.SQLDataset`.

    A protocol, so this module never imports the dataset's, which re-exports
    :func:`dataloader`.
    """

    job: str | None
    rank: int
    world_size: int
    _tagged: int

    def note(self, item: Any) -> Any:
        """The batch of ``item``, its delivery noted for checkpoints."""
        ...


def dataloader(dataset: LoadedDataset, **options: Any) -> Any:
    """A DataLoader of ``dataset``'s batches.

    ``torchdata``'s ``StatefulDataLoader`` when installed (``stateful=False``: torch's),
    with ``batch_size=None`` (batches are built already). With a job and several workers,
    ``in_order=False``: a worker waiting for the job's epoch to end must not hold back the
    batches of the others. With a job and worker processes, the loader notes the delivery of
    each batch it hands out, for :meth:`SQLDataset.checkpoint`. Its ``load_state_dict``
    refuses (one line) a state of another ``num_workers``, world size or rank.

    Args:
        dataset: the :class:`~sqlfeed.torch.dataset.SQLDataset`.
        **options: passed to the DataLoader (``num_workers``, ``pin_memory``, ...);
            ``stateful`` picks the class.
    """
    stateful = options.pop("stateful", True)
    workers = options.get("num_workers", 0)
    dataset._tagged = workers if dataset.job is not None and workers > 0 else 0
    options.setdefault("batch_size", None)
    if options["batch_size"] is not None:
        raise InvalidArgumentError(
            "the dataset's items are whole batches: the DataLoader's batch_size must be None"
        )
    if dataset.job is not None and options.get("num_workers", 0) > 1:
        options.setdefault("in_order", False)
    target = getattr(dataset, "target", None)
    delta = isinstance(target, str) and target.strip().lower().startswith("delta:")
    if workers > 0 and delta and "deltalake" in sys.modules:
        # delta-rs's runtime panics in a forked child ("Forked process detected"): a Delta
        # table opened here (planning) would break every forked worker that opens it again
        options.setdefault("multiprocessing_context", "forkserver")
    loader_class: Any = torch.utils.data.DataLoader
    if stateful:
        try:
            from torchdata.stateful_dataloader import StatefulDataLoader
        except ImportError:
            pass
        else:
            loader_class = StatefulDataLoader
    return _subclass(loader_class, bool(dataset._tagged))(dataset, **options)


class _Noting:
    """Mixin of a job's DataLoader with worker processes.

    Each batch is handed to the training loop untagged and noted (:meth:`SQLDataset.note`)
    for checkpoints.
    """

    dataset: Any

    def __iter__(self) -> Iterator[Any]:
        note = self.dataset.note
        for item in super().__iter__():  # type: ignore[misc]
            yield note(item)


class _Checked:
    """Mixin of a stateful DataLoader: a state is checked before the loader takes it.

    Checked by :func:`check_loader_state`, so a mismatch is sqlfeed's one line, not an
    assertion.
    """

    dataset: Any
    num_workers: int

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        check_loader_state(self.dataset, state_dict, self.num_workers)
        super().load_state_dict(state_dict)  # type: ignore[misc]


_CLASSES: dict[tuple[type, bool], type] = {}


def _subclass(loader_class: type, noting: bool) -> type:
    """``loader_class`` with :class:`_Checked` (if stateful) and :class:`_Noting`.

    One class per combination.
    """
    key = (loader_class, noting)
    if key not in _CLASSES:
        mixins: tuple[type, ...] = (_Noting,) if noting else ()
        if hasattr(loader_class, "load_state_dict"):
            mixins += (_Checked,)
        name = "".join(m.__name__.strip("_") for m in mixins) + loader_class.__name__
        _CLASSES[key] = type(name, (*mixins, loader_class), {}) if mixins else loader_class
    return _CLASSES[key]


def check_loader_state(dataset: Any, state: Any, num_workers: int) -> None:
    """Check a ``StatefulDataLoader`` state against the loader it is restored into.

    Raises:
        InvalidArgumentError: not a loader state, or one saved with another number of
            DataLoader workers, or a worker state of another share (world size or rank)
            that is past its epoch's start.
    """
    if isinstance(state, Mapping) and not state:
        return  # the loader's "start afresh"
    saved, datasets = _worker_states(state)
    if saved != num_workers:
        why = (
            "a job's progress is in its queue (rewind the job, and skip loading this state)"
            if dataset.job is not None
            else "each worker reads its own share of the partitions"
        )
        raise InvalidArgumentError(
            f"the DataLoader state was saved with num_workers={saved}, this loader has "
            f"num_workers={num_workers}: {why}; restore it into a loader with "
            f"num_workers={saved}"
        )
    for worker, dataset_state in enumerate(datasets):
        if not isinstance(dataset_state, Mapping) or "shards" not in dataset_state:
            continue  # job mode, or no iteration begun
        consumed = dataset_state.get("batches") or dataset_state.get("done")
        here = shard_of(dataset.rank, dataset.world_size, worker, max(1, num_workers))
        there = (dataset_state.get("shard"), dataset_state.get("shards"))
        if consumed and there != here:
            raise InvalidArgumentError(
                f"the DataLoader state's worker {worker} read share {there[0]}/{there[1]}, "
                f"here it reads {here[0]}/{here[1]} (rank {dataset.rank} of world size "
                f"{dataset.world_size}): restore each rank's state into the same rank, "
                "world size and num_workers"
            )


def _worker_states(state: Any) -> tuple[int, list[Any]]:
    """``(num_workers, [dataset state of each worker])`` of a ``StatefulDataLoader`` state."""
    try:
        if "_snapshot" in state:
            snapshot = state["_snapshot"]
            workers = int(snapshot["_main_snapshot"]["_num_workers"])
            per_worker = snapshot["_worker_snapshots"]
            return workers, [per_worker[f"worker_{w}"].get("dataset_state") for w in range(workers)]
        if "_num_yielded" in state:
            return 0, [state.get("dataset_state")]
    except (KeyError, TypeError, ValueError, AttributeError):
        pass
    raise InvalidArgumentError(
        f"not a StatefulDataLoader state (from loader.state_dict()): got {str(state)[:80]!r}"
    )
