"""Where the approval store lives: a SQLite file (the default) or a PostgreSQL server.

`--db`, `RUNBOOK_DB` and the config's `approvals.db` take either a path or a URL
`postgresql://USER@HOST:PORT/DBNAME` (also `postgres://`); `location(text)` tells them apart, in
this one place, for every command. A URL may carry a password (`postgresql://u:PW@host/db`),
but a `PostgresURL` never shows it: its `str()` and `repr()` print `<REDACTED>` in its place,
so a log line, an error or a run record that formats one cannot leak it. Better still, keep
the password out of the URL: libpq reads `PGPASSWORD` or the file `PGPASSFILE` (default
`~/.pgpass`).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from runbook.errors import UsageError
from runbook.redact import REDACTED

SCHEMES = ("postgresql", "postgres")
_URL = re.compile(r"^(postgres(?:ql)?)://", re.IGNORECASE)


@dataclass(frozen=True)
class PostgresURL:
    """A PostgreSQL connection URL; the password (if any) never printed."""

    url: str = field(repr=False)

    @property
    def password(self) -> str | None:
        parsed = urllib.parse.urlsplit(self.url)
        return urllib.parse.unquote(parsed.password) if parsed.password else None

    def redacted(self) -> str:
        """The URL with the password (and any `password=` parameter) as `<REDACTED>`."""
        return redact_url(self.url)

    def without_password(self) -> str:
        """The URL to print in a command for someone to run: no password at all (libpq reads
        PGPASSWORD or PGPASSFILE), where a mark would be taken for one."""
        return redact_url(self.url, drop=True)

    def scrub(self, text: str) -> str:
        """`text` (an error message) with this URL's password, raw or decoded, withheld."""
        text = text.replace(self.url, self.redacted())
        parsed = urllib.parse.urlsplit(self.url)
        for secret in {parsed.password, self.password, *_query_passwords(self.url)}:
            if secret:
                text = text.replace(secret, REDACTED)
        return text

    def __str__(self) -> str:
        return self.redacted()

    def __repr__(self) -> str:
        return f"PostgresURL({self.redacted()!r})"


#: a store's location: a SQLite file, or a PostgreSQL server
Location = Path | PostgresURL


def _query_passwords(url: str) -> list[str]:
    query = urllib.parse.urlsplit(url).query
    return [v for k, v in urllib.parse.parse_qsl(query) if k.lower() == "password"]


def redact_url(url: str, *, drop: bool = False) -> str:
    """A database URL with its password replaced by `<REDACTED>` (userinfo and
    `?password=`), or left out (`drop`)."""
    try:
        parsed = urllib.parse.urlsplit(url)
        netloc = parsed.netloc
        if parsed.password is not None:
            user, _, host = netloc.rpartition("@")
            name = user.split(":", 1)[0]
            netloc = f"{name}@{host}" if drop else f"{name}:{REDACTED}@{host}"
        pairs = urllib.parse.parse_qsl(parsed.query, keep_blank_values=True)
        query = "&".join(
            f"{k}={REDACTED}"
            if k.lower() == "password"
            else f"{k}={urllib.parse.quote(v, safe='/')}"
            for k, v in pairs
            if not (drop and k.lower() == "password")
        )
        # built by hand: urlunsplit drops the `//` of an empty host for a scheme it does not know
        return f"{parsed.scheme}://{netloc}{parsed.path}" + (f"?{query}" if query else "")
    except ValueError:
        # a URL that does not parse (a bad port): its text after the scheme is withheld whole
        match = _URL.match(url)
        return f"{match.group(1) if match else 'postgresql'}://{REDACTED}"


def is_url(text: str) -> bool:
    return bool(_URL.match(text.strip()))


def location(text: str | os.PathLike[str]) -> Location:
    """A `--db` value as the store it names: a PostgreSQL URL, or a path (`~` expanded)."""
    raw = os.fspath(text)
    if is_url(raw):
        url = PostgresURL(raw.strip())
        parsed = urllib.parse.urlsplit(url.url)
        try:
            parsed.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise UsageError(f"--db {url}: the port is not a number") from None
        return url  # no host: libpq's own default (the local socket), as psql does
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", raw):
        scheme = raw.split(":", 1)[0]
        raise UsageError(
            f"--db {scheme}://…: not a store this tool opens (a file path for SQLite, or "
            "postgresql://USER@HOST:PORT/DBNAME)"
        )
    return Path(os.path.expanduser(raw))


def for_record(value: str | None) -> str | None:
    """A `--db` value as a run record keeps it (run.json: `runbook resume` opens it again):
    a path made absolute; a URL without its password (libpq reads PGPASSWORD or PGPASSFILE)."""
    if not value:
        return None
    place = location(value)
    if isinstance(place, PostgresURL):
        return place.without_password()
    return str(place.resolve())
