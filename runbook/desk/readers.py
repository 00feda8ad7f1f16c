"""The read-only stores the desk's pages read through: one per worker thread of the server,
opened by the first page that thread serves and kept for the next.

Opening a store is a connection (PostgreSQL: a login and two round trips, ~13-30 ms; SQLite:
a file opened and its schema read); a page is a few short queries. A connection belongs to the
thread that opened it (sqlite3 checks it), so the desk keeps one per thread rather than a pool
shared between threads: as many as the server's worker threads (Starlette's thread pool, 40 at
most). A store whose thread ended is closed when the next one is opened, and every one when
the desk stops (`close`). A store that failed in a way other than a missing
proposal (the server restarted, the connection dropped) is closed and not kept: the next page
opens a fresh one. A read-only store writes nothing and holds no transaction between pages
(PostgreSQL: autocommit; SQLite: no transaction is open between statements), so it locks
nothing another process waits for.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from runbook.remedies.approval import Desk

if TYPE_CHECKING:
    from runbook.config import Config


class Readers:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._local = threading.local()
        self._lock = threading.Lock()
        #: each thread's desk, held here too: closed, not left to the garbage collector
        self._kept: dict[threading.Thread, Desk] = {}
        #: stores opened so far (a test or a benchmark reads it)
        self.opened = 0

    def close(self) -> None:
        """Close every store kept (the desk stopping)."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for desk in kept:
            _close(desk)

    def _open(self) -> Desk:
        desk = Desk(self.config, readonly=True)
        with self._lock:
            gone = [t for t in self._kept if not t.is_alive()]
            ended = [self._kept.pop(t) for t in gone]
            self._kept[threading.current_thread()] = desk
            self.opened += 1
        for old in ended:
            _close(old)
        return desk

    def _drop(self, desk: Desk) -> None:
        self._local.desk = None
        with self._lock:
            if self._kept.get(threading.current_thread()) is desk:
                del self._kept[threading.current_thread()]
        _close(desk)

    @contextlib.contextmanager
    def reader(self) -> Iterator[Desk]:
        """This thread's read-only desk (its store and audit trail), opened if it has none."""
        from runbook.remedies.store import NotFound

        desk: Desk | None = getattr(self._local, "desk", None)
        if desk is None:
            desk = self._open()
            self._local.desk = desk
        try:
            yield desk
        except NotFound:
            raise
        except BaseException:
            self._drop(desk)
            raise


def _close(desk: Desk) -> None:
    """Closed quietly: a SQLite connection closed from another thread than its own refuses
    (sqlite3 checks), and is then closed when it is collected."""
    with contextlib.suppress(Exception):
        desk.close(publish=False)
