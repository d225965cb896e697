"""A self-contained HTML report of :class:`sqlfeed.stats.model.FeatureStats`.

One HTML5 document with inline CSS and the charts embedded as PNG ``data:`` URIs: a header
(how the statistics were computed), a summary table with one row per column, a histogram per
numeric column and a top-values bar chart per categorical column (its top values drawn on
one scale; the other values and NULLs given as shares in the caption). It needs matplotlib, which
is imported only when a report is rendered. Figures are built with
:class:`matplotlib.figure.Figure` and the Agg canvas, never pyplot, so rendering is
thread-safe and leaves no global figure behind.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import html
import io
import itertools
import math
from typing import TYPE_CHECKING, Any

from sqlfeed.dialects.optional import require
from sqlfeed.stats.fed import fed_kind
from sqlfeed.stats.model import ColumnStats, FeatureStats
from sqlfeed.stats.units import DAYS, MICROSECONDS, from_units, to_units

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["html_report"]

_WIDTH_PX = 640
_DPI = 100
_BAR = "#4c72b0"
_NULL_WARN = 0.05
_NULL_HIGH = 0.5

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
  color: #222; padding: 0 1em; }
h1 { margin-bottom: .2em; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }
dl.meta dt { font-weight: 600; }
dl.meta dd { margin: 0; }
pre.sql { background: #f5f5f5; border: 1px solid #ddd; padding: .6em; overflow-x: auto;
  white-space: pre-wrap; }
table.summary { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
table.summary th, table.summary td { border-bottom: 1px solid #ddd; padding: .25em .5em;
  text-align: right; }
table.summary th:nth-child(-n+3), table.summary td:nth-child(-n+3) { text-align: left; }
table.summary thead th { background: #f0f0f0; }
tr.null-warn td.nulls { background: #fff3cd; }
tr.null-high td.nulls { background: #f8b4b4; font-weight: 600; }
span.badge { background: #4c72b0; color: #fff; border-radius: 3px; padding: 0 .35em;
  font-size: 80%; margin-left: .4em; }
section.column { display: inline-block; vertical-align: top; margin: 1em 1em 0 0; }
section.column h3 { margin: .2em 0; }
p.none { color: #777; font-style: italic; width: 640px; }
figure { margin: 0; }
figcaption { color: #555; font-size: 90%; }
"""


def html_report(stats: FeatureStats, title: str | None = None) -> str:
    """Render statistics as one self-contained HTML5 document.

    Args:
        stats: the statistics to show.
        title: the page title; ``"Feature statistics"`` when None.

    Returns:
        The HTML text: inline CSS, charts as ``data:image/png;base64`` images, no scripts
        and no external references.

    Raises:
        MissingDependencyError: matplotlib is not installed.
    """
    figure_cls = require("matplotlib.figure", "the HTML report").Figure

    heading = title if title is not None else "Feature statistics"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{_esc(heading)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        f"<h1>{_esc(heading)}</h1>",
        _header(stats),
        "<h2>Columns</h2>",
        _summary(stats),
        "<h2>Distributions</h2>",
    ]
    for index, column in enumerate(stats.columns.values()):
        if column.kind in ("numeric", "categorical"):
            parts.append(_section(figure_cls, index, column, _is_label(stats, column)))
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def _header(stats: FeatureStats) -> str:
    """How the statistics were computed: rows, method, dialect and the SQL."""
    method = stats.method
    if stats.sample_rows is not None:
        method += f" ({_fmt(stats.sample_rows)} sample rows)"
    items = [("Rows", _fmt(stats.rows)), ("Method", method)]
    if stats.dialect:
        items.append(("Dialect", stats.dialect))
    if stats.label:
        items.append(("Label", stats.label))
    meta = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items)
    sql = f'<pre class="sql">{_esc(stats.sql)}</pre>' if stats.sql else ""
    return f'<dl class="meta">{meta}</dl>\n{sql}'


