"""The SPDY/3.1 side of the API double's exec streams (no API server can run here; see
apiserver.py): what kubectl 1.32 speaks when told `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`, or
falls back to when a WebSocket upgrade fails (an older server's answer), served as the API
server proxies it from a kubelet (k8s.io/apimachinery/pkg/util/httpstream/spdy and
kubelet's remotecommand, protocol ``v4.channel.k8s.io``).

After ``101 Switching Protocols`` the client opens one SPDY stream per channel (SYN_STREAM with a
``streamtype`` header: error, stdin, stdout, stderr, resize), each of which the server accepts
with a SYN_REPLY (the client waits for it); header blocks are zlib streams, one per direction,
primed with the SPDY/3 dictionary and flushed per frame (Z_SYNC_FLUSH). The command starts once
its streams are open; stdin arrives as DATA frames (FIN: the input ended), stdout and stderr go
back as DATA frames, and at the end the error stream carries one ``Status`` JSON (Success, or
NonZeroExitCode with the exit code), then every stream is finished (an empty DATA frame with
FIN) and the connection goes away (GOAWAY).
"""

from __future__ import annotations

import base64
import json
import select
import struct
import threading
import zlib
from collections.abc import Sequence
from typing import Any

from tests.k8s.streams import Node, exit_status

#: the channel protocol answered (a v4 server's: the client offers v5, v4, v3, v2)
PROTOCOL = "v4.channel.k8s.io"

#: the SPDY/3 header compression dictionary (draft-mbelshe-httpbis-spdy-00 §2.6.10.1), 1423
#: bytes, sha256 51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02
DICTIONARY = base64.b64decode(
    "AAAAB29wdGlvbnMAAAAEaGVhZAAAAARwb3N0AAAAA3B1dAAAAAZkZWxldGUAAAAFdHJhY2UAAAAGYWNjZXB0AAAA"
    "DmFjY2VwdC1jaGFyc2V0AAAAD2FjY2VwdC1lbmNvZGluZwAAAA9hY2NlcHQtbGFuZ3VhZ2UAAAANYWNjZXB0LXJh"
    "bmdlcwAAAANhZ2UAAAAFYWxsb3cAAAANYXV0aG9yaXphdGlvbgAAAA1jYWNoZS1jb250cm9sAAAACmNvbm5lY3Rp"
    "b24AAAAMY29udGVudC1iYXNlAAAAEGNvbnRlbnQtZW5jb2RpbmcAAAAQY29udGVudC1sYW5ndWFnZQAAAA5jb250"
    "ZW50LWxlbmd0aAAAABBjb250ZW50LWxvY2F0aW9uAAAAC2NvbnRlbnQtbWQ1AAAADWNvbnRlbnQtcmFuZ2UAAAAM"
    "Y29udGVudC10eXBlAAAABGRhdGUAAAAEZXRhZwAAAAZleHBlY3QAAAAHZXhwaXJlcwAAAARmcm9tAAAABGhvc3QA"
    "AAAIaWYtbWF0Y2gAAAARaWYtbW9kaWZpZWQtc2luY2UAAAANaWYtbm9uZS1tYXRjaAAAAAhpZi1yYW5nZQAAABNp"
    "Zi11bm1vZGlmaWVkLXNpbmNlAAAADWxhc3QtbW9kaWZpZWQAAAAIbG9jYXRpb24AAAAMbWF4LWZvcndhcmRzAAAA"
    "BnByYWdtYQAAABJwcm94eS1hdXRoZW50aWNhdGUAAAATcHJveHktYXV0aG9yaXphdGlvbgAAAAVyYW5nZQAAAAdy"
    "ZWZlcmVyAAAAC3JldHJ5LWFmdGVyAAAABnNlcnZlcgAAAAJ0ZQAAAAd0cmFpbGVyAAAAEXRyYW5zZmVyLWVuY29k"
    "aW5nAAAAB3VwZ3JhZGUAAAAKdXNlci1hZ2VudAAAAAR2YXJ5AAAAA3ZpYQAAAAd3YXJuaW5nAAAAEHd3dy1hdXRo"
    "ZW50aWNhdGUAAAAGbWV0aG9kAAAAA2dldAAAAAZzdGF0dXMAAAAGMjAwIE9LAAAAB3ZlcnNpb24AAAAISFRUUC8x"
    "LjEAAAADdXJsAAAABnB1YmxpYwAAAApzZXQtY29va2llAAAACmtlZXAtYWxpdmUAAAAGb3JpZ2luMTAwMTAxMjAx"
    "MjAyMjA1MjA2MzAwMzAyMzAzMzA0MzA1MzA2MzA3NDAyNDA1NDA2NDA3NDA4NDA5NDEwNDExNDEyNDEzNDE0NDE1"
    "NDE2NDE3NTAyNTA0NTA1MjAzIE5vbi1BdXRob3JpdGF0aXZlIEluZm9ybWF0aW9uMjA0IE5vIENvbnRlbnQzMDEg"
    "TW92ZWQgUGVybWFuZW50bHk0MDAgQmFkIFJlcXVlc3Q0MDEgVW5hdXRob3JpemVkNDAzIEZvcmJpZGRlbjQwNCBO"
    "b3QgRm91bmQ1MDAgSW50ZXJuYWwgU2VydmVyIEVycm9yNTAxIE5vdCBJbXBsZW1lbnRlZDUwMyBTZXJ2aWNlIFVu"
    "YXZhaWxhYmxlSmFuIEZlYiBNYXIgQXByIE1heSBKdW4gSnVsIEF1ZyBTZXB0IE9jdCBOb3YgRGVjIDAwOjAwOjAw"
    "IE1vbiwgVHVlLCBXZWQsIFRodSwgRnJpLCBTYXQsIFN1biwgR01UY2h1bmtlZCx0ZXh0L2h0bWwsaW1hZ2UvcG5n"
    "LGltYWdlL2pwZyxpbWFnZS9naWYsYXBwbGljYXRpb24veG1sLGFwcGxpY2F0aW9uL3hodG1sK3htbCx0ZXh0L3Bs"
    "YWluLHRleHQvamF2YXNjcmlwdCxwdWJsaWNwcml2YXRlbWF4LWFnZT1nemlwLGRlZmxhdGUsc2RjaGNoYXJzZXQ9"
    "dXRmLThjaGFyc2V0PWlzby04ODU5LTEsdXRmLSwqLGVucT0wLg=="
)

