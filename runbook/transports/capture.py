"""Bounded capture of a command's output, shared by the local and SSH transports."""

from __future__ import annotations

from runbook.transports import base


class BoundedBuffer:
    """Keeps the first `limit` bytes of a stream and remembers whether more came.

    One growing buffer, not a list of chunks joined at the end: a capture at its bound is
    held once (not twice while joined), in one large allocation the allocator gives back
    whole instead of hundreds of 64 KiB pieces left scattered over the heaps of the
    threads that read them."""

    __slots__ = ("_data", "limit", "truncated")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = base.MAX_CAPTURE_BYTES if limit is None else limit
        self._data = bytearray()
        self.truncated = False

    def feed(self, data: bytes) -> None:
        room = self.limit - len(self._data)
        if room <= 0:
            if data:
                self.truncated = True
            return
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        self._data += data

    def getvalue(self) -> bytearray:
        """What was kept (the buffer itself: decode it, do not keep it)."""
        return self._data
