"""`@once`: a function of no arguments computed the first time it is called, in one thread.

functools.cache does not hold back a second thread that calls while the first is still
computing: in a sweep the first wave of --forks hosts all reach the parsers' tables (the
signature catalog: a YAML load and some 75 regular expressions) at once, and each built its
own copy (eleven copies, a fifth of a 20-host sweep's CPU). Here the later callers wait for
the first one's result. No library in the dependencies offers this for plain functions."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Once(Generic[T]):
    def __init__(self, func: Callable[[], T]) -> None:
        self._func = func
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        functools.update_wrapper(self, func)

    def __call__(self) -> T:
        if not self._done:
            with self._lock:
                if not self._done:
                    self._value = self._func()
                    self._done = True
        return self._value  # type: ignore[return-value]

    def cache_clear(self) -> None:
        """Forget the value (tests that change what the function reads)."""
        with self._lock:
            self._done, self._value = False, None


def once(func: Callable[[], T]) -> _Once[T]:
    return _Once(func)
