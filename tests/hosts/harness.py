"""Real OpenSSH servers as test hosts, each in its own network namespace on a private bridge.

Why real servers: the SSH transport's behaviour that matters (host-key trust, MaxSessions,
process groups of remote commands, what PATH a session gets) is sshd's, and a mock would only
restate our assumptions. Why network namespaces: each host gets its own address, hostname and
process set, so "the command ran on h2, not h1" and "nothing of h1 survives its removal" are
checkable facts, and 200 hosts cost about 2 MiB each.

Layout of one run (token ``<pid><letter>``, so several networks can live in one process):

* bridge ``rbkbr<token>`` in the root namespace with the first address of a free /24 of
  10.213.0.0/16 (a private test range), checked with ``ip route get`` before use;
* per host: netns ``rbk-<token>-<name>``, veth ``rbv<token><index>`` on the bridge whose peer is
  ``eth0`` in the netns, and an sshd started through ``ip netns exec NS unshare --mount --uts``
  with a private tmpfs on /run (sshd needs /run/sshd; the machine's /run stays untouched), its
  own hostname, and root's shell start-up files replaced (see :meth:`TestHost.start_sshd`);
* files under ``<workdir>/rbk-<token>/``: the client key, known_hosts, ssh_config, one folder
  per host (sshd_config, host key, authorized_keys, shim dir, sshd.log).

Cleanup is layered because a leaked sshd keeps its netns and veth alive after the name is gone:
``close()`` (also from ``__exit__``), an atexit hook, SIGTERM/SIGHUP handlers, and on start a
sweep of leftovers whose owner is dead (its pid is gone or it no longer holds its lock file; the
flock is released by the kernel even after SIGKILL, so a reused pid cannot keep junk alive).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import paramiko

SSHD = "/usr/sbin/sshd"
#: the PATH sshd sessions get after the shim dir (Debian's root PATH)
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: private range the harness carves /24s from; nothing on a test machine should route it
TEST_RANGE = ipaddress.IPv4Network("10.213.0.0/16")
#: lock files live outside any workdir so that a later run can find the owner of leftovers
LOCK_DIR = Path("/run/lock/rbk-hostnet")
NETNS_DIR = Path("/run/netns")
#: Linux interface names hold at most 15 characters (IFNAMSIZ 16 with the NUL)
MAX_IFNAME = 15
READY_TIMEOUT = 10.0

_NETNS_RE = re.compile(r"^rbk-(?P<token>\d+[a-z])-")
_BRIDGE_RE = re.compile(r"^rbkbr(?P<token>\d+[a-z])$")
_VETH_RE = re.compile(r"^rbv(?P<token>\d+[a-z])\d+$")
_LOCK_RE = re.compile(r"^(?P<token>\d+[a-z])\.lock$")
_HOST_NAME_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$")
_REQUIRED_TOOLS = ("ip", "unshare", "ssh-keygen", "ssh", "mount", "hostname", "sh")


class HarnessError(RuntimeError):
    """The test-host harness could not build or tear down what it was asked to."""


@dataclass(frozen=True)
class ClientKey:
    """The session's ed25519 client key; every host's authorized_keys lists its public line."""

    private_path: Path
    public_path: Path
    #: ``ssh-ed25519 AAAA... comment``, as in the .pub file
    public_line: str


# --------------------------------------------------------------------------------------------
# small helpers


def _run(
    argv: Sequence[str],
    *,
    input: str | None = None,
    check: bool = True,
    timeout: float = 30.0,
) -> subprocess.CompletedProcess[str]:
    """Run a setup command; on failure raise HarnessError with its stderr (not a bare rc)."""
    proc = subprocess.run(
        list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise HarnessError(f"{shlex.join(argv)} failed (rc {proc.returncode}): {detail}")
    return proc


def _ip_batch(commands: Sequence[str], *, netns: str | None = None, check: bool = True) -> None:
    """Many ``ip`` commands in one process: setup cost is dominated by process starts."""
    if not commands:
        return
    argv = ["ip", *(["-n", netns] if netns else []), *([] if check else ["-force"]), "-b", "-"]
    _run(argv, input="\n".join(commands) + "\n", check=check)


def missing_prerequisites(sshd: str = SSHD) -> list[str]:
    """What this machine lacks for test hosts (empty when all is there), in words."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (network namespaces, bridges, mounts)")
    if not (os.path.isfile(sshd) and os.access(sshd, os.X_OK)):
        problems.append(f"no OpenSSH server at {sshd} (apt-get install openssh-server)")
    problems.extend(
        f"{tool!r} not found on PATH" for tool in _REQUIRED_TOOLS if shutil.which(tool) is None
    )
    return problems


