"""Secrets in URLs: a URL shown without its password, and a URL kept off the command line.

A database URL may carry a password in two places: its user information
(``postgresql://me:PASSWORD@host/db``) and its options (``?password=PASSWORD``,
``?sslpassword=``, an Iceberg catalog's ``?token=`` or ``?credential=``). :func:`redact_url`
parses the URL (SQLAlchemy's :func:`~sqlalchemy.engine.make_url`, the parser that connects
with it) and shows each of them as ``***``; every message, label, file, table and Parquet
metadata that names a URL names it through this. :func:`scrub` hides the secrets of the URLs
seen so far in text that did not come from a URL (a driver's message may quote its
connection string).

:func:`resolve_url` reads a URL from where ``ps`` does not show it: ``env:NAME`` (an
environment variable) or ``@PATH`` (the first line of a file).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote_plus

import sqlalchemy
from sqlalchemy.engine import make_url

from sqlfeed.dialects import InvalidArgumentError

__all__ = [
    "SECRET_OPTION_WORDS",
    "check_url_secrets",
    "redact_url",
    "remember_secrets",
    "resolve_url",
    "scrub",
]

HIDDEN = "***"
"""What a secret is shown as."""

SECRET_OPTION_WORDS = ("pass", "pwd", "secret", "token", "credential", "key", "auth", "sig")
"""A URL option whose name holds one of these words carries a secret (``password``,
``sslpassword``, ``passwd``, ``token``, ``credential``, ``s3.secret-access-key``,
``api_key``, ``sas_token``, ``signature``): its value is hidden."""

SCRUB_MIN_CHARS = 4
"""Secrets shorter than this are not searched for in free text (:func:`scrub`): replacing
every ``a`` of a message would garble it; URLs hide every secret whatever its length."""

_SEEN: set[str] = set()
_SEEN_LOCK = threading.Lock()


def _secret_option(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_OPTION_WORDS)


def _query_text(pairs: list[tuple[str, str]]) -> str:
    shown = [
        f"{quote_plus(name)}={HIDDEN if _secret_option(name) else quote(value, safe=':/@,')}"
        for name, value in pairs
    ]
    return "&".join(shown)


def _pairs(query: dict[str, str | tuple[str, ...]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name, value in query.items():
        values = value if isinstance(value, tuple) else (value,)
        out.extend((name, str(each)) for each in values)
    return out


def _parsed(url: str) -> sqlalchemy.engine.URL | None:
    """``url`` parsed as SQLAlchemy connects with it, or None.

    None when SQLAlchemy cannot parse it, or misreads it (:func:`_misread`).
    """
    try:
        parsed = make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError, TypeError):
        return None
    return None if _misread(parsed) else parsed


def _misread(parsed: sqlalchemy.engine.URL) -> bool:
    """Whether a password's ``@`` was not percent-encoded.

    SQLAlchemy ends the user information at the first ``@``: the rest of such a password
    becomes the host, the database or an option's name, each holding an ``@``.
    """
    if parsed.username is None and parsed.password is None:
        return False
    parts = [parsed.host or "", parsed.database or "", *parsed.query]
    return any("@" in part for part in parts)


def redact_url(url: str) -> str:
    """``url`` with its password and every secret option shown as ``***``.

    The URL is parsed, never matched: a password holding ``/ @ : ? # %`` (percent-encoded,
    or not where SQLAlchemy reads it so), a password without a user (``://:pw@host``) and
    ``?password=`` are hidden. A URL without secrets is returned as it is; a file path too.
    The secrets are remembered for :func:`scrub`.

    >>> redact_url("postgresql://me:p%2Fw@db:5432/x?password=pw&sslmode=require")
    'postgresql://me:***@db:5432/x?password=***&sslmode=require'
    >>> redact_url("mysql+pymysql://me:p@ss@db/x")
    'mysql+pymysql://me:***@db/x'
    >>> redact_url("duckdb:///data/file.duckdb")
    'duckdb:///data/file.duckdb'
    """
    text = str(url)
    remember_secrets(text)
    if "://" not in text:  # a path, or an opaque form (env:NAME): only its options
        head, mark, options = text.partition("?")
        pairs = _option_pairs(options)
        if not mark or not any(_secret_option(name) for name, _ in pairs):
            return text
        return f"{head}?{_query_text(pairs)}"
    parsed = _parsed(text)
    if parsed is None:
        return _redact_unparsed(text)
    pairs = _pairs(dict(parsed.query))
    if parsed.password is None and not any(_secret_option(name) for name, _ in pairs):
        return text
    shown = parsed.set(query={}).render_as_string(hide_password=True)
    return f"{shown}?{_query_text(pairs)}" if pairs else shown


def _option_pairs(options: str) -> list[tuple[str, str]]:
    return [(p.partition("=")[0], p.partition("=")[2]) for p in options.split("&") if p]


def _userinfo(text: str) -> tuple[str, str | None, str]:
    """``scheme://USERINFO@rest`` split where a browser splits it: at the last ``@``.

    For a URL SQLAlchemy cannot parse or misreads: hiding too much is safe. The user
    information is None when there is no ``@``.
    """
    scheme, _, rest = text.partition("://")
    if "@" not in rest:
        return scheme, None, rest
    userinfo, _, hostpart = rest.rpartition("@")
    return scheme, userinfo, hostpart


def _redact_unparsed(text: str) -> str:
    """A URL SQLAlchemy cannot parse or misreads, its password hidden (see :func:`_userinfo`)."""
    scheme, userinfo, rest = _userinfo(text)
    before, mark, options = rest.partition("?")
    if userinfo is not None:
        user, colon, _password = userinfo.partition(":")
        before = f"{user}:{HIDDEN}@{before}" if colon else f"{userinfo}@{before}"
    return (
        f"{scheme}://{before}?{_query_text(_option_pairs(options))}"
        if mark
        else f"{scheme}://{before}"
    )


def url_secrets(url: str) -> set[str]:
    """The secrets ``url`` carries: its password, its secret options' values.

    Each as written, decoded and percent-encoded.
    """
    text = str(url)
    found: set[str] = set()
    parsed = _parsed(text) if "://" in text else None
    if parsed is not None:
        if parsed.password:
            found.add(str(parsed.password))
        found.update(v for k, v in _pairs(dict(parsed.query)) if _secret_option(k) and v)
    elif "://" in text:
        userinfo = _userinfo(text)[1] or ""
        if ":" in userinfo:
            found.add(userinfo.partition(":")[2])
    found.update(v for k, v in _option_pairs(text.partition("?")[2]) if _secret_option(k) and v)
    decoded = {unquote_plus(secret) for secret in found}
    encoded = {form for s in found | decoded for form in (quote(s, safe=""), quote_plus(s))}
    return {secret for secret in found | decoded | encoded if secret}


def remember_secrets(url: str) -> None:
    """Remember the secrets of ``url`` so that :func:`scrub` hides them in any text."""
    secrets = url_secrets(url)
    if secrets:
        with _SEEN_LOCK:
            _SEEN.update(secrets)


def scrub(text: str) -> str:
    """``text`` with each secret of the URLs seen so far (:func:`remember_secrets`) as ``***``.

    For text that did not come from a URL: a driver's error may quote its connection string.
    Secrets shorter than :data:`SCRUB_MIN_CHARS` are left (they would garble the text).
    """
    with _SEEN_LOCK:
        secrets = sorted((s for s in _SEEN if len(s) >= SCRUB_MIN_CHARS), key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    return text


ENV_PREFIX = "env:"
"""``--db env:NAME``: the URL is the value of the environment variable ``NAME``."""
FILE_PREFIX = "@"
"""``--db @PATH``: the URL is the first line of the file ``PATH`` (as ``@file.sql`` for SQL)."""


def resolve_url(text: str, flag: str = "--db") -> str:
    """The URL ``text`` names: itself, or read from ``env:NAME`` or ``@PATH``.

    So the password need not be on the command line, where ``ps`` shows it to every user of
    the machine.

    Args:
        text: a URL, ``env:NAME`` or ``@PATH``.
        flag: the option it was given as, for the error ("": none, argparse names it).

    Raises:
        InvalidArgumentError: the variable is not set or empty, or the file cannot be read
            or is empty.
    """
    what = f"{flag} {text}" if flag else text
    if text.startswith(ENV_PREFIX):
        name = text[len(ENV_PREFIX) :].strip()
        value = os.environ.get(name, "").strip() if name else ""
        if not value:
            raise InvalidArgumentError(
                f"{what}: the environment variable {name or '(none named)'} is not set "
                "or is empty; export it with the URL first"
            )
        return value
    if text.startswith(FILE_PREFIX):
        path = Path(text[len(FILE_PREFIX) :])
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            why = getattr(err, "strerror", None) or "not UTF-8 text"
            raise InvalidArgumentError(f"{what}: cannot read the URL from {path}: {why}") from None
        value = next((line.strip() for line in lines if line.strip()), "")
        if not value:
            raise InvalidArgumentError(f"{what}: the file {path} holds no URL")
        return value
    return text


def check_url_secrets(url: str) -> None:
    """Remember ``url``'s secrets (:func:`scrub`) and refuse a password SQLAlchemy would cut.

    An ``@`` in a password must be percent-encoded: SQLAlchemy ends the password at the
    first ``@``, so the rest of it would be taken for the host (and shown in its errors).

    Raises:
        InvalidArgumentError: the URL has a user or password, and its host, database or an
            option's name holds an ``@``; its port is not a number.
    """
    remember_secrets(url)
    if "://" not in url:
        return
    try:
        parsed = make_url(url)
    except (sqlalchemy.exc.ArgumentError, TypeError):
        return  # the engine's own check words it (through redact_url)
    except ValueError:  # SQLAlchemy's int(port)
        raise InvalidArgumentError(
            f"the URL {redact_url(url)} has a port that is not a number; {_ENCODE}"
        ) from None
    if _misread(parsed):
        raise InvalidArgumentError(
            f"the URL {redact_url(url)} has an @ in its password or user name; {_ENCODE}"
        )


_ENCODE = (
    "percent-encode a password's @ as %40 (/ as %2F, : %3A, ? %3F, # %23, % %25), or keep the "
    "password out of the URL (PGPASSWORD, ~/.pgpass, a MySQL option file)"
)
