"""The HTML report of feature statistics: one self-contained, escaped, well-formed document."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import numpy as np
import pytest

import sqlfeed
from sqlfeed.dialects import MissingDependencyError
from sqlfeed.stats.model import ColumnStats, FeatureStats
from sqlfeed.stats.report import html_report, top_bars
from tests.helpers.cli import run_cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
EVIL = '<script>alert("x")</script> & co'


class Collector(HTMLParser):
    """Start tags with their attributes, and nesting errors of the non-void elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [attrs for name, attrs in self.tags if name == tag]


def feature_stats() -> FeatureStats:
    columns = [
        ColumnStats(
            "age",
            "numeric",
            "int64",
            count=1000,
            nulls=10,
            distinct=80,
            min=18,
            max=90,
            mean=41.5,
            variance=144.0,
            boundaries=[25, 33, 41, 50, 62],
            histogram=[160, 170, 165, 165, 170, 160],
        ),
        ColumnStats("empty", "numeric", "double", count=1000, nulls=1000, distinct=0),
        ColumnStats(
            "city",
            "categorical",
            "string",
            count=1000,
            nulls=100,
            distinct=250,
            distinct_exact=False,
            min="Aachen",
            max="Zwickau",
            vocabulary=["Berlin", EVIL, "$x$ Köln"],
            vocabulary_counts=[400, 200, 100],
            other_count=200,
        ),
        ColumnStats(
            "flag",
            "categorical",
            "bool",
            count=1000,
            distinct=2,
            vocabulary=[True, False],
            vocabulary_counts=[600, 400],
        ),
        ColumnStats(
            "target",
            "categorical",
            "int64",
            count=1000,
            distinct=2,
            min=0,
            max=1,
            vocabulary=[0, 1],
            vocabulary_counts=[700, 300],
            label=True,
        ),
        ColumnStats("id", "skip", "int64", count=1000, distinct=1000),
    ]
    return FeatureStats(
        columns={c.name: c for c in columns},
        rows=1000,
        method="sample",
        dialect="postgres",
        sql=f"SELECT * FROM t WHERE note = '{EVIL}'",
        sample_rows=500,
        label="target",
    )


@pytest.fixture(scope="module")
def stats() -> FeatureStats:
    return feature_stats()


@pytest.fixture(scope="module")
def page(stats: FeatureStats) -> str:
    return html_report(stats)


@pytest.fixture(scope="module")
def parsed(page: str) -> Collector:
    collector = Collector()
    collector.feed(page)
    collector.close()
    return collector


def png_of(src: str | None) -> bytes:
    assert src is not None
    assert src.startswith("data:image/png;base64,")
    return base64.b64decode(src.removeprefix("data:image/png;base64,"), validate=True)


def test_is_one_well_formed_html5_document(page: str, parsed: Collector) -> None:
    assert page.startswith("<!DOCTYPE html>")
    for tag in ("html", "head", "body", "title", "style", "table", "thead", "tbody"):
        assert len(parsed.named(tag)) == 1, tag
    assert parsed.errors == []
    assert parsed.stack == []
    assert parsed.named("meta")[0].get("charset") == "utf-8"
    assert "Feature statistics" in "".join(parsed.text)


def test_one_png_image_per_charted_column(stats: FeatureStats, parsed: Collector) -> None:
    numeric = [c for c in stats.columns.values() if c.kind == "numeric" and sum(c.histogram)]
    categorical = [c for c in stats.columns.values() if c.kind == "categorical"]
    images = parsed.named("img")
    assert len(images) == len(numeric) + len(categorical) == 4
    alts = [img["alt"] for img in images]
    assert alts == ["Histogram of age", *(f"Top values of {c.name}" for c in categorical)]
    for img in images:
        assert img["width"] == "640"
        png = png_of(img["src"])
        assert png.startswith(PNG_SIGNATURE)
        assert len(png) > 2048


def test_all_null_numeric_column_has_a_note_instead(page: str) -> None:
    assert "No histogram: the column has no non-NULL values." in page
    assert 'alt="Histogram of empty"' not in page


def test_self_contained(page: str, parsed: Collector) -> None:
    assert not re.search(r"https?://", page)
    assert parsed.named("script") == []
    assert parsed.named("link") == []
    for tag in ("img", "source", "iframe"):
        for attrs in parsed.named(tag):
            assert (attrs.get("src") or "").startswith("data:")


def test_values_are_escaped(page: str, parsed: Collector) -> None:
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in page
    assert EVIL in "".join(parsed.text)  # the SQL, shown as text
    assert parsed.named("pre")[0]["class"] == "sql"