def pid_alive(pid: int) -> bool:
    """Whether a process exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ns_key(path: str | Path) -> tuple[int, int] | None:
    """Identity of a network namespace (a netns file or /proc/PID/ns/net), or None if gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _pids_in_netns(names: Iterable[str]) -> dict[str, list[int]]:
    """``ip netns pids`` for many namespaces with one scan of /proc."""
    keys = {}
    for name in names:
        key = _ns_key(NETNS_DIR / name)
        if key is not None:
            keys[key] = name
    found: dict[str, list[int]] = {name: [] for name in keys.values()}
    if not keys:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        key = _ns_key(f"/proc/{entry}/ns/net")
        owner = keys.get(key) if key is not None else None
        if owner is not None:
            found[owner].append(int(entry))
    return found


def _kill_netns_processes(names: Sequence[str], *, timeout: float = 5.0) -> None:
    """SIGKILL everything in these namespaces until nothing is left: a surviving sshd session
    would keep the namespace (and its veth and address) alive after ``ip netns del``."""
    protected = {os.getpid(), os.getppid()}
    deadline = time.monotonic() + timeout
    while True:
        pids = [pid for found in _pids_in_netns(names).values() for pid in found]
        pids = [pid for pid in pids if pid not in protected]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise HarnessError(f"processes {pids} in {list(names)} survive SIGKILL")
        time.sleep(0.01)


def _delete_netns_and_links(
    netns: Sequence[str], links: Sequence[str], *, timeout: float = 5.0
) -> list[str]:
    """Delete namespaces, wait for their veths to go, delete what is left; return survivors.

    Deleting a namespace destroys its veth pair in the kernel's batched cleanup (50 hosts:
    ~60 ms); ``ip link del`` per veth waits for an RCU grace period each (~23 ms apiece here).
    """
    _ip_batch([f"netns del {n}" for n in netns if (NETNS_DIR / n).exists()], check=False)
    deadline = time.monotonic() + timeout
    pending = [name for name in links if _link_exists(name)]
    while pending and netns and time.monotonic() < deadline:
        time.sleep(0.005)
        pending = [name for name in pending if _link_exists(name)]
    _ip_batch([f"link del {name}" for name in pending], check=False)
    left = [name for name in netns if (NETNS_DIR / name).exists()]
    return left + [name for name in links if _link_exists(name)]


def _link_exists(name: str) -> bool:
    # /sys/class/net shows the namespace sysfs was mounted in: ours, the root namespace
    return os.path.lexists(f"/sys/class/net/{name}")


def _root_links() -> list[str]:
    try:
        return sorted(os.listdir("/sys/class/net"))
    except FileNotFoundError:
        return []


def _list_netns() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _public_key_fields(pub_path: Path) -> tuple[str, str]:
    """(key type, base64 blob) of an OpenSSH public key file."""
    fields = pub_path.read_text().split()
    return fields[0], fields[1]


def _keygen(keys: Mapping[Path, str], *, parallel: int = 16) -> None:
    """Fresh ed25519 keys, path -> comment; ``parallel`` ssh-keygens at a time (~10 ms each)."""
    items = list(keys.items())
    errors = []
    for chunk_start in range(0, len(items), parallel):
        running = []
        for path, comment in items[chunk_start : chunk_start + parallel]:
            for stale in (path, path.with_name(path.name + ".pub")):
                stale.unlink(missing_ok=True)
            argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            running.append((argv, proc))
        for argv, proc in running:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                errors.append(f"{shlex.join(argv)}: rc {proc.returncode}: {out.decode().strip()}")
    if errors:
        raise HarnessError("; ".join(errors))


def make_key(path: Path, comment: str = "rbk-test-key") -> Path:
    """A fresh passphrase-less ed25519 key at ``path`` (public half ``<path>.pub``): a CA to
    sign host certificates with (:meth:`TestHost.certify_host_key`), a stranger's key."""
    _keygen({path: comment})
    return path


def _write_atomic(path: Path, text: str) -> None:
    """Readers (paramiko in another thread, an ssh client) never see a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _sshd_version(sshd: str) -> tuple[int, int]:
    out = _run([sshd, "-V"], check=False)
    match = re.search(r"OpenSSH_(\d+)\.(\d+)", out.stderr + out.stdout)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def _accepts_tcp(address: str, port: int, timeout: float) -> bool:
    """True once something listens on address:port (sshd listens only after it has read its
    config and keys, so a successful connect means it will serve)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------------
# locks: who owns which token, and one global lock for subnet choice and stale sweeps


class _FileLock:
    """An flock held for a file's lifetime; the kernel drops it when the holder dies."""

    def __init__(self, path: Path, *, blocking: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise

    def write(self, text: str) -> None:
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, text.encode(), 0)

    def release(self, *, unlink: bool = False) -> None:
        if self._fd is None:
            return
        if unlink:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


