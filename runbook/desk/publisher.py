"""The queue published from the desk's own process, in a thread of its own: the metrics file
and the notices (runbook.oncall.publish → runbook.notify.send_due), never in a request.

A pass runs when the desk starts, every `interval` seconds after (desk.publish_interval, 30 s
by default), and at once when kicked: after each decision taken on the desk (approved and
run, denied, refused, a recovery check) and whenever a worker of the desk lets go of the
queue. So a page opened for a proposal is resolved soon after it is decided on the desk, and a
proposal that expires undecided has its page resolved by the running desk, with no command
run anywhere. A receiver that hangs costs this thread its delivery deadline (runbook.notify:
5 s per place), never a person's request.

Each pass opens the store for its own connection (a connection belongs to its thread) and
closes it; the notices are claimed in the store first, so the desk, a sweep's shards and the
command line publishing at the same moment send each notice once. A failed pass is a warning
in the desk's log; the next pass tries again. On stopping, one last pass runs if a kick came
since the last one (a decision taken just before the stop is resolved), bounded by the
delivery deadline.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runbook.config import Config

log = logging.getLogger(__name__)

#: the default seconds between two passes
INTERVAL = 30.0


class Publisher:
    def __init__(
        self,
        config: Config,
        *,
        interval: float = INTERVAL,
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        self.config = config
        self.interval = interval
        self.warn = warn
        #: passes run so far (tests and the log read it)
        self.passes = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._owed = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def wanted(self) -> bool:
        """Whether there is anywhere to publish to (a textfile directory, a notice's place)."""
        return self.config.textfile_dir is not None or self.config.notify.enabled

    def start(self) -> None:
        """Start the thread (once; not when there is nowhere to publish). Its first pass runs
        at once: what the queue owes since the desk last ran goes out."""
        with self._lock:
            if self._thread is not None or not self.wanted or self._stop.is_set():
                return
            self._owed = True
            self._thread = threading.Thread(target=self._loop, name="desk-publisher", daemon=True)
            self._thread.start()

    def kick(self) -> None:
        """A pass as soon as the thread is free (the queue changed). Never blocks."""
        if not self.wanted:
            return
        self.start()
        with self._lock:
            self._owed = True
        self._wake.set()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the thread: one last pass if a kick is owed, waited for up to `timeout` s."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._lock:
                owed, self._owed = self._owed, False
            if owed or not self._stop.is_set():
                self._pass()
            if self._stop.is_set():
                with self._lock:
                    if not self._owed:
                        return
                continue
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                with self._lock:
                    if not self._owed:
                        return

    def _pass(self) -> None:
        from runbook.oncall import publish
        from runbook.remedies.store import Store

        try:
            with Store(self.config.db) as store:
                publish(self.config, store, warn=self.warn)
        except Exception as exc:  # a thread of its own: whatever happens is one warning
            why = getattr(exc, "one_line", None)
            self.warn(
                "approval queue not published: "
                + (str(why()) if callable(why) else f"{type(exc).__name__}: {exc}")
            )
        finally:
            self.passes += 1