def _summary(stats: FeatureStats) -> str:
    """One table row per column: type, counts, NULLs, distinct values and moments."""
    non_finite = any(c.nans or c.infinities for c in stats.columns.values())
    head = (
        "<thead><tr><th>Column</th><th>Kind</th><th>Arrow type</th><th>Count</th>"
        "<th>NULLs</th><th>Distinct</th><th>Min</th><th>Max</th><th>Mean</th>"
        "<th>Std dev</th>" + ("<th>NaN</th><th>±inf</th>" if non_finite else "") + "</tr></thead>"
    )
    rows = []
    for index, c in enumerate(stats.columns.values()):
        classes = [_null_class(c.null_rate)] + (["label"] if _is_label(stats, c) else [])
        cls = " ".join(x for x in classes if x)
        name = _esc(c.name)
        if c.kind in ("numeric", "categorical"):
            name = f'<a href="#col-{index}">{name}</a>'
        if _is_label(stats, c):
            name += '<span class="badge">label</span>'
        kind = f"{c.kind} (elements)" if c.elements else c.kind
        distinct = _fmt(c.distinct)
        if c.distinct is not None and not c.distinct_exact:
            distinct = "≈" + distinct
        nulls = f"{_fmt(c.nulls)} ({c.null_rate:.1%})" if c.count else _fmt(c.nulls)
        cells = [_cell(v) for v in (c.min, c.max, *_moments(c))]
        if non_finite:
            cells += [_cell(c.nans), _cell(c.infinities)]
        tr = f'<tr class="{cls}">' if cls else "<tr>"
        rows.append(
            f"{tr}<td>{name}</td><td>{_esc(kind)}</td><td>{_esc(c.arrow_type)}</td>"
            f'<td>{_esc(_fmt(c.count))}</td><td class="nulls">{_esc(nulls)}</td>'
            f"<td>{_esc(distinct)}</td>{''.join(cells)}</tr>"
        )
    return f'<table class="summary">{head}<tbody>\n' + "\n".join(rows) + "\n</tbody></table>"


def _section(figure_cls: type[Figure], index: int, c: ColumnStats, label: bool) -> str:
    """The chart of one numeric or categorical column, or a note when it has no data."""
    badge = '<span class="badge">label</span>' if label else ""
    head = f'<section class="column" id="col-{index}"><h3>{_esc(c.name)}{badge}</h3>'
    if c.kind == "numeric":
        if not c.histogram or sum(c.histogram) == 0:
            note = "No histogram: the column has no non-NULL values."
            if c.nans:
                note = "No histogram: the column has no values but NULL and NaN."
            return f'{head}<p class="none">{note}</p></section>'
        png, note = _histogram(figure_cls, c)
        alt = f"Histogram of {c.name}"
    else:
        if not c.vocabulary_counts:
            note = top_bars(c)[2] if c.other_count or c.nulls else "No values to chart."
            return f'{head}<p class="none">{_esc(note)}</p></section>'
        png, note = _top_values(figure_cls, c)
        alt = f"Top values of {c.name}"
    src = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    return (
        f'{head}<figure><img src="{src}" alt="{_esc(alt)}" width="{_WIDTH_PX}">'
        f"<figcaption>{_esc(note)}</figcaption></figure></section>"
    )


