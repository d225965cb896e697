"""``iceberg:`` and ``delta:`` URLs: :func:`sqlfeed.connect` opens a lakehouse table.

* ``iceberg:///relative/metadata/v3.metadata.json``, ``iceberg:////absolute/...json``: a
  table by its metadata file;
* ``iceberg://CATALOG/namespace.table``: a table of a pyiceberg catalog (its configuration
  from ``~/.pyiceberg.yaml`` or ``PYICEBERG_CATALOG__CATALOG__...`` variables; other URL
  options, such as ``uri`` and ``warehouse``, are passed to the catalog);
* ``delta:///relative/folder``, ``delta:////absolute/folder``: a Delta table.

Options: ``snapshot=ID`` (Iceberg) / ``version=N`` (Delta) or ``as_of=TIME`` (milliseconds
since the epoch, or an ISO time) for time travel; ``since=ID``: only rows added after that
snapshot; ``view=NAME``: the name queries read the table by (default: the table's name).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
from urllib.parse import parse_qs, unquote, urlsplit

from sqlfeed.dialects import InvalidArgumentError
from sqlfeed.io import MEMORY, Source, redact_url, url_path
from sqlfeed.lake.delta import delta_snapshot, delta_version
from sqlfeed.lake.iceberg import load_table, snapshot_id_at, table_snapshot
from sqlfeed.lake.source import LakeSource, LakeTable

__all__ = ["at_snapshot", "open_delta_url", "open_iceberg_url", "parse_time"]

_OPTIONS = {"snapshot", "version", "as_of", "since", "view"}


def parse_time(text: str) -> int:
    """Milliseconds since the epoch of ``text``.

    ``text`` is a number of milliseconds, or an ISO time (UTC unless it says).
    """
    if re.fullmatch(r"\d+", text.strip()):
        return int(text)
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"as_of={text!r}: give milliseconds since the epoch or an ISO time "
            "(2026-11-26T12:00:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def _options(url: str) -> dict[str, str]:
    query = url.partition("?")[2]
    return {key: values[-1] for key, values in parse_qs(query).items()}


def _number(options: dict[str, str], name: str, url: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    if not re.fullmatch(r"-?\d+", value):
        raise InvalidArgumentError(f"{redact_url(url)!r}: {name}={value!r} must be a whole number")
    return int(value)


def _view(options: dict[str, str], default: str) -> str:
    name = options.get("view") or re.sub(r"\W", "_", default) or "lake"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise InvalidArgumentError(f"the view name {name!r} must be a plain identifier (view=NAME)")
    return name


def open_iceberg_url(url: str) -> Source:
    """An Iceberg table's :class:`LakeSource` (see the module docstring for the URL)."""
    options = _options(url)
    parts = urlsplit(url)
    if parts.netloc:
        catalog, location = parts.netloc, unquote(parts.path.lstrip("/"))
        if "." not in location:
            raise InvalidArgumentError(
                f"{redact_url(url)!r}: name the table as iceberg://CATALOG/namespace.table"
            )
        properties = {k: v for k, v in options.items() if k not in _OPTIONS}
        table = load_table(location, catalog, properties)
        default = location.rsplit(".", 1)[-1]
    else:
        catalog, location = None, url_path(url, "iceberg")
        if location == MEMORY:
            raise InvalidArgumentError(
                f"{redact_url(url)!r}: give iceberg:////absolute/metadata.json or iceberg://CATALOG/ns.table"
            )
        table = load_table(location)
        folder = os.path.dirname(os.path.dirname(os.path.abspath(location)))
        default = os.path.basename(folder)
    name = _view(options, default)
    lake = LakeTable(
        "iceberg",
        name,
        location if catalog is None else f"{catalog}/{location}",
        latest=lambda snapshot, as_of: snapshot_id_at(_fresh(table), snapshot, as_of),
        load=lambda snapshot, since: table_snapshot(_fresh(table), name, location, snapshot, since),
    )
    return _source(lake, options, url, "snapshot")


def _fresh(table: object) -> object:
    """The table with its latest metadata.

    A catalog table is refreshed; a metadata file is returned as it is (a newer snapshot is
    a newer file).
    """
    refresh = getattr(table, "refresh", None)
    if refresh is not None and getattr(table, "catalog", None) is not None:
        with contextlib.suppress(NotImplementedError):  # a static table cannot refresh
            refresh()
    return table


def open_delta_url(url: str) -> Source:
    """A Delta table's :class:`LakeSource` (see the module docstring for the URL)."""
    options = _options(url)
    path = url_path(url, "delta")
    if path == MEMORY or not os.path.isdir(path):
        raise InvalidArgumentError(
            f"{redact_url(url)!r}: no Delta table folder at {path!r}; give "
            "delta:///relative/folder or delta:////absolute/folder"
        )
    path = os.path.abspath(path)
    name = _view(options, os.path.basename(path.rstrip("/")))
    lake = LakeTable(
        "delta",
        name,
        path,
        latest=lambda version, as_of: delta_version(path, version, as_of),
        load=lambda version, since: delta_snapshot(path, name, version or 0, since),
    )
    return _source(lake, options, url, "version")


def _source(lake: LakeTable, options: dict[str, str], url: str, pin: str) -> LakeSource:
    unknown = sorted(set(options) - _OPTIONS) if lake.kind == "delta" else []
    other = "version" if pin == "snapshot" else "snapshot"
    if unknown or other in options:
        bad = ", ".join(unknown or [other])
        raise InvalidArgumentError(
            f"{redact_url(url)!r}: unknown option {bad}; use {pin}=, as_of=, since=, view="
        )
    as_of = parse_time(options["as_of"]) if "as_of" in options else None
    if as_of is not None and pin in options:
        raise InvalidArgumentError(f"{redact_url(url)!r}: give {pin}= or as_of=, not both")
    return LakeSource(
        lake,
        snapshot=_number(options, pin, url),
        as_of_ms=as_of,
        since=_number(options, "since", url),
    )


def at_snapshot(url: str | None, as_of: str) -> str:
    """``url`` read at ``as_of`` (``--as-of``): a snapshot id / version, or a time.

    Raises:
        InvalidArgumentError: ``url`` is not a lakehouse table, or pins a snapshot already.
    """
    scheme = (url or "").partition(":")[0].lower()
    if scheme not in ("iceberg", "delta"):
        raise InvalidArgumentError(
            f"--as-of reads an iceberg: or delta: table at a snapshot; {scheme or 'this'} "
            "sources have none (time travel in SQL: the engine's own AS OF, where it has one)"
        )
    assert url is not None
    options = _options(url)
    if {"snapshot", "version", "as_of"} & set(options):
        raise InvalidArgumentError(
            "--as-of and the URL's snapshot=/version=/as_of= both pin a snapshot: keep one"
        )
    pin = "snapshot" if scheme == "iceberg" else "version"
    value = as_of.strip()
    option = f"{pin}={value}" if re.fullmatch(r"\d{1,12}|\d{14,}", value) else ""
    if not option:
        option = f"as_of={parse_time(value)}"
    return url + ("&" if "?" in url else "?") + option
