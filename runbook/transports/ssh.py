"""`--target ssh://[user@]host[:port]`: paramiko, one connection per host; a probe runs in a
channel of its own (`run`) or with others in one channel, one after another (`run_batch`,
transports/batch.py: a walk's bursts go that way).

Trust: the server's host key must match known_hosts (`--known-hosts`, default
~/.ssh/known_hosts), looked up under the name OpenSSH would use (HostKeyAlias, else host or
`[host]:port`), or be a host certificate that a `@cert-authority` line for that name vouches
for (host_cert.py; when such a line exists and no plain key is known, certificate host key
types are asked for first). An unknown key is refused with its fingerprint unless the user
opted in with `--accept-new-host-keys` (then it is appended, like OpenSSH's `accept-new`); a
changed key, a revoked key and a bad certificate are always refused.

Addresses, keys and jump hosts usually come from ssh_config.py (the user's ssh config merged
with the command line); a ProxyJump chain is a jump host whose own options name the hop before
it, each hop a direct-tcpip channel of the previous connection.

Every probe is started by `wrap_for_pgid`: the login shell reads a token the client sends on
the channel's input (never in the command line, which `ps` shows every user of the node),
writes a start mark carrying it on both streams, its own pid on stderr's, then execs
``/bin/sh -c CMD``. What a stream carries before its start mark is the login's own words (a
profile that prints a banner) and is dropped (`_Gate`): it never becomes a probe's output, the
node's name or a multi-file probe's first file, and nothing printed before the command could
pass for the mark without the token.

Timeouts really stop the remote command: sshd makes the session's shell a session and
process-group leader, so the pid in the start mark names the group of everything CMD starts; on
a timeout a second channel on the same connection sends TERM, then KILL, to that group before
the probe's channel is closed. (Closing a channel without a PTY does not signal the remote
process.)

A batch keeps each probe's own timeout, counted from the end of the probe before it. One that
runs past BATCH_PATIENCE_S hands the probes after it back to the caller, who sends them in a
new channel; the batch's shell is sent SIGUSR1, which it acts on once that probe has ended (it
stops there), and its process group is stopped if it went on to the next one all the same. So
a hung `nvidia-smi` costs the probes queued behind it a quarter of a second, not its timeout.
"""

from __future__ import annotations

import base64
import dataclasses
import errno
import hashlib
import logging
import os
import secrets
import socket
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from runbook.errors import (
    AuthenticationError,
    HostKeyError,
    UnreachableError,
    UsageError,
)
from runbook.transports import host_cert, known_hosts
from runbook.transports.address import SSHAddress
from runbook.transports.base import (
    CommandResult,
    Deliver,
    Probe,
    Spill,
    decode,
    fail_all,
)
from runbook.transports.batch_run import BATCH_PATIENCE_S as BATCH_PATIENCE_S
from runbook.transports.batch_run import BatchRun, launch
from runbook.transports.capture import BoundedBuffer
from runbook.transports.known_hosts import KnownHostsFile
from runbook.transports.marks import Gate as _Gate
from runbook.transports.marks import Sink as _Sink
from runbook.transports.marks import start_mark, wrap_for_pgid

log = logging.getLogger(__name__)

_EOF_GRACE_S = 2.0
#: most bytes of one stream read before the loop looks at the clock again
_DRAIN_BYTES = 4 * 1024 * 1024
_GRACE_POLL_S = 0.02
#: how long a batch's shell asked to stop may take to end before its process group is stopped
_STOP_GRACE_S = 0.5


