"""Bounded capture of a command's output, shared by the local and SSH transports."""

from __future__ import annotations

from runbook.transports import base


class BoundedBuffer:
    """Keeps the first `limit` bytes of a stream and remembers whether more came."""

    __slots__ = ("_chunks", "_size", "limit", "truncated")

    def __init__(self, limit: int | None = None) -> None:
        self.limit = base.MAX_CAPTURE_BYTES if limit is None else limit
        self._chunks: list[bytes] = []
        self._size = 0
        self.truncated = False

    def feed(self, data: bytes) -> None:
        room = self.limit - self._size
        if room <= 0:
            if data:
                self.truncated = True
            return
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        self._chunks.append(data)
        self._size += len(data)

    def getvalue(self) -> bytes:
        return b"".join(self._chunks)