def _histogram(figure_cls: type[Figure], c: ColumnStats) -> tuple[bytes, str]:
    """A histogram of the quantile buckets, and a caption.

    The buckets run from ``min`` through the boundaries to ``max``. When those edges are
    strictly increasing numbers (or dates) the bars span them with height ``count / width``,
    so each bar's area is its row count; otherwise (repeated boundaries of skewed data) the
    buckets are drawn side by side with equal width and their counts as heights.
    """
    fig = figure_cls(figsize=(_WIDTH_PX / _DPI, 3.2), dpi=_DPI, layout="constrained")
    ax = fig.add_subplot()
    counts = list(c.histogram)
    raw_edges = [c.min, *c.boundaries, c.max]
    edges, dates = _numbers(raw_edges)
    approx = "" if c.boundaries_exact else " (approximate quantiles)"
    widths = [b - a for a, b in itertools.pairwise(edges)] if edges is not None else []
    proportional = len(widths) == len(counts) and all(0 < w < math.inf for w in widths)
    if proportional and edges is not None:
        heights = [n / w for n, w in zip(counts, widths, strict=True)]
        ax.bar(edges[:-1], heights, width=widths, align="edge", color=_BAR, edgecolor="white")
        ax.set_xlim(edges[0], edges[-1])
        ax.set_ylabel("rows per unit" if not dates else "rows per day")
        if dates:  # days since 1970 on the axis, labelled here: matplotlib's own date
            # axis fails for years outside 1..9999, which its margins reach from 0001-01-01
            from matplotlib.ticker import FuncFormatter, MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
            span = edges[-1] - edges[0]
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _day_label(x, span)))
        note = f"{len(counts)} quantile buckets, bar area proportional to rows{approx}."
    else:
        positions = list(range(len(counts)))
        ax.bar(positions, counts, width=0.9, color=_BAR)
        labels = [_short(_fmt(v), 12) for v in raw_edges]
        step = max(1, math.ceil(len(labels) / 8))
        ticks = [i - 0.5 for i in range(len(labels))]
        if len(labels) == len(counts) + 1:
            ax.set_xticks(ticks[::step], labels[::step], parse_math=False, fontsize=8)
        else:
            ax.set_xticks([])
        ax.set_ylabel("rows")
        note = f"{len(counts)} quantile buckets drawn with equal width{approx}."
    if c.nans:
        note += f" {_fmt(c.nans)} NaN values are not drawn."
    ax.set_title(c.name, parse_math=False)
    _tidy(ax)
    return _png(fig), note


def _top_values(figure_cls: type[Figure], c: ColumnStats) -> tuple[bytes, str]:
    """A horizontal bar chart of the most frequent values, and its caption."""
    labels, counts, note = top_bars(c)
    height = min(12.0, 1.0 + 0.28 * len(labels))
    fig = figure_cls(figsize=(_WIDTH_PX / _DPI, height), dpi=_DPI, layout="constrained")
    ax = fig.add_subplot()
    positions = list(range(len(labels)))
    bars = ax.barh(positions, counts, color=_BAR)
    ax.set_yticks(positions, labels, parse_math=False, fontsize=8)
    ax.invert_yaxis()
    ax.bar_label(bars, labels=[f"{n:,}" for n in counts], padding=3, fontsize=8)
    ax.set_xlim(0, max(counts, default=1) * 1.15 or 1)
    ax.set_xlabel("elements" if c.elements else "rows")
    ax.set_title(c.name, parse_math=False)
    _tidy(ax)
    return _png(fig), note


CHART_TOP = 20
"""At most this many of a vocabulary's values are drawn."""


def top_bars(c: ColumnStats) -> tuple[list[str], list[int], str]:
    """The bars of a top-values chart (labels, counts) and its caption.

    Only the most frequent values are drawn, on one scale; the values outside them and
    the NULLs are said in the caption with their shares, so that a large remainder (a
    vocabulary's "other values") cannot shrink the top values' bars to nothing.
    """
    shown = min(len(c.vocabulary_counts), CHART_TOP)
    labels = [_category(v) for v in c.vocabulary[:shown]]
    counts = list(c.vocabulary_counts[:shown])
    present = c.count - c.nulls
    rest = c.other_count + sum(c.vocabulary_counts[shown:])
    what = "elements" if c.elements else "non-NULL values"
    note = f"Top {shown} values" + (f" of {_fmt(c.distinct)}" if c.distinct else "")
    note += f": {_share(sum(counts), present)} of the {_fmt(present)} {what}"
    if rest:
        note += f"; other values (not drawn): {_fmt(rest)}, {_share(rest, present)}"
    if c.nulls:
        note += f"; NULL: {_fmt(c.nulls)} of {_fmt(c.count)}, {_share(c.nulls, c.count)}"
    return labels, counts, note + "."


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "0%"