@dataclass(frozen=True)
class SSHOptions:
    known_hosts: Path = field(default_factory=lambda: Path.home() / ".ssh" / "known_hosts")
    identities: tuple[Path, ...] = ()
    accept_new_host_keys: bool = False
    jump: SSHAddress | None = None
    #: how the jump host itself is reached (its own keys, known_hosts and jump host: a
    #: ProxyJump chain); None: with these options, less the jump
    jump_options: SSHOptions | None = None
    connect_timeout: float = 10.0
    allow_agent: bool = True
    #: sshd's default MaxSessions is 10; stay under it
    max_channels: int = 8


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:…` as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _record_host_key(path: Path, line: str) -> bool:
    """Append a key accepted as new to known_hosts, only into a regular file reached without a
    symbolic link (`UserKnownHostsFile /dev/null` is not made a 0600 file; a link is not
    written through, nor its target chmodded). False: the key is trusted for this connection
    only, and the log says why it was not recorded."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        log.warning("host key accepted for this connection but not recorded in %s: %s", path, why)
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            log.info("host key accepted for this connection; %s is not a regular file", path)
            return False
        os.write(fd, line.encode("ascii"))
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # ours: keep it private, as ssh-keygen leaves it
        return True
    finally:
        os.close(fd)


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """A key known_hosts does not list for the host: a host certificate a trusted CA signed
    (checked in full: a bad one is refused whatever the flags), else refuse it (one clear error
    with the fingerprint) or, when the user opted in, record it in known_hosts."""

    def __init__(
        self, options: SSHOptions, address: SSHAddress, known: KnownHostsFile | None = None
    ) -> None:
        self.options = options
        self.address = address
        self.known = known

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        name = self.address.known_hosts_name
        offered = fingerprint(key)
        revoked = self.known.revoked_part(key) if self.known is not None else None
        if revoked == "the host key":
            raise HostKeyError(
                f"{self.address}: host key {key.get_name()} {offered} is marked @revoked in "
                f"{self.options.known_hosts}; refusing",
                host=name,
                fingerprint=offered,
            )
        if revoked is not None:  # whether or not a CA line vouches for the host
            raise HostKeyError(
                f"{self.address}: host certificate refused: {revoked} is marked @revoked in "
                f"{self.options.known_hosts} ({key.get_name()} {offered})",
                host=name,
                fingerprint=offered,
            )
        if self._certified(key, offered):
            return
        if not self.options.accept_new_host_keys:
            raise HostKeyError(
                f"{self.address}: host key {key.get_name()} {offered} is not in "
                f"{self.options.known_hosts}; check it and re-run with --accept-new-host-keys",
                host=name,
                fingerprint=offered,
            )
        client.get_host_keys().add(hostname, key.get_name(), key)
        path = self.options.known_hosts
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        if _record_host_key(path, line):
            log.info("added host key %s %s for %s to %s", key.get_name(), offered, name, path)

    def _certified(self, key: paramiko.PKey, offered: str) -> bool:
        """True when the server presented a host certificate that a `@cert-authority` line
        for this host vouches for; HostKeyError when such a CA exists and the certificate is
        bad (never overridden by --accept-new-host-keys); False when no CA line matches the
        host (the certified key is then judged as a plain key, as OpenSSH does)."""
        blob = getattr(key, "public_blob", None)
        if blob is None or not host_cert.is_certificate_type(blob.key_type):
            return False
        name = self.address.known_hosts_name
        authorities = self.known.authorities_for(name) if self.known else []
        if not authorities:
            return False
        try:
            cert = host_cert.parse(bytes(blob.key_blob))
            host_cert.check(
                cert,
                principal=self.address.principal,
                authorities=authorities,
                revoked=self.known.revoked_blobs() if self.known else (),
            )
        except host_cert.CertificateError as exc:
            raise HostKeyError(
                f"{self.address}: host certificate refused: {exc} ({key.get_name()} {offered}, "
                f"CA from {self.options.known_hosts})",
                host=self.address.known_hosts_name,
                fingerprint=offered,
            ) from None
        log.info(
            "%s: host certificate %r (serial %d) signed by a trusted CA",
            self.address,
            cert.key_id,
            cert.serial,
        )
        return True


class _NoDelay(paramiko.Transport):
    """A transport whose TCP socket sends each SSH packet at once (TCP_NODELAY).

    Without it every channel a probe opens waits about 40 ms: sshd answers a channel request
    in two small writes, Nagle's algorithm holds the second until the first is acknowledged,
    and the client's kernel delays that acknowledgement (measured over a test host: opening a
    session 42 ms, with TCP_NODELAY 0.3 ms). paramiko leaves the socket as it connects it; it
    is set here, before the handshake's first packet. A jump host's channel is not a socket
    (the hop's own connection carries it, and has the option itself)."""

    def __init__(self, sock: object, *args: Any, **kwargs: Any) -> None:
        if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:  # a socket that refuses it still works, only slower
                log.debug("TCP_NODELAY refused: %s", exc)
            if _TCP_QUICKACK is not None:
                sock = _QuickAck(sock)
        super().__init__(sock, *args, **kwargs)  # type: ignore[arg-type]


_TCP_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


class _QuickAck:
    """A TCP socket that acknowledges what it receives at once (TCP_QUICKACK, Linux; set
    again after every read, as the kernel clears it by itself). sshd does not set TCP_NODELAY
    on a session without a terminal, so of two small writes it holds the second until the first
    is acknowledged, and this side's kernel may delay that acknowledgement by 40 ms. Measured
    on a test host: a command sent within 20 ms of the handshake took 50 ms, one sent 50 ms
    after it 8 ms, and with this 8 ms either way; a guided run's first answer waited the 40 ms
    in 5 runs of 9. Everything else is the socket's own."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def recv(self, size: int) -> bytes:
        data = self._sock.recv(size)
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, _TCP_QUICKACK, 1)  # type: ignore[arg-type]
        except OSError:
            pass  # only slower
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _CertificateFirst(_NoDelay):
    """A transport that asks for the host's certificate before its plain key: sshd serves the
    first type in the client's list it has, and paramiko lists plain keys first (so a host
    only a CA vouches for would never show its certificate)."""

    @property
    def preferred_keys(self) -> tuple[str, ...]:
        keys = tuple(super().preferred_keys)
        return tuple(k for k in keys if host_cert.is_certificate_type(k)) + tuple(
            k for k in keys if not host_cert.is_certificate_type(k)
        )


def _trust_known_hosts(
    client: paramiko.SSHClient, address: SSHAddress, options: SSHOptions
) -> tuple[KnownHostsFile | None, type[paramiko.Transport]]:
    """(known_hosts, transport factory): the keys known_hosts lists for the host added to the
    client's; with none but a CA that vouches for the host, a transport that asks for its
    certificate first. (None, _NoDelay) when there is no known_hosts file."""
    if not options.known_hosts.exists():
        return None, _NoDelay
    try:
        known = known_hosts.read(options.known_hosts)
    except OSError as exc:
        raise UsageError(f"cannot read known_hosts {options.known_hosts}: {exc}") from exc
    # the keys listed for the name looked up (HostKeyAlias or host[:port], hashed or
    # not), filed under the name paramiko will ask for (the address it connects to)
    asked = address.host if address.port == 22 else f"[{address.host}]:{address.port}"
    found = known.keys.lookup(address.known_hosts_name)
    if found:
        for keytype in found:
            client.get_host_keys().add(asked, keytype, found[keytype])
    elif known.authorities_for(address.known_hosts_name):
        return known, _CertificateFirst
    return known, _NoDelay


#: what a failed connect raises, other than a refused host key (HostKeyError)
_CONNECT_FAILURES: tuple[type[BaseException], ...] = (
    paramiko.BadHostKeyException,
    paramiko.AuthenticationException,
    socket.gaierror,
    TimeoutError,
    paramiko.ssh_exception.NoValidConnectionsError,
    OSError,
    paramiko.SSHException,
    EOFError,
)


def _connect_failure(
    exc: BaseException,
    address: SSHAddress,
    options: SSHOptions,
    *,
    spoke: bool,
    waited_s: float,
) -> HostKeyError | AuthenticationError | UnreachableError:
    """The error a failed connect is reported as; `spoke`: the server sent its SSH version,
    `waited_s`: how long the connect took."""
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostKeyError(
            f"{address}: host key CHANGED: known_hosts has {fingerprint(exc.expected_key)}, "
            f"the server offers {exc.key.get_name()} {fingerprint(exc.key)}; refusing "
            f"(if the host was rebuilt, remove its line from {options.known_hosts})",
            host=address.host,
            fingerprint=fingerprint(exc.key),
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthenticationError(f"{address}: authentication failed ({exc})")
    if isinstance(exc, socket.gaierror):
        return UnreachableError(f"{address}: cannot resolve {address.host}: {exc.strerror}")
    if isinstance(exc, TimeoutError):
        return UnreachableError(
            f"{address}: timed out after {options.connect_timeout:g}s connecting"
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = "; ".join(
            sorted({getattr(e, "strerror", None) or str(e) for e in exc.errors.values()})
        )
        return UnreachableError(f"{address}: cannot connect: {reasons}")
    if waited_s >= options.connect_timeout:
        # paramiko gives up negotiating at the timeout and then fails on "No existing
        # session": say what the server did not do
        waited = "the SSH handshake" if spoke else "an SSH banner (the port accepts TCP)"
        return UnreachableError(
            f"{address}: timed out after {options.connect_timeout:g}s waiting for {waited}"
        )
    return UnreachableError(f"{address}: {exc or type(exc).__name__}")


def _connect(
    address: SSHAddress, options: SSHOptions, sock: paramiko.Channel | None = None
) -> paramiko.SSHClient:
    for key in options.identities:
        # paramiko would say `[Errno 2] No such file or directory` as an auth failure (exit 3)
        if not Path(key).is_file():
            raise UsageError(f"{address}: SSH key {key} is not a file (--identity or IdentityFile)")
    client = paramiko.SSHClient()
    known, factory = _trust_known_hosts(client, address, options)
    client.set_missing_host_key_policy(_HostKeyPolicy(options, address, known))
    started = time.monotonic()
    try:
        client.connect(
            address.host,
            port=address.port,
            username=address.user,
            # paramiko takes a list here; its stubs say str
            key_filename=[str(p) for p in options.identities] or None,  # type: ignore[arg-type]
            allow_agent=options.allow_agent,
            look_for_keys=not options.identities,
            timeout=options.connect_timeout,
            banner_timeout=options.connect_timeout,
            auth_timeout=options.connect_timeout,
            channel_timeout=options.connect_timeout,
            sock=sock,
            transport_factory=factory,  # type: ignore[arg-type]
        )
    except HostKeyError:
        client.close()
        raise
    except _CONNECT_FAILURES as exc:
        spoke = bool(getattr(client.get_transport(), "remote_version", ""))
        client.close()
        raise _connect_failure(
            exc, address, options, spoke=spoke, waited_s=time.monotonic() - started
        ) from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    return client


class _Wakeup(threading.Event):
    """Set by paramiko whenever a channel has news; cleared only by its reader (`reset`).
    paramiko's buffers clear the event they were given when a read empties them, which,
    with one event for both streams, could lose the other stream's news: their `clear` is
    ignored here."""

    def clear(self) -> None:
        pass

    def reset(self) -> None:
        super().clear()


class _StatusEvent(threading.Event):
    """The channel's exit-status event, that also wakes its reader."""

    def __init__(self, wake: _Wakeup) -> None:
        super().__init__()
        self._wake = wake

    def set(self) -> None:
        super().set()
        self._wake.set()


def _watch(channel: paramiko.Channel) -> _Wakeup:
    """One event paramiko sets for data on either stream, their EOF and the exit status (the
    buffers' `set_event`, as Channel.fileno() uses them, and the channel's status event)."""
    wake = _Wakeup()
    channel.status_event = _StatusEvent(wake)
    channel.in_buffer.set_event(wake)
    channel.in_stderr_buffer.set_event(wake)
    return wake


def _dropped(channel: paramiko.Channel) -> bool:
    """The channel was closed under us: no exit status and no EOF came (paramiko reports
    such a channel as exited -1). A command that ends, even by a signal, is followed by EOF."""
    return channel.closed and not channel.eof_received and channel.exit_status == -1


def _connect_through(
    address: SSHAddress, options: SSHOptions, hops: list[paramiko.SSHClient], depth: int = 0
) -> paramiko.SSHClient:
    """Connect to `address`, through its jump host (and that one's, for a ProxyJump chain)
    when it has one, each hop a direct-tcpip channel of the one before; the hops' clients are
    appended to `hops` for the caller to close, also when this fails."""
    if options.jump is None:
        return _connect(address, options)
    if depth >= 8:
        raise UsageError(f"{address}: more than 8 jump hosts (a ProxyJump loop?)")
    hop_options = options.jump_options or dataclasses.replace(options, jump=None)
    hop = _connect_through(options.jump, hop_options, hops, depth + 1)
    hops.append(hop)
    hop_transport = hop.get_transport()
    assert hop_transport is not None
    try:
        sock = hop_transport.open_channel(
            "direct-tcpip",
            (address.host, address.port),
            ("127.0.0.1", 0),
            timeout=options.connect_timeout,
        )
    except (paramiko.SSHException, OSError) as exc:
        raise UnreachableError(
            f"{address}: the jump host {options.jump} cannot reach it: {exc}"
        ) from None
    return _connect(address, options, sock)


class SSHTransport:
    """One paramiko connection to one host; `run` is safe from several threads."""

    #: the node's name as the user typed it (runbook.targets sets it): what reports show
    node_name: str | None = None

    def __init__(self, address: SSHAddress, options: SSHOptions | None = None) -> None:
        self.address = address
        self.options = options or SSHOptions()
        self.description = str(address)
        #: the jump hosts' connections, first hop first
        self._hops: list[paramiko.SSHClient] = []
        try:
            self._client = _connect_through(address, self.options, self._hops)
        except BaseException:
            self._close_hops()
            raise
        self._slots = threading.BoundedSemaphore(self.options.max_channels)

    def _transport(self) -> paramiko.Transport:
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise OSError("connection lost")
        return transport

    def run(self, probe: Probe) -> CommandResult:
        start = time.monotonic()
        with self._slots:
            channel: paramiko.Channel | None = None
            try:
                channel = self._transport().open_session(timeout=self.options.connect_timeout)
                wake = _watch(channel)  # before the command starts: no news can be missed
                # as bytes: a value that was not UTF-8 (`--var v=$'\xff'`, kept by Python as
                # lone surrogates) reaches the shell as the bytes it was, still one quoted word
                token = secrets.token_hex(8)
                begin = secrets.token_hex(16)  # the start marks', sent on the input
                channel.exec_command(
                    wrap_for_pgid(probe.command, token).encode("utf-8", "surrogateescape")
                )
                # then the command's own secret (a multi-file probe's frame token), then EOF
                lines = [begin, probe.secret] if probe.secret else [begin]
                channel.sendall("".join(f"{line}\n" for line in lines).encode("ascii"))
                channel.shutdown_write()
            except (OSError, paramiko.SSHException, EOFError) as exc:
                if channel is not None:
                    channel.close()
                return CommandResult(
                    probe.name,
                    probe.command,
                    error=f"could not start: {exc or type(exc).__name__}",
                    duration=time.monotonic() - start,
                )
            try:
                return self._read(channel, wake, probe, start, token, begin)
            except Exception as exc:  # a dying connection must be a result, never a crash
                log.debug("%s: %s failed", self.address, probe.name, exc_info=True)
                return CommandResult(
                    probe.name,
                    probe.command,
                    error=f"connection failed during the command: {type(exc).__name__}: {exc}",
                    duration=time.monotonic() - start,
                )
            finally:
                channel.close()

    def run_batch(
        self,
        probes: Sequence[Probe],
        deliver: Deliver,
        spill: Spill,
        *,
        within: float | None = None,
    ) -> None:
        """`probes` one after another in one channel (transports/batch.py, base.BatchTransport).
        Each keeps its own timeout, counted from when the one before it ended; one that runs
        longer than BATCH_PATIENCE_S hands the probes after it back (`spill`), and once it ends
        the batch's process group is stopped, so none of them runs twice for long."""
        sent = launch(probes, within)
        start, limit, mine, token = sent.start, sent.limit, sent.probes, sent.token
        with self._slots:
            channel: paramiko.Channel | None = None
            try:
                channel = self._transport().open_session(timeout=self.options.connect_timeout)
                wake = _watch(channel)
                channel.exec_command(sent.command())
                channel.sendall(sent.input())
                channel.shutdown_write()
            except (OSError, paramiko.SSHException, EOFError) as exc:
                if channel is not None:
                    channel.close()
                error = f"could not start: {exc or type(exc).__name__}"
                fail_all(probes, deliver, error, time.monotonic() - start)
                return
            reader = _BatchReader(self, channel, wake, mine, deliver, sent.mark, token, sent.begin)
            try:
                reader.read(start, limit, spill)
            except Exception as exc:  # a dying connection must be a result, never a crash
                log.debug("%s: batch failed", self.address, exc_info=True)
                reader.fail(
                    f"connection failed during the command: {type(exc).__name__}: {exc}", spill
                )
            finally:
                channel.close()
                reader.close()
        if reader.handed_back is None and len(mine) < len(probes):
            spill(len(mine))

    def _read(
        self,
        channel: paramiko.Channel,
        wake: _Wakeup,
        probe: Probe,
        start: float,
        token: str = "",
        begin: str = "",
    ) -> CommandResult:
        # Woken by the channel itself, not select()ed or polled: Channel.fileno() gives each
        # channel an OS pipe that paramiko closes from its own thread when the server closes
        # the channel, so a select() in another thread can race a closed (or already reused)
        # descriptor; and polling woke every waiting reader up to fifty times a second (a
        # sweep has a hundred of them, each needing the GIL to look). `_watch` has paramiko
        # set one event for anything that arrives (data on either stream, EOF, exit status).
        out = _Gate(BoundedBuffer(), start_mark(begin))
        err = _Gate(BoundedBuffer(), start_mark(begin), with_pgid=True)
        deadline = start + probe.timeout
        timed_out = False
        error = None
        exited_at: float | None = None
        while True:
            wake.reset()
            if self._drain(channel, out, err):
                if time.monotonic() < deadline:
                    continue
                # output that never stops (`yes`) must not outlive the timeout
                timed_out = True
                break
            if channel.exit_status_ready():
                # sshd sends exit-status when it reaps the command, which can be before it
                # has forwarded the last output: read on until EOF, or a short grace when a
                # background child keeps the output open
                if exited_at is None:
                    exited_at = time.monotonic()
                if (
                    channel.eof_received
                    or channel.closed
                    or (time.monotonic() - exited_at > _EOF_GRACE_S)
                ):
                    self._drain(channel, out, err)
                    break
            if channel.closed or (channel.eof_received and not self._is_active()):
                error = "connection lost before the command finished"
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            # after the exit status, EOF may never come (a background child holds the
            # output): look again every _GRACE_POLL_S until the grace is over
            wake.wait(remaining if exited_at is None else min(remaining, _GRACE_POLL_S))
        if not timed_out and error is None and _dropped(channel):
            error = "connection lost before the command finished"
        if timed_out and err.pgid is not None:
            self._kill_group(err.pgid)
        elif timed_out and token:
            self._cancel(token)
        if not (timed_out or error or out.opened):
            # the login shell ended, or ran something else, before our command: what it
            # printed is its own, not the probe's output
            error = "the remote shell ended before the command started"
        out.dropped_note(self.address, probe.name)
        return CommandResult(
            name=probe.name,
            command=probe.command,
            stdout=decode(out.inner.getvalue()),
            stderr=decode(err.inner.getvalue()),
            exited=None if timed_out or error else channel.recv_exit_status(),
            duration=time.monotonic() - start,
            timed_out=timed_out,
            truncated=out.inner.truncated or err.inner.truncated,
            error=error,
        )

    @staticmethod
    def _drain(channel: paramiko.Channel, out: _Sink, err: _Sink) -> bool:
        """Read what is buffered on both streams, at most _DRAIN_BYTES of each (a stream that
        never stops must leave room for the deadline check); whether anything was read."""
        got = False
        for ready, recv, buffer in (
            (channel.recv_ready, channel.recv, out),
            (channel.recv_stderr_ready, channel.recv_stderr, err),
        ):
            taken = 0
            while taken < _DRAIN_BYTES and ready():
                chunk = recv(65536)
                buffer.feed(chunk)
                taken += len(chunk)
                got = True
        return got

    def _stop(self, pgid: int | None, token: str) -> None:
        """Stop what a probe left running: its process group, or when it never said which,
        whatever carries its token."""
        if pgid is not None:
            self._kill_group(pgid)
        elif token:
            self._cancel(token)

    def _ask_to_stop(self, pid: int) -> paramiko.Channel | None:
        """A batch's shell (transports/batch.py) ends once the probe it runs has ended. Not
        waited for: the caller closes the channel returned when its batch is over."""
        try:
            channel = self._transport().open_session(timeout=self.options.connect_timeout)
            channel.exec_command(f"kill -s USR1 {pid} 2>/dev/null; true")
        except (OSError, paramiko.SSHException, EOFError) as exc:
            self._could_not(f"stop batch {pid}", exc)
            return None
        return channel

    def _is_active(self) -> bool:
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()

    def _cancel(self, token: str) -> None:
        """A probe that timed out before it said its process group: keep it from starting
        (its cancel file) and kill whatever of it already runs (found by RBK_PROBE)."""
        cancel = f'"${{TMPDIR:-/tmp}}/.rbk-cancel-{token}"'
        command = (
            f"touch {cancel}; "
            "for d in /proc/[0-9]*; do "
            f"if tr '\\0' '\\n' < $d/environ 2>/dev/null | grep -qx 'RBK_PROBE={token}'; "
            'then kill -KILL "${d#/proc/}" 2>/dev/null; fi; done; true'
        )
        self._second_channel(command, f"cancel timed-out probe {token}")

    def _kill_group(self, pgid: int) -> None:
        """Stop a timed-out command's whole process group from a second channel."""
        command = (
            f"kill -s TERM -- -{pgid} 2>/dev/null; i=0; "
            f"while kill -0 -{pgid} 2>/dev/null && [ $i -lt 10 ]; "
            "do sleep 0.05; i=$((i+1)); done; "
            f"kill -s KILL -- -{pgid} 2>/dev/null; true"
        )
        self._second_channel(command, f"stop timed-out process group {pgid}")

    def _second_channel(self, command: str, what: str) -> None:
        """Run `command` on a channel of its own, waiting a few seconds for it (a slow login
        may hold it back; it goes on after the channel closes)."""
        try:
            channel = self._transport().open_session(timeout=self.options.connect_timeout)
            try:
                channel.exec_command(command)
                channel.status_event.wait(5)
            finally:
                channel.close()
        except (OSError, paramiko.SSHException, EOFError) as exc:
            self._could_not(what, exc)

    def _could_not(self, what: str, exc: BaseException) -> None:
        # a connection closed under it (an interrupted run) is said once, by the run
        quiet = not self._is_active()
        (log.debug if quiet else log.warning)("%s: could not %s: %s", self.address, what, exc)

    def _close_hops(self) -> None:
        for hop in reversed(self._hops):
            hop.close()

    def close(self) -> None:
        self._client.close()
        self._close_hops()


class _BatchReader(BatchRun):
    """Reads one batch's channel: each probe's output as its end marks arrive, its timeout,
    and the hand-back of the probes after one that takes long."""

    def __init__(
        self,
        transport: SSHTransport,
        channel: paramiko.Channel,
        wake: _Wakeup,
        probes: Sequence[Probe],
        deliver: Deliver,
        mark: bytes,
        token: str,
        begin: str,
    ) -> None:
        super().__init__(probes, deliver, mark, begin)
        self.transport = transport
        self.channel = channel
        self.wake = wake
        self.token = token
        #: the channel that asked the shell to stop (closed with the batch's)
        self.stopping: paramiko.Channel | None = None

    def read(self, start: float, limit: float, spill: Spill) -> None:
        channel = self.channel
        self.began = start
        ended_at: float | None = None
        while self.current < self._end:
            self.wake.reset()
            got = self.transport._drain(channel, self._out, self._err)
            now = time.monotonic()
            if not self._advance(now):
                break
            deadline = self._deadline(limit)
            if now >= deadline:
                self._timed_out(now, spill)
                return
            patience_ends = self._patience_ends()
            if patience_ends is not None and now >= patience_ends:
                self._hand_back(self.current + 1, spill)
                continue
            if got:
                continue
            if channel.eof_received or channel.closed or channel.exit_status_ready():
                # the marks come before the shell exits; sshd may report the exit before the
                # last output, so EOF (or a short grace) says nothing more is coming
                ended_at = now if ended_at is None else ended_at
                if channel.eof_received or channel.closed or now - ended_at > _EOF_GRACE_S:
                    lost = channel.closed and not self.transport._is_active()
                    self.fail(
                        "connection lost before the command finished"
                        if lost
                        else "the batch's shell ended before the command finished",
                        spill,
                    )
                    return
            wait_until = deadline if patience_ends is None else min(deadline, patience_ends)
            if ended_at is not None:
                wait_until = min(wait_until, now + _GRACE_POLL_S)
            self.wake.wait(max(0.0, wait_until - now))
        if self.handed_back is not None:
            self._see_it_stop()

    def _see_it_stop(self) -> None:
        """The shell was asked to stop after the probe it ran; when the next one had already
        started (it ended just as it was asked), it is stopped with its process group."""
        until = time.monotonic() + _STOP_GRACE_S
        while not (self.channel.exit_status_ready() or self.channel.closed):
            left = until - time.monotonic()
            if left <= 0:
                self.transport._stop(self._err.pgid, self.token)
                return
            self.wake.reset()
            self.transport._drain(self.channel, self._out, self._err)
            self.wake.wait(left)

    def _ask_to_stop(self, pgid: int) -> None:
        self.stopping = self.transport._ask_to_stop(pgid)

    def close(self) -> None:
        if self.stopping is not None:
            self.stopping.close()

    def _timed_out(self, now: float, spill: Spill) -> None:
        # the walk has its result before the second channel that stops the probe comes back
        self._cut_short(now, spill, timed_out=True, error=None)
        self.transport._stop(self._err.pgid, self.token)

    def fail(self, error: str, spill: Spill) -> None:
        """The current probe ends with `error`; those after it are handed back."""
        self._cut_short(time.monotonic(), spill, timed_out=False, error=error)
