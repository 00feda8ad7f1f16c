"""A bounded pool of hosts in flight, each with a deadline that holds whatever the host does.

At most `forks` hosts run at once, each in its own thread. A host's work gets a `Slot`: its
deadline, a phase for messages, and `on_cancel` to register what stops it (closing its
transport). The coordinating thread — the caller's — hands results to `on_result` as they come
and watches the deadlines: a host still running `grace_s` after its deadline is cancelled (its
transport closed under it), recorded through `overdue(item, slot)`, and its slot goes to the next
host at once. The abandoned thread ends by itself (a closed connection fails every read; a
connect that never got a banner ends at its own timeout, which is never longer than the
deadline); whatever it returns then is dropped. So a host that accepts TCP and never speaks,
or runs a command that never returns, costs its deadline and nothing more.

Results come back in the items' order. `on_result` runs in the coordinating thread only (so it
may use a SQLite connection, a console, a progress bar).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Slot:
    """What a host's work knows of its slot: the deadline, a phase, cancellation."""

    def __init__(self, index: int, deadline: float, clock: Callable[[], float]) -> None:
        self.index = index
        self.deadline = deadline
        self.started = clock()
        self.phase = "starting"
        self._clock = clock
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._on_cancel: list[Callable[[], None]] = []

    def remaining(self) -> float:
        return self.deadline - self._clock()

    def elapsed(self) -> float:
        return self._clock() - self.started

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def on_cancel(self, action: Callable[[], None]) -> None:
        """Run `action` when the slot is cancelled (at once if it already is)."""
        with self._lock:
            if not self._cancelled.is_set():
                self._on_cancel.append(action)
                return
        _quietly(action)

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled.is_set():
                return
            self._cancelled.set()
            actions, self._on_cancel = self._on_cancel, []
        for action in actions:
            _quietly(action)


def _quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:  # closing a dying connection may fail; the slot is over either way
        log.debug("cancel action failed", exc_info=True)


class _Running(Generic[T]):
    __slots__ = ("item", "slot", "thread")

    def __init__(self, item: T, slot: Slot, thread: threading.Thread) -> None:
        self.item, self.slot, self.thread = item, slot, thread


def run_pool(
    items: Sequence[T],
    work: Callable[[T, Slot], R],
    *,
    overdue: Callable[[T, Slot], R],
    crashed: Callable[[T, Slot, BaseException], R],
    forks: int,
    deadline_s: float,
    on_result: Callable[[R], None] | None = None,
    grace_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[R]:
    """Run `work(item, slot)` for every item, at most `forks` at once (see the module doc)."""
    if forks < 1:
        raise ValueError("forks must be >= 1")
    done: queue.SimpleQueue[tuple[int, R | None, BaseException | None]] = queue.SimpleQueue()
    results: list[R | None] = [None] * len(items)
    running: dict[int, _Running[T]] = {}
    next_index = 0

    def worker(index: int, item: T, slot: Slot) -> None:
        try:
            done.put((index, work(item, slot), None))
        except BaseException as exc:  # reported, never lost with the thread
            done.put((index, None, exc))

    def finish(index: int, result: R) -> None:
        results[index] = result
        if on_result is not None:
            on_result(result)

    while next_index < len(items) or running:
        while next_index < len(items) and len(running) < forks:
            item = items[next_index]
            slot = Slot(next_index, clock() + deadline_s, clock)
            thread = threading.Thread(
                target=worker,
                args=(next_index, item, slot),
                name=f"sweep-{next_index}",
                daemon=True,
            )
            running[next_index] = _Running(item, slot, thread)
            thread.start()
            next_index += 1
        wake = min(held.slot.deadline for held in running.values()) + grace_s
        try:
            index, result, error = done.get(timeout=max(0.0, wake - clock()))
        except queue.Empty:
            pass
        else:
            held = running.pop(index, None)
            if held is not None:  # else: a host already recorded as overdue; drop it
                if error is not None:
                    finish(index, crashed(held.item, held.slot, error))
                else:
                    assert result is not None
                    finish(index, result)
        now = clock()
        for index, held in list(running.items()):
            if now >= held.slot.deadline + grace_s:
                del running[index]
                held.slot.cancel()
                finish(index, overdue(held.item, held.slot))
    out: list[R] = []
    for result in results:
        assert result is not None
        out.append(result)
    return out
