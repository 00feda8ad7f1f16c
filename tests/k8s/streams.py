"""The API double's streaming subresources: ``pods/NAME/exec`` and ``pods/NAME/attach`` over
WebSocket, as the API server serves them to kubectl 1.32 (no API server can run here; this is a
recorded double, see apiserver.py).

Wire format (k8s.io/apimachinery/pkg/util/httpstream/wsstream, remotecommand): a ``GET`` with
``Upgrade: websocket`` and ``Sec-WebSocket-Protocol`` listing the channel protocols the client
speaks; the server answers ``101 Switching Protocols`` with the one it chose
(``v5.channel.k8s.io``, else ``v4.channel.k8s.io``). Every message is binary and starts with
one byte naming its stream: 0 stdin (client to server), 1 stdout, 2 stderr, 3 the error
stream (one ``Status`` JSON when the command ends: ``Success``, or ``Failure`` with reason
``NonZeroExitCode`` and the exit code as the ``ExitCode`` cause), 4 terminal resize (ignored:
no TTY here); with v5, stream 255 carries a close signal, one byte naming the stream the client
closed (its stdin at EOF). The server then closes the WebSocket.

What runs: the command the query names (``command=`` repeated, ``container=``), on the SSH test
host that stands for the pod's node (tests/hosts: a real sshd in its own network namespace), as
the container's process would run on the node; over one SSH connection per node, as a kubelet
needs no login per exec. Closing the stream does not signal the command (a kubelet does not
either, without a TTY): whatever the client wants stopped it must stop itself.

The SPDY/3.1 upgrade (``POST`` with ``Upgrade: SPDY/3.1``) that kubectl uses when told
``KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false``, or falls back to when a WebSocket upgrade fails, is
tests/k8s/spdy.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import select
import shlex
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import paramiko

    from tests.hosts.harness import HostNetwork, TestHost

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: the channel protocols served, the newest first
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255

_OP_CONT, _OP_TEXT, _OP_BINARY, _OP_CLOSE, _OP_PING, _OP_PONG = 0, 1, 2, 8, 9, 10


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key`` (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode("ascii")).digest()).decode()


def choose_protocol(offered: str, served: Sequence[str] = PROTOCOLS) -> str | None:
    """The channel protocol to answer with, from the client's ``Sec-WebSocket-Protocol``."""
    names = [p.strip() for p in offered.split(",") if p.strip()]
    return next((p for p in served if p in names), None)


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked, unfragmented frame (a server's)."""
    head = bytes([0x80 | opcode])
    size = len(payload)
    if size < 126:
        head += bytes([size])
    elif size < 1 << 16:
        head += bytes([126]) + struct.pack("!H", size)
    else:
        head += bytes([127]) + struct.pack("!Q", size)
    return head + payload


class WebSocket:
    """One server side of a WebSocket over a handler's (TLS) connection: binary messages in,
    frames out (writes from several threads are serialised)."""

    def __init__(self, rfile: Any, sock: Any) -> None:
        self._rfile = rfile
        self._sock = sock
        self._write_lock = threading.Lock()
        self.closed = False

    def _read_exact(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self._rfile.read(size - len(data))
            if not chunk:
                raise EOFError("connection closed")
            data += chunk
        return data

    def receive(self) -> bytes | None:
        """The next data message (text or binary), None when the client closed."""
        message = b""
        while True:
            first, second = self._read_exact(2)
            opcode, fin = first & 0x0F, bool(first & 0x80)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack("!H", self._read_exact(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", self._read_exact(8))[0]
            mask = self._read_exact(4) if second & 0x80 else b""
            payload = self._read_exact(size)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == _OP_CLOSE:
                self.close()
                return None
            if opcode == _OP_PING:
                self.send_frame(_OP_PONG, payload)
                continue
            if opcode == _OP_PONG:
                continue
            message += payload
            if fin:
                return message

    def send_frame(self, opcode: int, payload: bytes) -> None:
        with self._write_lock:
            if self.closed and opcode != _OP_CLOSE:
                return
            self._sock.sendall(frame(opcode, payload))

    def send(self, stream: int, data: bytes) -> None:
        self.send_frame(_OP_BINARY, bytes([stream]) + data)

    def close(self, code: int = 1000) -> None:
        with self._write_lock:
            if self.closed:
                return
            self.closed = True
            try:
                self._sock.sendall(frame(_OP_CLOSE, struct.pack("!H", code)))
            except OSError:
                pass


def exit_status(code: int | None, argv: Sequence[str]) -> dict[str, Any]:
    """The error stream's Status for a command that ended with `code` (None: no status)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    if code is None:
        return {
            "metadata": {},
            "status": "Failure",
            "message": "error executing command: the command's stream ended without a status",
            "reason": "InternalError",
            "code": 500,
        }
    return {
        "metadata": {},
        "status": "Failure",
        "message": (
            f"command terminated with non-zero exit code: error executing command "
            f"[{' '.join(argv)}], exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


@dataclass
class Node:
    """The test host that stands for one Kubernetes node: one SSH connection, kept."""

    name: str
    host: TestHost
    network: HostNetwork
    _client: paramiko.SSHClient | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def open(self, argv: Sequence[str]) -> paramiko.Channel:
        """A channel running `argv` (as the container runtime would exec it) on the host."""
        with self._lock:
            transport = self._client.get_transport() if self._client else None
            if transport is None or not transport.is_active():
                if self._client is not None:
                    self._client.close()
                self._client = self.network.paramiko_client(self.host)
                transport = self._client.get_transport()
            assert transport is not None
            channel = transport.open_session(timeout=10)
        channel.exec_command(shlex.join(argv))
        return channel

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def serve_exec(
    ws: WebSocket,
    protocol: str,
    argv: Sequence[str],
    node: Node,
    *,
    stdin: bool,
    on_done: Callable[[int | None], None] = lambda code: None,
) -> None:
    """Run `argv` on `node`, its streams over `ws` in `protocol`, until it ends or the client
    goes away (then the channel is closed; the command is not signalled)."""
    try:
        channel = node.open(argv)
    except Exception as exc:  # the node is gone: the error stream says so, as a kubelet's
        ws.send(ERROR, json.dumps({
            "metadata": {}, "status": "Failure", "reason": "InternalError", "code": 500,
            "message": f"error dialing backend: {exc}",
        }).encode())  # fmt: skip
        ws.close()
        return
    if not stdin:
        channel.shutdown_write()
    gone = threading.Event()

    def pump_in() -> None:
        try:
            while True:
                message = ws.receive()
                if message is None:
                    break
                if not message:
                    continue
                stream, data = message[0], message[1:]
                if stream == STDIN and stdin and data:
                    channel.sendall(data)
                elif stream == CLOSE and protocol.startswith("v5") and data[:1] == bytes([STDIN]):
                    channel.shutdown_write()
        except (EOFError, OSError, ValueError):  # ValueError: the handler closed its file
            pass
        finally:
            gone.set()

    threading.Thread(target=pump_in, name="exec-stdin", daemon=True).start()
    code: int | None = None

    def drain() -> None:
        while channel.recv_ready():
            ws.send(STDOUT, channel.recv(65536))
        while channel.recv_stderr_ready():
            ws.send(STDERR, channel.recv_stderr(65536))

    try:
        while not gone.is_set():
            select.select([channel], [], [], 0.1)
            drain()
            if channel.exit_status_ready() and (channel.eof_received or channel.closed):
                drain()
                code = channel.recv_exit_status()
                ws.send(ERROR, json.dumps(exit_status(code, argv)).encode())
                break
            if channel.closed:
                break
        ws.close()
    except OSError:
        pass  # the client went away
    finally:
        channel.close()
        on_done(code)


def serve_attach(ws: WebSocket, pod_gone: Callable[[], bool]) -> None:
    """Attach to a container whose main process writes nothing (the debug pod's `sleep`):
    the stream stays open until the client leaves or the pod is deleted."""
    done = threading.Event()

    def pump_in() -> None:
        try:
            while ws.receive() is not None:
                pass
        except (EOFError, OSError, ValueError):  # ValueError: the handler closed its file
            pass
        done.set()

    threading.Thread(target=pump_in, name="attach-stdin", daemon=True).start()
    while not done.wait(0.1):
        if pod_gone():
            break
    try:
        ws.send(ERROR, json.dumps({"metadata": {}, "status": "Success"}).encode())
        ws.close()
    except OSError:
        pass
    time.sleep(0)
