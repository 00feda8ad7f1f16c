"""Fixtures of the desk's tests: a real OpenID Connect provider (tests/desk/oidc_provider.py)
and the real `runbook desk serve` (uvicorn) on 127.0.0.1, each in its own process, stopped at
the end; the approval store is real SQLite under the test's directory.

* ``oidc_provider`` (module): the provider's base URL;
* ``desk_factory`` (function): ``desk_factory(config_extra=..., env=...)`` starts a desk and
  returns a :class:`DeskServer` (its URL, config, store and a client that speaks to it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.conftest import cli_env

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(
    url: str, proc: subprocess.Popen[Any], what: str, timeout: float = 30.0, verify: Any = True
) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise RuntimeError(f"{what} exited {proc.returncode}: {err[-2000:]}")
        try:
            if httpx.get(url, timeout=1.0, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer {url} in {timeout} s")


def _started(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> list[tuple[int, str]]:
    """Every process below `pid` with its start time (found by parent in /proc/*/stat):
    ansible-runner starts a playbook in a session of its own, so a signal to the desk's
    process group would not reach it."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents.setdefault(int(fields[1]), []).append((int(stat.parent.name), fields[19]))
    found: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def _stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL after 10 s; whatever the desk started (a playbook an approval
    was running) is killed too, so no test leaves a process behind."""
    below = descendants(proc.pid) if proc.poll() is None else []
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            below = sorted(set(below) | set(descendants(proc.pid)))
            proc.kill()
            proc.wait(5)
    for pid, started in below:
        if _started(pid) == started:  # the same process, not a later one given its number
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


@contextlib.contextmanager
def running_oidc_provider() -> Iterator[str]:
    """The provider (tests/desk/oidc_provider.py) in its own process; its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "oidc_provider.py"), str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url + "/.well-known/openid-configuration", proc, "the OIDC provider")
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def oidc_provider() -> Iterator[str]:
    with running_oidc_provider() as url:
        yield url


ALLOW = [
    {"groups": ["gpu-oncall"], "kinds": ["*"]},
    {"groups": ["sre-readers"]},  # may read, not decide
]


@dataclass
class DeskServer:
    url: str
    root: Path
    config: Path
    env: dict[str, str]
    proc: subprocess.Popen[Any]
    verify: Any = True
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def db(self) -> Path:
        return self.root / "state" / "approvals.db"

    def client(self, **kwargs: Any) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=30.0, verify=self.verify, **kwargs)
        self.clients.append(client)  # closed when the server stops
        return client

    def log(self) -> str:
        return Path(self.root / "desk.log").read_text(errors="replace")[-4000:]


def start_desk(
    root: Path,
    desk: dict[str, Any],
    *,
    insecure: bool = True,
    args: tuple[str, ...] = (),
    scheme: str = "http",
    verify: Any = True,
    sections: dict[str, Any] | None = None,
    env_extra: dict[str, str] | None = None,
) -> DeskServer:
    """`runbook desk serve` in its own process, its state and config under `root` (`sections`:
    more of the config than its desk section; `env_extra`: more of its environment); returns
    once it answers /healthz."""
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    url = f"{scheme}://127.0.0.1:{port}"
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump({"desk": {"base_url": url, **desk}, **(sections or {})}))
    env = {**cli_env(root), **(env_extra or {})}
    env.pop("AUTHLIB_INSECURE_TRANSPORT", None)
    argv = [sys.executable, "-m", "runbook", "desk", "serve", "--listen", f"127.0.0.1:{port}",
            "--config", str(config), *(["--insecure-http"] if insecure else []), *args]  # fmt: skip
    with (root / "desk.log").open("w") as log:  # the server process holds its own copy
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL)  # fmt: skip
    server = DeskServer(url, root, config, env, proc, verify=verify)
    try:
        _wait(url + "/healthz", proc, "the desk", verify=verify)
    except RuntimeError as exc:
        stop_desk(server)
        raise RuntimeError(f"{exc}\n{server.log()}") from None
    return server


def stop_desk(server: DeskServer) -> None:
    for client in server.clients:
        client.close()
    _stop(server.proc)


@pytest.fixture
def desk_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[DeskServer] = []

    def start(desk: dict[str, Any], **kwargs: Any) -> DeskServer:
        server = start_desk(tmp_path / f"desk-{len(started)}", desk, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        stop_desk(server)


def oidc_desk(provider: str, **more: Any) -> dict[str, Any]:
    return {"oidc": {"issuer": provider, "client_id": "runbook-desk", "client_secret": "s3cret"},
            "allow": ALLOW, **more}  # fmt: skip


@pytest.fixture
def sign_in() -> Any:
    """``sign_in(server, "alice")``: an httpx client signed in through the provider's form."""

    def run(server: DeskServer, sub: str) -> httpx.Client:
        client = server.client(follow_redirects=False)
        start = client.get("/login/start")
        assert start.status_code == 302, start.text
        at_provider = start.headers["location"]
        form = httpx.post(at_provider, data={"sub": sub}, follow_redirects=False, timeout=30)
        assert form.status_code in (302, 303), form.text[:500]
        back = client.get(form.headers["location"])
        assert back.status_code == 303, back.text[:2000]
        return client

    return run


os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
