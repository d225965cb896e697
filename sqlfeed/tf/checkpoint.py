"""A Keras callback that saves the feed's position with each model checkpoint and restores it.

Owns :func:`FeedCheckpoint` and :func:`BackupAndRestore`. It writes
``sqlfeed_feed_state.json`` into a directory (give it the ``BackupAndRestore`` backup
directory, with the same ``save_freq``, and list it *before* that callback): at every
save, one entry keyed by the
training step Keras records, holding the feed's state after the batches the model
trained on. On ``fit`` it restores the entry of the step the model was restored to (read
from ``BackupAndRestore``'s ``training_metadata.json``; without one, the newest entry), so
the rest of the epoch is exactly the rows the model had not seen. With a job's feed, each
save records the checkpoint in the job's ledger instead, and the restore rewinds the job
to it (see :mod:`sqlfeed.dispatch.ledger`). Keras is imported when the callback is made.

A restored ``fit`` starts with the rest of an epoch, and Keras takes the number of steps
of every epoch from the first one when the dataset's cardinality is unknown (as a feed's
is): the later epochs would be cut to that rest. At the end of that first epoch the
callback makes Keras count the next epoch's steps again (:func:`_recount_steps`).

Keras 3's own ``BackupAndRestore`` records the epoch of a checkpoint as 0 for the rest of
an epoch k >= 1 it restored into (its epoch count moves only at an epoch's end), so a
training killed twice, the second time in such a rest, finds no feed state of "epoch 0"
(or, worse, an old one); :func:`BackupAndRestore` is Keras's callback with the epoch it
records counted from the epoch that runs: use it beside :func:`FeedCheckpoint`.
"""

from __future__ import annotations

import inspect
import json
import os
import warnings
from pathlib import Path
from typing import Any

from sqlfeed.dialects import InvalidArgumentError, MissingDependencyError

__all__ = ["STATE_FILE", "BackupAndRestore", "FeedCheckpoint"]

STATE_FILE = "sqlfeed_feed_state.json"
"""The file the callback keeps its entries in."""

_KERAS_METADATA = "training_metadata.json"
_CLASS: list[Any] = []
_BACKUP: list[Any] = []


def FeedCheckpoint(
    feed: Any,
    directory: str | os.PathLike[str],
    *,
    save_freq: int | str = "epoch",
    keep: int = 4,
    rewind: bool = True,
) -> Any:
    """A Keras callback saving ``feed``'s position at each checkpoint, restoring it on ``fit``.

    Args:
        feed: the :class:`sqlfeed.tf.Feed` the model trains on.
        directory: where the state file goes: the ``BackupAndRestore`` backup directory
            (its ``training_metadata.json`` tells which entry to restore), or one beside a
            ``ModelCheckpoint`` (the newest entry is restored).
        save_freq: ``"epoch"`` or every that many batches: the same as the model's
            checkpoint callback, which must come after this one in the callbacks list (so
            a crash between the two saves leaves the entry of the older checkpoint too).
        keep: entries kept (the newest).
        rewind: a job's feed (``job=...``): at each save every worker records the
            checkpoint in the job's ledger (:meth:`sqlfeed.tf.Feed.checkpoint_job`), and on
            ``fit`` the job is rewound to the restored one. With several training
            processes pass ``rewind=False`` and run ``sqlfeed job rewind`` once before
            restarting them.

    Raises:
        InvalidArgumentError: a bad ``save_freq`` or ``keep``.
        MissingDependencyError: Keras is not installed.
    """
    if save_freq != "epoch" and (
        isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1
    ):
        raise InvalidArgumentError(
            f"save_freq must be 'epoch' or an integer >= 1, not {save_freq!r}"
        )
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 2:
        raise InvalidArgumentError(f"keep must be an integer >= 2, not {keep!r}")
    return _callback_class()(feed, Path(directory), save_freq, keep, rewind)


def BackupAndRestore(backup_dir: str | os.PathLike[str], **options: Any) -> Any:
    """``keras.callbacks.BackupAndRestore(backup_dir, **options)`` that records the running epoch.

    It records, in every checkpoint, the epoch that is running (Keras 3 records 0 for the
    rest of a restored epoch k >= 1; see the module docstring). List it after
    :func:`FeedCheckpoint`.

    Raises:
        MissingDependencyError: Keras is not installed.
    """
    if not _BACKUP:
        try:
            import keras
        except ImportError:
            raise MissingDependencyError(
                "Keras callbacks need Keras: pip install 'sqlfeed[tf]'"
            ) from None

        class _BackupAndRestore(keras.callbacks.BackupAndRestore):  # type: ignore[misc]
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                super().on_epoch_begin(epoch, logs)
                self._current_epoch = epoch

        _BACKUP.append(_BackupAndRestore)
    return _BACKUP[0](str(backup_dir), **options)


