"""``sqlfeed demo --framework torch``: train a small PyTorch model from the demo's SELECT.

:mod:`sqlfeed.cli.demo` makes the demo tables in a DuckDB file and calls
:func:`run_torch_demo`, which feeds a ``DataLoader`` with two worker processes from a
:class:`sqlfeed.torch.SQLDataset` (each worker reads its share of the partitions on its
own connection), trains a logistic-regression-sized MLP for two epochs, checks that every
epoch delivered each row of the query exactly once, and prints the validation accuracy
and the feed's throughput. torch is imported when the demo runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlfeed import connect
from sqlfeed import torch as sqlfeed_torch
from sqlfeed.dialects.optional import require

__all__ = ["run_torch_demo"]

NUMERIC = ("age", "amount")
CATEGORICAL = {"segment": ("basic", "plus", "pro"), "channel": ("web", "store", "phone", "partner")}


def run_torch_demo(
    url: str,
    training: str,
    validation: str,
    say: Callable[[str], None],
    *,
    partitions: int = 16,
    epochs: int = 2,
    batch_size: int = 1024,
) -> dict[str, float]:
    """Train from ``training`` on the DuckDB file ``url`` with two DataLoader workers.

    Returns:
        ``accuracy`` on ``validation`` and the feed's ``rows_per_second``.

    Raises:
        MissingDependencyError: torch is not installed.
        AssertionError: an epoch lost or repeated a row.
    """
    torch = require("torch", "the torch demo's PyTorch model")
    torch.manual_seed(0)
    with connect(url) as source:
        expected = sorted(r[0] for r in source.rows(f"SELECT order_id FROM ({training}) q"))
        means = source.rows(
            f"SELECT AVG(age), STDDEV(age), AVG(amount), STDDEV(amount) FROM ({training}) q"
        )[0]
    options: dict[str, Any] = {
        "label": "label",
        "features": ["order_id", *NUMERIC, *CATEGORICAL],
        "masks": list(NUMERIC),
        "tokenizer": {n: _encoder(torch, v) for n, v in CATEGORICAL.items()},
    }
    dataset = sqlfeed_torch.SQLDataset(
        training,
        url,
        batch_size=batch_size,
        shuffle_buffer=20_000,
        seed=7,
        partitions=partitions,
        **options,
    )
    loader = sqlfeed_torch.dataloader(dataset, num_workers=2, stateful=False)
    say(f"1. {dataset!r}, 2 DataLoader worker processes, each with its own connection")
    model = torch.nn.Sequential(
        torch.nn.Linear(2 * len(NUMERIC) + 7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_of = torch.nn.BCEWithLogitsLoss()
    fed, started = 0, time.perf_counter()
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        seen, losses = [], []
        for features, label in loader:
            seen.append(features["order_id"])
            optimizer.zero_grad()
            loss = loss_of(model(_inputs(torch, features, means)).squeeze(1), label.float())
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        ids = torch.cat(seen).tolist()
        fed += len(ids)
        if sorted(ids) != expected:
            raise AssertionError(f"epoch {epoch + 1} did not deliver each row exactly once")
        say(
            f"2. epoch {epoch + 1}/{epochs}: {len(ids):,} rows (each once), loss "
            f"{sum(losses) / len(losses):.4f}"
        )
    rate = fed / (time.perf_counter() - started)
    accuracy = _accuracy(torch, sqlfeed_torch, model, validation, url, batch_size, options, means)
    say(f"3. validation accuracy {accuracy:.3f}; training fed {rate:,.0f} rows/s")
    return {"accuracy": accuracy, "rows_per_second": rate}


def _encoder(torch: Any, vocabulary: tuple[str, ...]) -> Callable[[list[str]], Any]:
    """A tokenizer hook: strings to one-hot rows (unknown: all zeros)."""
    index = {value: i for i, value in enumerate(vocabulary)}

    def encode(texts: list[str]) -> Any:
        ids = torch.tensor([index.get(t, len(vocabulary)) for t in texts])
        return torch.nn.functional.one_hot(ids, len(vocabulary) + 1)[:, :-1].float()

    return encode


def _inputs(torch: Any, features: dict[str, Any], means: tuple[Any, ...]) -> Any:
    age = (features["age"] - float(means[0])) / float(means[1])
    amount = (features["amount"] - float(means[2])) / float(means[3])
    columns = [age, amount, features["age_is_null"].float(), features["amount_is_null"].float()]
    return torch.cat([torch.stack(columns, 1), features["segment"], features["channel"]], 1)


def _accuracy(
    torch: Any,
    sqlfeed_torch: Any,
    model: Any,
    query: str,
    url: str,
    batch_size: int,
    options: dict[str, Any],
    means: tuple[Any, ...],
) -> float:
    right = total = 0
    validation = sqlfeed_torch.SQLDataset(
        query, url, batch_size=batch_size, partitions=4, **options
    )
    with torch.no_grad():
        for features, label in validation:
            guess = model(_inputs(torch, features, means)).squeeze(1) > 0
            right += int((guess == label.bool()).sum())
            total += len(label)
    return right / max(total, 1)