@contextlib.contextmanager
def _global_lock() -> Iterator[None]:
    lock = _FileLock(LOCK_DIR / "global.lock")
    try:
        yield
    finally:
        lock.release()


def _token_owner_alive(token: str) -> bool:
    """The run that made ``token`` still holds its lock file (and its pid exists)."""
    pid = int(token[:-1])
    if not pid_alive(pid):
        return False
    path = LOCK_DIR / f"{token}.lock"
    if not path.exists():
        return False
    try:
        probe = _FileLock(path, blocking=False)
    except BlockingIOError:
        return True
    probe.release()
    return False


def cleanup_stale() -> list[str]:
    """Remove namespaces, links, workdirs and lock files left by dead runs; return their names.

    Safe to call while other runs (other processes, or this one) are live: their tokens are
    skipped because they still hold their lock files.
    """
    with _global_lock():
        return _cleanup_stale_locked()


def _cleanup_stale_locked() -> list[str]:
    netns_by_token: dict[str, list[str]] = {}
    links_by_token: dict[str, list[str]] = {}
    locks_by_token: dict[str, Path] = {}
    for name in _list_netns():
        if match := _NETNS_RE.match(name):
            netns_by_token.setdefault(match["token"], []).append(name)
    for name in _root_links():
        if match := _BRIDGE_RE.match(name) or _VETH_RE.match(name):
            links_by_token.setdefault(match["token"], []).append(name)
    if LOCK_DIR.is_dir():
        for entry in LOCK_DIR.iterdir():
            if match := _LOCK_RE.match(entry.name):
                locks_by_token[match["token"]] = entry
    removed: list[str] = []
    for token in sorted({*netns_by_token, *links_by_token, *locks_by_token}):
        if _token_owner_alive(token):
            continue
        netns = netns_by_token.get(token, [])
        links = links_by_token.get(token, [])
        veths = [name for name in links if _VETH_RE.match(name)]
        bridges = [name for name in links if _BRIDGE_RE.match(name)]
        # the owner's own order: processes, namespaces (and their veths), then the bridge
        _kill_netns_processes(netns)
        left = _delete_netns_and_links(netns, veths) + _delete_netns_and_links([], bridges)
        if left:
            raise HarnessError(f"could not remove stale test-host leftovers {left}")
        removed += netns + links
        lock_path = locks_by_token.get(token)
        if lock_path is not None:
            with contextlib.suppress(OSError, ValueError):
                workdir = Path(json.loads(lock_path.read_text() or "{}").get("dir", ""))
                if workdir.name == f"rbk-{token}" and workdir.is_dir():
                    shutil.rmtree(workdir, ignore_errors=True)
                    removed.append(str(workdir))
            lock_path.unlink(missing_ok=True)
    return removed


# --------------------------------------------------------------------------------------------
# process-wide safety net: atexit and signals close every live network


_LIVE: list[HostNetwork] = []
_CLEANUP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _close_all() -> None:
    # a forked child inherits _LIVE (and atexit): only the process that built a network may
    # tear it down, or a child's exit would pull the hosts from under its parent
    for net in [n for n in _LIVE if n.owner_pid == os.getpid()]:
        try:
            net.close()
        except Exception as exc:  # the last line of defence reports and carries on
            print(f"test-host harness: cleanup of {net.bridge} failed: {exc}", file=sys.stderr)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Tear everything down, then die of the signal as the process would have without us."""
    _close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    """Only where the signal would kill the process outright (its default action, which
    skips atexit). An ignored signal (``nohup``) stays ignored, and someone else's handler
    stays theirs: closing the hosts under a process that goes on running would be worse.
    SIGINT already raises KeyboardInterrupt, which unwinds ``with`` blocks and fixtures."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _CLEANUP_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_DFL:
            signal.signal(signum, _on_signal)


atexit.register(_close_all)


# --------------------------------------------------------------------------------------------
# hosts


