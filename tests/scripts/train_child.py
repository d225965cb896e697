"""A ``sqlfeed.ml.train(..., checkpoint_dir=...)`` process for the kill-and-resume test.

Usage: python -m tests.scripts.train_child PHASE WORKDIR [URL TABLE]

It trains a ``dnn`` on the table ``TABLE`` of ``URL`` (default: ``t`` of
``WORKDIR/data.duckdb``; made by :mod:`tests.ml.test_train_resume`, with the columns ``id,
x, f1, f2, color, y``) through the public API, exactly as a user's call would,
with the checkpoints in ``WORKDIR/<ck>`` and the model written to ``WORKDIR/<models>/m``.
PHASE is ``full`` (the uninterrupted run, its own folders), ``first`` (the run the test
SIGKILLs: it prints ``CHECKPOINT`` once a checkpoint is written, then takes each later
batch slowly) or ``resume`` (the same call as ``first``, run again).

Observation only, the training path stays sqlfeed's own: the Keras model sqlfeed builds
gets a ``train_step`` that logs the ``x`` values of each batch it trains on (through
``tf.py_function``, so the line is written when the model takes the batch, not when the
input pipeline prefetches it), and Keras's ``BackupAndRestore`` (which sqlfeed lists after
its ``FeedCheckpoint``) logs each checkpoint it writes. The log, ``WORKDIR/<PHASE>.log``,
flushed at every line:

* ``E <epoch>``: an epoch begins;
* ``B <x> <x> ...``: a batch the model trained on;
* ``C <epoch> <batch>``: a checkpoint was written, as ``training_metadata.json`` says.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

QUERY = "SELECT id, x, f1, f2, color, y FROM {table}"
"""``x`` names the row (a float unique in every row is a feature); ``id`` is the split key."""
OPTIONS: dict[str, Any] = {
    "family": "dnn",
    "hidden_units": (16, 8),
    "epochs": 2,
    "batch_size": 64,
    "key": "id",
    "seed": 5,
    "report": False,
}
FOLDERS = {
    "full": ("ck-full", "models-full"),
    "first": ("ck", "models"),
    "resume": ("ck", "models"),
}
"""Each phase's checkpoint folder and the folder its model is written into."""
SLOW = 0.05
"""Seconds each batch takes after the first checkpoint of the ``first`` phase."""


class Log:
    """The log of a phase (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def line(self, text: str) -> None:
        self.file.write(text + "\n")
        self.file.flush()


def observe(phase: str, log: Log) -> None:
    """Wrap the model sqlfeed builds and Keras's ``BackupAndRestore`` to log (see above)."""
    import keras
    import tensorflow as tf

    import sqlfeed.ml.training as training

    build = training.build_model  # type: ignore[attr-defined]

    def logged_model(*args: Any, **kwargs: Any) -> Any:
        model = build(*args, **kwargs)
        step = model.train_step

        def write(x: Any) -> None:
            log.line("B " + " ".join(repr(float(v)) for v in x.numpy()))

        def train_step(data: Any) -> Any:
            tf.py_function(write, [data[0]["x"]], [])
            return step(data)

        model.train_step = train_step
        model.jit_compile = False  # py_function does not compile (XLA is off on CPUs anyway)
        return model

    training.build_model = logged_model  # type: ignore[attr-defined]

    class Backup(keras.callbacks.BackupAndRestore):  # type: ignore[misc]
        """Keras's callback, logging each checkpoint it writes."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.metadata = Path(self.backup_dir) / "training_metadata.json"
            self.seen = self._stamp()
            self.saved = False

        def _stamp(self) -> int:
            return self.metadata.stat().st_mtime_ns if self.metadata.exists() else 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            super().on_epoch_begin(epoch, logs)
            log.line(f"E {epoch}")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            super().on_train_batch_end(batch, logs)
            stamp = self._stamp()
            if stamp != self.seen:
                self.seen = stamp
                saved = json.loads(self.metadata.read_text())
                log.line(f"C {saved['epoch']} {saved['batch']}")
                if phase == "first" and not self.saved:
                    self.saved = True
                    print("CHECKPOINT", flush=True)
            if phase == "first" and self.saved:
                time.sleep(SLOW)  # the test kills us in here

    keras.callbacks.BackupAndRestore = Backup


def main() -> None:
    phase, workdir = sys.argv[1], Path(sys.argv[2])
    url, table = (
        sys.argv[3:5] if len(sys.argv) > 3 else (f"duckdb:///{workdir / 'data.duckdb'}", "t")
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    observe(phase, Log(workdir / f"{phase}.log"))
    import sqlfeed.ml

    checkpoints, models = FOLDERS[phase]
    (workdir / models).mkdir(exist_ok=True)
    sqlfeed.ml.train(
        QUERY.format(table=table),
        url,
        label="y",
        out=workdir / models / "m",
        checkpoint_dir=str(workdir / checkpoints),
        progress=lambda line: print(line, flush=True),
        **OPTIONS,
    )
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
