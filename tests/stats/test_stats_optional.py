"""The optional packages the statistics draw with: one line naming the extra to install."""

from __future__ import annotations

import sys

import pytest

from sqlfeed.dialects import MissingDependencyError
from sqlfeed.stats.keras import to_keras
from sqlfeed.stats.model import FeatureStats


def test_missing_keras_names_the_tf_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "keras", None)
    monkeypatch.setitem(sys.modules, "keras.layers", None)
    with pytest.raises(MissingDependencyError) as caught:
        to_keras(FeatureStats(columns={}, rows=0, method="pushdown"))
    assert str(caught.value) == (
        "to_keras (Keras preprocessing layers) needs keras: pip install 'sqlfeed[tf]'"
    )