class TestHost:
    """One test host: a network namespace with its own address, hostname and sshd.

    Made by :meth:`HostNetwork.add_host`; everything it creates is removed by
    :meth:`HostNetwork.remove_host` or when the network closes.
    """

    __test__ = False  # a class named Test* in a test module: tell pytest it is not a test

    def __init__(
        self,
        network: HostNetwork,
        name: str,
        index: int,
        address: str,
        port: int,
        extra_sshd_config: str,
    ) -> None:
        self.network = network
        self.name = name
        self.index = index
        self.address = address
        self.port = port
        self.netns = f"rbk-{network.token}-{name}"
        self.veth = f"rbv{network.token}{index}"
        self.dir = network.dir / "hosts" / name
        self.shim_dir = self.dir / "shim"
        self.config_path = self.dir / "sshd_config"
        self.host_key_path = self.dir / "ssh_host_ed25519_key"
        self.host_key_pub_path = self.dir / "ssh_host_ed25519_key.pub"
        #: sshd reads it on every login: rewrite it to revoke or add keys for this host only
        self.authorized_keys_path = self.dir / "authorized_keys"
        self.sshd_log_path = self.dir / "sshd.log"
        self._profile_path = self.dir / "profile"
        self._empty_path = self.dir / "empty"
        self._extra_sshd_config = extra_sshd_config
        self._sshd: subprocess.Popen[bytes] | None = None
        self._spawned: list[subprocess.Popen[Any]] = []
        if len(self.veth) > MAX_IFNAME:
            raise HarnessError(f"interface name {self.veth!r} is longer than {MAX_IFNAME}")

    def __repr__(self) -> str:
        return f"TestHost({self.name!r}, {self.address}:{self.port}, netns={self.netns!r})"

    # ---- files

    @property
    def key_comment(self) -> str:
        return f"rbk-test-host-{self.name}"

    def _write_files(self) -> None:
        self.shim_dir.mkdir(parents=True, exist_ok=True)
        self.authorized_keys_path.write_text(self.network.client_key.public_line + "\n")
        self._empty_path.write_text("")
        # sshd's SetEnv PATH reaches `ssh host CMD`, but a login shell (a PTY session, `bash -l`)
        # runs /etc/profile, which resets PATH, then root's profile; ours puts the shim dir back.
        self._profile_path.write_text(
            "# test host login profile: the shim dir stays first on PATH\n"
            f"PATH={shlex.quote(self.session_path)}; export PATH\n"
        )
        self.config_path.write_text(self._sshd_config())

    def login_prints(self, stdout: str, stderr: str = "") -> None:
        """Every SSH session of this host prints `stdout` and `stderr` before its command runs,
        as a login banner in a shell start-up file does (bash reads ~/.bashrc for a command
        sshd runs; this file stands in for root's, and its profile for login shells)."""
        words = f"printf '%s' {shlex.quote(stdout)}; printf '%s' {shlex.quote(stderr)} >&2\n"
        self._empty_path.write_text(words)
        self._profile_path.write_text(self._profile_path.read_text() + words)

    @property
    def session_path(self) -> str:
        """PATH of this host's SSH sessions: the shim dir, then the standard directories."""
        return f"{self.shim_dir}:{STANDARD_PATH}"

    def _sshd_config(self) -> str:
        lines = [
            f"ListenAddress {self.address}",
            f"Port {self.port}",
            f"HostKey {self.host_key_path}",
            "PidFile none",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            f"AuthorizedKeysFile {self.authorized_keys_path}",
            # keys under /tmp (mode 1777) are refused otherwise
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            # defaults (10:30:100, 10) drop parallel connects and refuse the 11th channel
            "MaxStartups 200:30:400",
            "MaxSessions 64",
            "Subsystem sftp internal-sftp",
            f"SetEnv PATH={self.session_path}",
        ]
        if self.network.sshd_version >= (9, 8):
            # newer sshd penalises sources that connect and fail quickly: tests do that a lot
            lines.append("PerSourcePenalties no")
        if self._extra_sshd_config:
            lines.append(self._extra_sshd_config.strip())
        return "\n".join(lines) + "\n"

    # ---- keys

    def host_key_line(self) -> str:
        """This host's known_hosts line: ``<address> ssh-ed25519 AAAA...`` (``[addr]:port``
        when the port is not 22)."""
        keytype, blob = _public_key_fields(self.host_key_pub_path)
        where = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{where} {keytype} {blob}"

    def host_key_fingerprint(self) -> str:
        """``SHA256:...`` of the host key, as ``ssh-keygen -lf`` prints it."""
        _, blob = _public_key_fields(self.host_key_pub_path)
        digest = hashlib.sha256(base64.b64decode(blob)).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    def regenerate_host_key(self) -> None:
        """Restart sshd with a new host key and rewrite the network's known_hosts, so a copy
        of the old known_hosts now mismatches ("changed host key" tests). Sessions survive."""
        self.stop_sshd()
        _keygen({self.host_key_path: self.key_comment})
        self.start_sshd()
        self.network._write_client_files()

    def certify_host_key(
        self,
        ca_key: Path,
        principals: Sequence[str],
        *,
        validity: str = "-5m:+1h",
        host_certificate: bool = True,
        serial: int = 1,
    ) -> Path:
        """Sign this host's key with ``ca_key`` (``ssh-keygen -s``) and restart sshd serving
        the certificate (``HostCertificate``); returns the certificate's path. ``validity``
        is ssh-keygen's ``-V``; ``host_certificate=False`` signs a *user* certificate (which
        sshd serves all the same: a client must refuse it). Sessions survive the restart."""
        cert = self.host_key_path.with_name(self.host_key_path.name + "-cert.pub")
        cert.unlink(missing_ok=True)
        argv = ["ssh-keygen", "-q", "-s", str(ca_key), "-I", f"{self.name}-host", "-z", str(serial)]
        argv += ["-h"] if host_certificate else []
        argv += ["-n", ",".join(principals), "-V", validity, str(self.host_key_pub_path)]
        _run(argv)
        self.stop_sshd()
        self._extra_sshd_config = "\n".join(
            line
            for line in self._extra_sshd_config.splitlines()
            if not line.startswith("HostCertificate ")
        ) + f"\nHostCertificate {cert}\n"
        self.config_path.write_text(self._sshd_config())
        self.start_sshd()
        return cert

    # ---- shims and commands

    def write_shim(self, name: str, content: str) -> Path:
        """An executable in the shim dir, found before anything else on the host's PATH
        (e.g. a fake ``nvidia-smi``)."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"not a command name: {name!r}")
        path = self.shim_dir / name
        path.write_text(content)
        path.chmod(0o755)
        return path

    def exec(
        self,
        argv: Sequence[str],
        *,
        check: bool = False,
        timeout: float | None = 30.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside this host's network namespace (``ip netns exec``), not over SSH:
        for looking at the host from outside (``pgrep``, ``ss``) without its sshd."""
        return subprocess.run(
            ["ip", "netns", "exec", self.netns, *argv],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
        )

    def spawn(self, argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start a background process in this host's namespace; it is killed and reaped when
        the host is removed (so a test need not, and pytest sees no ResourceWarning)."""
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], **popen_kwargs)
        self._spawned.append(proc)
        return proc

    def pids(self) -> list[int]:
        """Every process in this host's namespace (sshd, sessions, what they started)."""
        return _pids_in_netns([self.netns]).get(self.netns, [])

    def sshd_log_tail(self, lines: int = 30) -> str:
        """The end of sshd's log (stderr of ``sshd -D -e``), for failure messages."""
        return _tail(self.sshd_log_path, lines)

    # ---- sshd

    @property
    def sshd_pid(self) -> int | None:
        """Pid of the listening sshd, None when it is stopped."""
        if self._sshd is None or self._sshd.poll() is not None:
            return None
        return self._sshd.pid

    def start_sshd(self, *, timeout: float = READY_TIMEOUT) -> None:
        """Start this host's sshd and return once it answers on address:port."""
        self._launch_sshd()
        _wait_ready([self], timeout)

    def _launch_sshd(self) -> None:
        if self.sshd_pid is not None:
            return
        # A private mount namespace for sshd and its sessions: tmpfs on /run (sshd's privsep
        # dir must exist; the machine's /run stays as it is), and root's start-up files
        # swapped: the machine's ~/.bashrc runs `pyenv init` (180 ms per command, and it
        # rewrites PATH); ~/.profile would put other dirs before the shim dir in login shells.
        q = shlex.quote
        script = "; ".join(
            [
                "set -e",
                "mount -t tmpfs -o mode=755,size=16m rbk-run /run",
                "mkdir -m 755 /run/sshd",
                ": > /run/utmp",
                f"hostname {q(self.name)}",
                f"if [ -f /root/.bashrc ]; then mount --bind {q(str(self._empty_path))} "
                "/root/.bashrc; fi",
                f"for f in /root/.bash_profile /root/.bash_login /root/.profile; do "
                f"if [ -f $f ]; then mount --bind {q(str(self._profile_path))} $f; fi; done",
                f"exec {q(self.network.sshd)} -D -e -f {q(str(self.config_path))}",
            ]
        )
        argv = [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--mount",
            "--uts",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ]
        with open(self.sshd_log_path, "ab") as log:
            log.write(
                f"# test harness: starting sshd; one 'Connection closed by {self.network.gateway}'"
                " right after 'Server listening' is the harness's readiness probe\n".encode()
            )
            log.flush()
            # own session: a terminal's Ctrl-C must not kill sshd before the teardown runs
            self._sshd = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop_sshd(self, *, kill_sessions: bool = False, timeout: float = 5.0) -> None:
        """Stop the listening sshd (new connections are refused). Open sessions survive, as
        with ``systemctl stop ssh`` on Debian, unless ``kill_sessions`` (a host going down)."""
        proc = self._sshd
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self._sshd = None
        if kill_sessions:
            _kill_netns_processes([self.netns])
            self._reap()

    def _reap(self) -> None:
        for proc in [self._sshd, *self._spawned]:
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(1.0)
        self._spawned = [p for p in self._spawned if p.returncode is None]
        if self._sshd is not None and self._sshd.returncode is not None:
            self._sshd = None


def _wait_ready(hosts: Sequence[TestHost], timeout: float) -> None:
    """Poll every host's address:port from the root namespace until each sshd answers."""
    deadline = time.monotonic() + timeout
    pending = list(hosts)
    while pending:
        for host in list(pending):
            proc = host._sshd
            if proc is None or proc.poll() is not None:
                rc = None if proc is None else proc.returncode
                raise HarnessError(
                    f"sshd of {host.name} exited (rc {rc}) before accepting connections; "
                    f"{host.sshd_log_path}:\n{host.sshd_log_tail()}"
                )
            if _accepts_tcp(host.address, host.port, timeout=0.5):
                pending.remove(host)
        if pending:
            if time.monotonic() > deadline:
                raise HarnessError(
                    f"sshd of {pending[0].name} not accepting on "
                    f"{pending[0].address}:{pending[0].port} after {timeout} s; "
                    f"{pending[0].sshd_log_path}:\n{pending[0].sshd_log_tail()}"
                )
            time.sleep(0.01)


# --------------------------------------------------------------------------------------------
# the network


class HostNetwork:
    """A bridge with test hosts on it; a context manager, usable from pytest or plain scripts.

    ``HostNetwork(workdir)`` builds the bridge at once (and sweeps leftovers of dead runs);
    ``close()`` removes every host, the bridge and the files it made under ``workdir``.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        sshd: str = SSHD,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        problems = missing_prerequisites(sshd)
        if problems:
            raise HarnessError("SSH test hosts cannot run here: " + "; ".join(problems))
        self.sshd = sshd
        self.sshd_version = _sshd_version(sshd)
        #: the process that may tear this network down (see _close_all)
        self.owner_pid = os.getpid()
        self.ready_timeout = ready_timeout
        self._lock = threading.RLock()
        self._hosts: dict[str, TestHost] = {}
        self._next_index = 2
        self._closed = False
        self._token_lock: _FileLock | None = None
        self._bridge_made = False
        self.token = ""
        self.bridge = ""
        self.subnet = ipaddress.IPv4Network("0.0.0.0/32")
        self.gateway = ""
        workdir = Path(workdir)
        _install_signal_handlers()
        _LIVE.append(self)
        try:
            with _global_lock():
                _cleanup_stale_locked()
                self.token, token_lock = self._claim_token()
                self._token_lock = token_lock
                self.dir = workdir / f"rbk-{self.token}"
                # the sweep of a later run reads this to remove our files if we die
                token_lock.write(json.dumps({"pid": os.getpid(), "dir": str(self.dir)}))
                self.bridge = f"rbkbr{self.token}"
                self._make_bridge()
            self.dir.mkdir(parents=True, exist_ok=False)
            (self.dir / "hosts").mkdir()
            self.client_key = self._make_client_key()
            self.known_hosts_path = self.dir / "known_hosts"
            #: ``ssh -F`` file with a ``Host <name>`` entry per host (for ansible, scripts)
            self.ssh_config_path = self.dir / "ssh_config"
            self._write_client_files()
        except BaseException:
            self.close()
            raise

    # ---- setup

    def _claim_token(self) -> tuple[str, _FileLock]:
        """``<pid><letter>``: the pid lets later runs tell leftovers from live hosts; the letter
        lets one process hold several networks."""
        used = {net.token for net in _LIVE if net is not self}
        for letter in "abcdefghijklmnopqrstuvwxyz":
            token = f"{os.getpid()}{letter}"
            if token in used:
                continue
            try:
                return token, _FileLock(LOCK_DIR / f"{token}.lock", blocking=False)
            except BlockingIOError:
                continue
        raise HarnessError("26 host networks already live in this process")

    def _make_bridge(self) -> None:
        self.subnet = self._free_subnet()
        hosts = self.subnet.hosts()
        self.gateway = str(next(hosts))
        probe = str(next(hosts))
        self._bridge_made = True
        _ip_batch(
            [
                f"link add {self.bridge} type bridge",
                f"addr add {self.gateway}/{self.subnet.prefixlen} dev {self.bridge}",
                f"link set {self.bridge} up",
            ]
        )
        self._check_routes([probe])

    def _free_subnet(self) -> ipaddress.IPv4Network:
        """A /24 of the test range that no address or route on this machine overlaps."""
        used: list[ipaddress.IPv4Network] = []
        for entry in json.loads(_run(["ip", "-j", "-4", "addr", "show"]).stdout or "[]"):
            for info in entry.get("addr_info", []):
                used.append(
                    ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False)
                )
        routes = _run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout
        for route in json.loads(routes or "[]"):
            dst = route.get("dst", "default")
            if dst != "default":
                with contextlib.suppress(ValueError):
                    used.append(ipaddress.IPv4Network(dst, strict=False))
        candidates = list(TEST_RANGE.subnets(new_prefix=24))
        start = os.getpid() % len(candidates)
        for subnet in candidates[start:] + candidates[:start]:
            if not any(subnet.overlaps(other) for other in used):
                return subnet
        raise HarnessError(f"no free /24 left in {TEST_RANGE}")

    def _check_routes(self, addresses: Sequence[str]) -> None:
        """Refuse to go on unless each address routes via our own bridge: otherwise the test
        traffic (and root logins) would go somewhere real."""
        out = _run(["ip", "-j", "-b", "-"], input="".join(f"route get {a}\n" for a in addresses))
        for address, line in zip(addresses, out.stdout.splitlines(), strict=False):
            routes = json.loads(line)
            dev = routes[0].get("dev") if routes else None
            if dev != self.bridge:
                raise HarnessError(
                    f"`ip route get {address}` goes via {dev!r}, not the test bridge "
                    f"{self.bridge}; refusing to run test hosts on a range in use"
                )

    def _make_client_key(self) -> ClientKey:
        path = self.dir / "client_ed25519"
        _keygen({path: "rbk-test-client"})
        pub = path.with_name(path.name + ".pub")
        return ClientKey(private_path=path, public_path=pub, public_line=pub.read_text().strip())

    def _write_client_files(self) -> None:
        """known_hosts and ssh_config listing every current host (rewritten on each change)."""
        with self._lock:
            hosts = sorted(self._hosts.values(), key=lambda h: h.index)
            _write_atomic(self.known_hosts_path, "".join(h.host_key_line() + "\n" for h in hosts))
            blocks = [
                f"Host {h.name}\n"
                f"    HostName {h.address}\n"
                f"    Port {h.port}\n"
                "    User root\n"
                f"    IdentityFile {self.client_key.private_path}\n"
                "    IdentitiesOnly yes\n"
                f"    UserKnownHostsFile {self.known_hosts_path}\n"
                "    GlobalKnownHostsFile /dev/null\n"
                "    StrictHostKeyChecking yes\n"
                "    BatchMode yes\n"
                for h in hosts
            ]
            _write_atomic(self.ssh_config_path, "\n".join(blocks))

    # ---- hosts

    @property
    def hosts(self) -> dict[str, TestHost]:
        """The live hosts by name (a copy)."""
        with self._lock:
            return dict(self._hosts)

    def add_host(self, name: str, *, port: int = 22, extra_sshd_config: str = "") -> TestHost:
        """A new host with its own netns, address, hostname ``name`` and sshd; returns once the
        sshd accepts TCP connections. ``extra_sshd_config`` is appended to its sshd_config."""
        return self.add_hosts([name], port=port, extra_sshd_config=extra_sshd_config)[0]

    def add_hosts(
        self, names: Sequence[str], *, port: int = 22, extra_sshd_config: str = ""
    ) -> list[TestHost]:
        """Several hosts at once: namespaces are made in one ``ip`` batch and all sshds start
        before any is waited for, so 100 hosts cost about as much as a few one at a time."""
        with self._lock:
            self._check_open()
            taken = set(self._hosts)
            for name in names:
                if not _HOST_NAME_RE.match(name):
                    raise ValueError(f"bad test host name {name!r} (a-z, 0-9, '-'; 1-32 chars)")
                if name in taken:
                    raise ValueError(f"test host {name!r} already exists")
                taken.add(name)
            used = {h.index for h in self._hosts.values()}
            # addresses are handed out round the range, not lowest-free first: a host made
            # right after one was removed would otherwise get its address while the bridge's
            # neighbour cache still maps it to the old veth's MAC (connects fail until the
            # entry goes stale, ~30 s); teardown flushes the entries too
            span = list(range(2, self.subnet.num_addresses - 1))
            start = span.index(self._next_index) if self._next_index in span else 0
            free = (i for i in span[start:] + span[:start] if i not in used)
            new: list[TestHost] = []
            for name in names:
                index = next(free, None)
                if index is None:
                    raise HarnessError(f"{self.subnet} is full")
                address = str(self.subnet.network_address + index)
                new.append(TestHost(self, name, index, address, port, extra_sshd_config))
            try:
                for host in new:
                    self._hosts[host.name] = host
                    host._write_files()
                _keygen({h.host_key_path: h.key_comment for h in new})
                root_cmds = []
                for host in new:
                    root_cmds += [
                        f"netns add {host.netns}",
                        f"link add {host.veth} type veth peer name eth0 netns {host.netns}",
                        f"link set {host.veth} master {self.bridge} up",
                    ]
                _ip_batch(root_cmds)
                for host in new:
                    _ip_batch(
                        [
                            f"addr add {host.address}/{self.subnet.prefixlen} dev eth0",
                            "link set eth0 up",
                            "link set lo up",
                            f"route add default via {self.gateway}",
                        ],
                        netns=host.netns,
                    )
                self._check_routes([h.address for h in new])
                for host in new:
                    host._launch_sshd()
                _wait_ready(new, self.ready_timeout)
                self._write_client_files()
                if new:  # a failed add gives its addresses back
                    self._next_index = new[-1].index + 1
            except BaseException as exc:
                try:
                    self._teardown(new)
                except Exception as cleanup:
                    raise HarnessError(f"{exc}; and cleaning up after it: {cleanup}") from exc
                raise
            return new

    def unused_address(self) -> str:
        """An address on the test bridge that no host holds (taken from the top of the range,
        away from where add_host allocates): connecting to it times out without any packet
        leaving this machine, for "host unreachable" tests."""
        with self._lock:
            used = {h.index for h in self._hosts.values()}
            for index in range(self.subnet.num_addresses - 2, 1, -1):
                if index not in used:
                    return str(self.subnet.network_address + index)
        raise HarnessError(f"{self.subnet} is full")

    def remove_host(self, host: TestHost) -> None:
        """Kill everything in the host's namespace, delete the namespace, its veth and its
        files. Calling it again (or for a host of a closed network) does nothing."""
        with self._lock:
            if self._hosts.get(host.name) is not host:
                return
            self._teardown([host])
            if not self._closed:
                self._write_client_files()

    def _teardown(self, hosts: Sequence[TestHost]) -> None:
        """Teardown order matters (a live session pins the netns): kill sshds, kill every
        process left in the namespaces, delete veths and namespaces, then the files."""
        for host in hosts:
            if host._sshd is not None and host._sshd.poll() is None:
                host._sshd.kill()
        _kill_netns_processes([h.netns for h in hosts])
        for host in hosts:
            host._reap()
        left = _delete_netns_and_links([h.netns for h in hosts], [h.veth for h in hosts])
        if self._bridge_made and _link_exists(self.bridge):
            _ip_batch([f"neigh flush to {h.address} dev {self.bridge}" for h in hosts],
                      check=False)
        for host in hosts:
            if self._hosts.get(host.name) is host:
                del self._hosts[host.name]
            shutil.rmtree(host.dir, ignore_errors=True)
        if left:
            raise HarnessError(f"could not remove {left}")

    # ---- clients

    def ssh_argv(
        self, host: TestHost, command: str | None = None, *, options: Sequence[str] = ()
    ) -> list[str]:
        """argv for the OpenSSH client to run ``command`` on ``host`` as root, trusting only
        this network's known_hosts and key (``-F /dev/null``: the user's ssh config must not
        change what a test or benchmark measures). ``options`` come first, so they override
        the defaults here (ssh keeps the first value it sees for each option)."""
        argv = [
            "ssh", "-F", "/dev/null",
            *options,
            "-i", str(self.client_key.private_path),
            "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts_path}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=10",
            "-p", str(host.port),
            "--",  # ssh parses options again after the destination unless told not to
            f"root@{host.address}",
        ]  # fmt: skip
        if command is not None:
            argv.append(command)
        return argv

    def paramiko_client(
        self, host: TestHost, *, known_hosts: Path | None = None, timeout: float = 10.0
    ) -> paramiko.SSHClient:
        """A connected paramiko client (client-key auth) that trusts only ``known_hosts``
        (default: the network's) and rejects unknown keys."""
        import paramiko

        client = paramiko.SSHClient()
        client.load_host_keys(str(known_hosts or self.known_hosts_path))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                host.address,
                port=host.port,
                username="root",
                key_filename=str(self.client_key.private_path),
                allow_agent=False,
                look_for_keys=False,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
            )
        except BaseException:
            client.close()
            raise
        return client

    # ---- lifetime

    def _check_open(self) -> None:
        if self._closed:
            raise HarnessError(f"host network {self.bridge} is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Remove every host, the bridge, the workdir files and the lock. Idempotent; safe to
        re-enter from a signal handler (each step tolerates what is already gone)."""
        with self._lock:
            if self._closed:
                return
            errors: list[str] = []
            try:
                self._teardown(list(self._hosts.values()))
            except Exception as exc:
                errors.append(str(exc))
            if self._bridge_made:
                left = _delete_netns_and_links([], [self.bridge])
                if left:
                    errors.append(f"could not remove bridge {self.bridge}")
                self._bridge_made = False
            if getattr(self, "dir", None) is not None and self.dir.is_dir():
                shutil.rmtree(self.dir, ignore_errors=True)
            self._closed = True
            if self in _LIVE:
                _LIVE.remove(self)
            if self._token_lock is not None:
                # a failed teardown keeps the lock file: the next run's sweep finds it then
                self._token_lock.release(unlink=not errors)
            if errors:
                raise HarnessError("; ".join(errors))

    def __enter__(self) -> HostNetwork:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._hosts)} hosts"
        return f"HostNetwork({self.bridge}, {self.subnet}, {state})"


__all__ = [
    "LOCK_DIR",
    "STANDARD_PATH",
    "TEST_RANGE",
    "ClientKey",
    "HarnessError",
    "HostNetwork",
    "TestHost",
    "cleanup_stale",
    "missing_prerequisites",
]
