"""A job worker's deliveries as tf.data iterations.

:class:`JobEpochs`, which lives in :mod:`sqlfeed.dispatch.epochs` (shared with
:mod:`sqlfeed.torch`) and is re-exported here.
"""

from __future__ import annotations

from sqlfeed.dispatch.epochs import JobEpochs

__all__ = ["JobEpochs"]