def _tidy(ax: Axes) -> None:
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)
    ax.tick_params(labelsize=8)


def _png(fig: Figure) -> bytes:
    """The figure as PNG bytes; the figure is cleared afterwards so nothing is kept."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=_DPI)
    finally:
        fig.clear()
    return buffer.getvalue()


def _numbers(values: list[Any]) -> tuple[list[float] | None, bool]:
    """Values as floats for plotting (dates as days since 1970), or None if not all are.

    Returns:
        The floats (None when a value is missing, not finite or not a number or date) and
        whether the values were dates.
    """
    out: list[float] = []
    dates = False
    for value in values:
        if isinstance(value, str):
            try:
                value = dt.datetime.fromisoformat(value)
            except ValueError:
                return None, False
        if isinstance(value, dt.date):
            dates = True
            out.append(to_units(value, MICROSECONDS) / 86_400e6)
        elif isinstance(value, int | float | decimal.Decimal) and not isinstance(value, bool):
            out.append(float(value))
        elif hasattr(value, "item") and isinstance(value.item(), int | float):  # numpy
            out.append(float(value.item()))
        else:
            return None, False
    if not all(math.isfinite(x) for x in out):
        return None, False
    return out, dates


def _moments(c: ColumnStats) -> tuple[Any, Any]:
    """Mean and standard deviation as shown: a time column's as a moment and a duration."""
    if c.mean is None or c.stddev is None:
        return c.mean, c.stddev
    if c.unit is None and fed_kind(c.arrow_type)[0] in ("time", "duration"):  # microseconds
        return dt.timedelta(microseconds=round(c.mean)), f"{c.stddev / 1e6:.6g} s"
    if c.unit is None:
        return c.mean, c.stddev
    mean = from_units(c.mean, c.unit)
    if c.unit == DAYS:
        return (mean.date() if mean else c.mean), f"{c.stddev:.6g} days"
    return (mean or c.mean), f"{c.stddev / 1e6:.6g} s"


def _day_label(days: float, span: float) -> str:
    """An axis label for ``days`` since 1970 (blank outside the years 1..9999)."""
    moment = from_units(days, DAYS)
    if moment is None:
        return ""
    return moment.date().isoformat() if span > 3 else moment.strftime("%m-%d %H:%M")


def _null_class(rate: float) -> str:
    if rate >= _NULL_HIGH:
        return "null-high"
    if rate >= _NULL_WARN:
        return "null-warn"
    return ""


def _is_label(stats: FeatureStats, c: ColumnStats) -> bool:
    return c.label or (stats.label is not None and stats.label == c.name)


def _cell(value: Any) -> str:
    """A table cell; long values are cut, with the whole value in the tooltip."""
    text = _fmt(value)
    short = _short(text, 32)
    if short != text:
        return f'<td title="{_esc(text)}">{_esc(short)}</td>'
    return f"<td>{_esc(text)}</td>"


def _fmt(value: Any) -> str:
    """A value as short text: thousands separators, 6 significant digits, ISO dates."""
    if value is None:
        return "—"
    if hasattr(value, "item") and not isinstance(value, dt.date | decimal.Decimal):
        value = value.item()  # numpy scalars
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float | decimal.Decimal):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):  # control characters and non-UTF-8 bytes as \xNN
        text = value.decode("utf-8", "backslashreplace")
        return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return str(value)


def _category(value: Any) -> str:
    if value is None:
        return "NULL"
    text = _fmt(value)
    return _short(text, 30) if text else '""'


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)