def test_header_and_summary(page: str, parsed: Collector) -> None:
    text = " ".join(parsed.text)
    assert "sample (500 sample rows)" in text
    assert "postgres" in text
    assert "1,000" in text
    assert "≈250" in text  # approximate distinct
    assert "12" in text  # stddev of variance 144
    custom = html_report(feature_stats(), title="Mine & <yours>")
    assert "<title>Mine &amp; &lt;yours&gt;</title>" in custom


def test_null_rates_are_highlighted(page: str) -> None:
    rows = {
        m.group(2): m.group(1) or ""
        for m in re.finditer(r'<tr(?: class="([^"]*)")?><td>(?:<a [^>]*>)?([^<]+)', page)
    }
    assert "null-high" in rows["empty"].split()  # 100% NULL
    assert "null-warn" in rows["city"].split()  # 10% NULL
    assert rows["age"] == ""  # 1% NULL
    assert "label" in rows["target"].split()
    assert page.count('<span class="badge">label</span>') == 2  # table and section


def test_chart_is_not_blank(parsed: Collector) -> None:
    from matplotlib.image import imread

    pixels = imread(io.BytesIO(png_of(parsed.named("img")[0]["src"])), format="png")
    assert pixels.ndim == 3
    assert pixels.shape[1] == 640
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 1
    not_white = np.any(pixels[..., :3] < 0.9, axis=-1).mean()
    assert not_white > 0.02


def test_unusual_numeric_edges_still_chart() -> None:
    """Dates (also as ISO text, as after a JSON round trip) and repeated boundaries."""
    days = [dt.date(2024, 1, d) for d in (1, 8, 15, 22, 31)]
    columns = [
        ColumnStats(
            "day",
            "numeric",
            "date32",
            count=9,
            min=days[0],
            max=days[-1],
            boundaries=days[1:-1],
            histogram=[2, 3, 2, 2],
        ),
        ColumnStats(
            "iso",
            "numeric",
            "date32",
            count=9,
            min=days[0].isoformat(),
            max=days[-1].isoformat(),
            boundaries=[d.isoformat() for d in days[1:-1]],
            histogram=[2, 3, 2, 2],
        ),
        ColumnStats(
            "skewed",
            "numeric",
            "int64",
            count=9,
            min=0,
            max=9,
            boundaries=[0, 0, 1],
            histogram=[0, 5, 2, 2],
            boundaries_exact=False,
        ),
    ]
    stats = FeatureStats({c.name: c for c in columns}, rows=9, method="accumulate")
    collector = Collector()
    collector.feed(html_report(stats))
    images = collector.named("img")
    assert len(images) == 3
    assert all(png_of(img["src"]).startswith(PNG_SIGNATURE) for img in images)
    assert "drawn with equal width (approximate quantiles)" in "".join(collector.text)