_SYN_STREAM, _SYN_REPLY, _RST_STREAM, _SETTINGS, _PING, _GOAWAY, _HEADERS, _WINDOW = (
    1,
    2,
    3,
    4,
    6,
    7,
    8,
    9,
)
_FLAG_FIN = 0x01


def _headers(block: bytes) -> dict[str, str]:
    (count,) = struct.unpack_from("!I", block)
    at, out = 4, {}
    for _ in range(count):
        (size,) = struct.unpack_from("!I", block, at)
        name = block[at + 4 : at + 4 + size].decode()
        at += 4 + size
        (size,) = struct.unpack_from("!I", block, at)
        out[name] = block[at + 4 : at + 4 + size].decode()
        at += 4 + size
    return out


class SpdyConnection:
    """The server side of one SPDY/3.1 connection carrying an exec's streams."""

    def __init__(self, rfile: Any, sock: Any) -> None:
        self._rfile = rfile
        self._sock = sock
        self._write = threading.Lock()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(zdict=DICTIONARY)
        #: stream type → stream id, as the client opened them
        self.streams: dict[str, int] = {}
        self.opened = threading.Condition()
        self.closed = False

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self._rfile.read(size - len(data))
            if not chunk:
                raise EOFError("connection closed")
            data += chunk
        return data

    def _send(self, data: bytes) -> None:
        with self._write:
            self._sock.sendall(data)

    def _control(self, kind: int, flags: int, body: bytes) -> None:
        self._send(struct.pack("!HHI", 0x8000 | 3, kind, (flags << 24) | len(body)) + body)

    def data(self, stream: int, payload: bytes, *, fin: bool = False) -> None:
        flags = _FLAG_FIN if fin else 0
        self._send(struct.pack("!II", stream & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload)

    def _reply(self, stream: int) -> None:
        block = self._deflate.compress(struct.pack("!I", 0)) + self._deflate.flush(
            zlib.Z_SYNC_FLUSH
        )
        self._control(_SYN_REPLY, 0, struct.pack("!I", stream) + block)

    def go_away(self) -> None:
        self._control(_GOAWAY, 0, struct.pack("!II", 0, 0))

    def frames(self, on_data: Any) -> None:
        """Read frames until the client goes away: streams opened and replied to, PINGs
        answered, DATA handed to `on_data(stream id, bytes, fin)`."""
        try:
            while True:
                head = self._read(8)
                first, second = struct.unpack("!II", head)
                flags, size = second >> 24, second & 0xFFFFFF
                body = self._read(size)
                if not first & 0x80000000:
                    on_data(first & 0x7FFFFFFF, body, bool(flags & _FLAG_FIN))
                    continue
                kind = first & 0xFFFF
                if kind == _SYN_STREAM:
                    stream = struct.unpack_from("!I", body)[0] & 0x7FFFFFFF
                    headers = _headers(self._inflate.decompress(body[10:]))
                    self._reply(stream)
                    with self.opened:
                        self.streams[headers.get("streamtype", "")] = stream
                        self.opened.notify_all()
                elif kind == _PING:
                    self._control(_PING, 0, body)
                elif kind == _HEADERS:
                    self._inflate.decompress(body[4:])  # keep the zlib stream in step
                elif kind == _GOAWAY:
                    break
        except (EOFError, OSError, ValueError):  # ValueError: the handler closed its file
            pass
        finally:
            with self.opened:
                self.closed = True
                self.opened.notify_all()


def serve_exec(conn: SpdyConnection, argv: Sequence[str], node: Node, *, stdin: bool) -> None:
    """Run `argv` on `node` once the client has opened its streams, over SPDY."""
    want = {"error", "stdout", "stderr"} | ({"stdin"} if stdin else set())
    channel = None
    #: stdin that came before the command started, and whether it ended
    early: list[bytes] = []
    ended = False
    lock = threading.Lock()

    def on_data(stream: int, payload: bytes, fin: bool) -> None:
        nonlocal ended
        if stream != conn.streams.get("stdin"):
            return
        with lock:
            if channel is None:
                early.append(payload)
                ended = ended or fin
                return
        if payload:
            channel.sendall(payload)
        if fin:
            channel.shutdown_write()

    reader = threading.Thread(target=conn.frames, args=(on_data,), name="spdy-frames", daemon=True)
    reader.start()
    with conn.opened:
        if not conn.opened.wait_for(lambda: want <= set(conn.streams) or conn.closed, 30):
            return
        if conn.closed:
            return
    ids = dict(conn.streams)
    opened = node.open(argv)
    with lock:
        for payload in early:
            opened.sendall(payload)
        if ended or not stdin:
            opened.shutdown_write()
        channel = opened
    code: int | None = None
    channel = opened
    try:
        while not conn.closed:
            select.select([channel], [], [], 0.1)
            while channel.recv_ready():
                conn.data(ids["stdout"], channel.recv(65536))
            while channel.recv_stderr_ready():
                conn.data(ids["stderr"], channel.recv_stderr(65536))
            if channel.exit_status_ready() and (channel.eof_received or channel.closed):
                while channel.recv_ready():
                    conn.data(ids["stdout"], channel.recv(65536))
                while channel.recv_stderr_ready():
                    conn.data(ids["stderr"], channel.recv_stderr(65536))
                code = channel.recv_exit_status()
                break
            if channel.closed:
                break
        if not conn.closed:
            conn.data(ids["error"], json.dumps(exit_status(code, argv)).encode())
            for name in ("stdout", "stderr", "error"):
                conn.data(ids[name], b"", fin=True)
            conn.go_away()
    except OSError:
        pass
    finally:
        opened.close()