def _callback_class() -> Any:
    if _CLASS:
        return _CLASS[0]
    try:
        import keras
    except ImportError:
        raise MissingDependencyError(
            "Keras callbacks need Keras: pip install 'sqlfeed[tf]'"
        ) from None

    class _FeedCheckpoint(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(
            self, feed: Any, directory: Path, save_freq: int | str, keep: int, rewind: bool
        ) -> None:
            super().__init__()
            self.feed, self.directory, self.save_freq, self.keep = feed, directory, save_freq, keep
            self.rewind = rewind
            self.path = directory / STATE_FILE
            self._epoch = self._steps = self._since_save = self._last_batch = 0
            self._partial = False
            """This fit began inside an epoch (restored): its first epoch is a rest."""

        def on_train_begin(self, logs: Any = None) -> None:
            entry = _entry_to_restore(self.path, self.directory / _KERAS_METADATA, self.save_freq)
            self._partial = entry is not None and self.save_freq != "epoch"
            if entry is not None:
                self.feed.load_state_dict(entry["feed"], rewind=self.rewind)

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._epoch, self._steps, self._last_batch = epoch, 0, 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            # Keras' BackupAndRestore's count, so both save at the same batches.
            added = batch + 1 if batch <= self._last_batch else batch - self._last_batch
            self._steps += added
            self._last_batch = batch
            if self.save_freq == "epoch":
                return
            self._since_save += added
            if self._since_save >= int(self.save_freq):
                self._since_save = 0
                self._save([self._epoch, batch], self._steps)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if self._partial:  # the next epochs are whole: Keras must not cut them to this
                self._partial = False
                _recount_steps(keras)
            if self.save_freq == "epoch":
                self._save([epoch + 1, 0], None)

        def _save(self, key: list[int], steps: int | None) -> None:
            if getattr(self.feed, "job", None) is not None:
                # The same id in every training process in lockstep: the Keras step.
                state = self.feed.checkpoint_job(key[0] * 10**9 + key[1] + (steps is not None))
            else:
                state = self.feed.state_dict(steps)
            entries = _entries(self.path)
            entries = [e for e in entries if e["key"] != key][-(self.keep - 1) :]
            entries.append({"key": key, "feed": state})
            self.directory.mkdir(parents=True, exist_ok=True)
            aside = self.path.with_name(self.path.name + ".tmp")
            aside.write_text(json.dumps({"entries": entries}))
            os.replace(aside, self.path)

    _CLASS.append(_FeedCheckpoint)
    return _FeedCheckpoint


def _recount_steps(keras: Any) -> None:
    """Make the running ``fit`` count the steps of its next epoch again.

    Keras (3) sets its epoch iterator's number of batches from the first epoch that runs
    out of data when the dataset's cardinality is unknown, and stops every later epoch
    there. After a restore the first epoch was the rest of one, so the count goes back to
    what the dataset says (unknown): the next epoch runs to its end. The iterator is a
    local of ``fit``, found on the stack; without it, a warning says the fix.
    """
    try:
        from keras.src.trainers.epoch_iterator import EpochIterator
    except ImportError:  # pragma: no cover - another Keras
        EpochIterator = None
    frame = inspect.currentframe()
    while frame is not None and EpochIterator is not None:
        iterator = frame.f_locals.get("epoch_iterator")
        if isinstance(iterator, EpochIterator) and hasattr(iterator, "_num_batches"):
            iterator._num_batches = iterator.data_adapter.num_batches
            return
        frame = frame.f_back
    del frame
    warnings.warn(
        f"sqlfeed.tf.FeedCheckpoint: Keras {keras.__version__} may cut the epochs after the "
        "restored one to its length; pass fit(steps_per_epoch=...) to keep them whole",
        RuntimeWarning,
        stacklevel=2,
    )


def _entries(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        entries: list[dict[str, Any]] = json.loads(path.read_text())["entries"]
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidArgumentError(f"{path} is not a sqlfeed feed state file: {err}") from None
    return entries


def _entry_to_restore(path: Path, metadata: Path, save_freq: int | str) -> dict[str, Any] | None:
    """The entry of the step the model is restored to, or the newest, or None (no file)."""
    entries = _entries(path)
    if not entries:
        return None
    if not metadata.exists():
        return entries[-1]
    saved = json.loads(metadata.read_text())
    key = [int(saved["epoch"]), 0 if save_freq == "epoch" else int(saved["batch"])]
    for entry in entries:
        if entry["key"] == key:
            return entry
    raise InvalidArgumentError(
        f"{path} has no feed state for the model's checkpoint (epoch {key[0]}, batch {key[1]}); "
        f"it has {[e['key'] for e in entries]}: list FeedCheckpoint before BackupAndRestore, "
        "with the same save_freq"
    )