def test_missing_matplotlib_is_a_missing_dependency(
    stats: FeatureStats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(MissingDependencyError, match=r"sqlfeed\[report\]"):
        html_report(stats)


def test_report_imports_nothing_of_sqlfeed_but_stats_and_dialects() -> None:
    code = (
        "import sys, sqlfeed.stats.report\n"
        "own = ('sqlfeed.stats', 'sqlfeed.dialects')\n"
        "other = [m for m in sys.modules if m.startswith('sqlfeed.') and not m.startswith(own)]\n"
        "assert not other, other"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- dates at the ends of the calendar, NaN and infinities -----------------------------------

EDGE_DAYS = """
SELECT CASE WHEN range = 0 THEN DATE '0001-01-01' WHEN range = 1 THEN DATE '9999-12-31'
            ELSE DATE '2020-01-01' + CAST(range AS INTEGER) END AS day,
       DATE '0001-01-01' + CAST(range * 300 AS INTEGER) AS spread,
       TIMESTAMP '0001-01-01 00:00:00' + TO_HOURS(CAST(range AS BIGINT)) AS early,
       CASE WHEN range % 7 = 0 THEN 'NaN'::DOUBLE WHEN range % 11 = 0 THEN 'inf'::DOUBLE
            ELSE range * 1e302 END AS wild
FROM range(2500)
"""


@pytest.mark.parametrize("method", ["pushdown", "accumulate"])
def test_dates_from_year_1_to_9999_and_non_finite_floats_chart(method: str, tmp_path: Path) -> None:
    stats = sqlfeed.compute_stats(EDGE_DAYS, sqlfeed.connect(duckdb.connect()), method=method)
    assert (stats["day"].min, stats["day"].max) == (dt.date(1, 1, 1), dt.date(9999, 12, 31))
    assert (stats["wild"].nans, stats["wild"].infinities) == (358, 195)  # range % 7, % 11
    path = tmp_path / "stats.json"
    stats.save(str(path))
    for shown in (stats, FeatureStats.load(str(path))):
        collector = Collector()
        page = html_report(shown)
        collector.feed(page)
        images = collector.named("img")
        assert [img["alt"] for img in images] == [f"Histogram of {n}" for n in shown.columns]
        assert all(png_of(img["src"]).startswith(PNG_SIGNATURE) for img in images)
        text = "".join(collector.text)
        assert "358 NaN values are not drawn." in text
        assert "<th>NaN</th><th>±inf</th>" in page


def test_the_summary_shows_nan_and_infinity_counts_and_time_moments() -> None:
    columns = [
        ColumnStats(
            "x",
            "numeric",
            "double",
            count=10,
            nans=3,
            infinities=2,
            min=-1.0,
            max=math.inf,
            mean=0.5,
            variance=4.0,
            boundaries=[0.0],
            histogram=[3, 2],
        ),
        ColumnStats(
            "d",
            "numeric",
            "date32[day]",
            count=2,
            min=dt.date(2024, 1, 1),
            max=dt.date(2024, 1, 3),
            mean=19724.0,
            variance=1.0,
            unit="days",
            boundaries=[dt.date(2024, 1, 3)],
            histogram=[1, 1],
        ),
    ]
    page = html_report(FeatureStats({c.name: c for c in columns}, rows=10, method="pushdown"))
    assert "<th>NaN</th><th>±inf</th>" in page
    row = re.search(r'<tr><td><a href="#col-0">x</a>.*?</tr>', page)
    assert row is not None
    assert row.group(0).endswith("<td>3</td><td>2</td></tr>")
    assert "<td>2024-01-02</td><td>1 days</td>" in page  # mean as a date, stddev in days


def test_cli_stats_html_renders_a_date_of_year_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with duckdb.connect("data.duckdb") as connection:
        connection.execute(f"CREATE TABLE t AS {EDGE_DAYS}")
    run = run_cli(
        [
            "stats",
            "--db",
            "duckdb:///data.duckdb",
            "SELECT day, spread FROM t",
            "--out",
            "stats.json",
            "--html",
            "report.html",
        ]
    )
    assert run.code == 0, run.err
    page = (tmp_path / "report.html").read_text()
    assert page.count("<img") == 2
    assert "Traceback" not in run.err


def test_the_top_values_chart_draws_the_top_values_and_says_the_rest() -> None:
    """A large remainder is a share in the caption, not a bar that dwarfs the top values."""
    column = ColumnStats(
        "c",
        "categorical",
        "string",
        count=1000,
        nulls=50,
        distinct=200,
        vocabulary=[f"v{i}" for i in range(25)],
        vocabulary_counts=[10] * 25,
        other_count=700,
    )
    labels, counts, note = top_bars(column)
    assert labels == [f"v{i}" for i in range(20)]  # at most CHART_TOP bars, one scale
    assert counts == [10] * 20
    assert "Top 20 values of 200: 21.1% of the 950 non-NULL values" in note
    assert "other values (not drawn): 750, 78.9%" in note
    assert "NULL: 50 of 1,000, 5.0%" in note
    stats = FeatureStats(columns={"c": column}, rows=1000, method="pushdown")
    assert html.escape(note) in html_report(stats)


def test_binary_values_are_labelled_with_their_bytes_escaped() -> None:
    column = ColumnStats(
        "b",
        "categorical",
        "binary",
        count=3,
        distinct=2,
        vocabulary=[b"\xff\x00b", b"ok"],
        vocabulary_counts=[2, 1],
    )
    assert top_bars(column)[0] == ["\\xff\\x00b", "ok"]


def test_summary_shows_time_means_as_durations_and_marks_element_statistics() -> None:
    clock = ColumnStats(
        "clock",
        "numeric",
        "time64[us]",
        count=2,
        distinct=2,
        mean=3_716_250_000.0,
        variance=4e12,
        boundaries=[dt.time(1)],
        histogram=[1, 1],
        min=dt.time(1),
        max=dt.time(1, 2),
    )
    tags = ColumnStats(
        "tags",
        "categorical",
        "list<item: string>",
        count=4,
        distinct=2,
        elements=True,
        vocabulary=["a", "b"],
        vocabulary_counts=[3, 1],
    )
    report = html_report(FeatureStats({"clock": clock, "tags": tags}, rows=2, method="pushdown"))
    assert "<td>1:01:56.250000</td><td>2 s</td>" in report
    assert "<td>categorical (elements)</td>" in report
