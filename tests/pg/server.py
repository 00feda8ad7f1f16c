"""A private PostgreSQL 15 server for the tests: a cluster made with initdb in a temp dir,
run as the `postgres` user on a free port of 127.0.0.1 and a socket directory of its own,
stopped and removed afterwards. Never the machine's own server.

Logins: `postgres` is trusted (the tests' superuser); the role `runbook_pw` must give its
password over TCP (scram-sha-256), for the tests of a password in the URL.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

BIN = Path(os.environ.get("RUNBOOK_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: the role that must log in with a password, and its password
PASSWORD_ROLE = "runbook_pw"
PASSWORD = "s3cret-Tr0ub4dor-" + uuid.uuid4().hex[:8]

_HBA = f"""\
local all all trust
host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


class ServerMissing(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        user="postgres",
        group="postgres",
        check=True,
        capture_output=True,
        text=True,
        cwd="/",
        timeout=120,
        **kw,  # type: ignore[arg-type]
    )


@dataclass
class PgServer:
    root: Path
    port: int

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(
        self, dbname: str = "postgres", user: str = "postgres", password: str | None = None
    ) -> str:
        auth = f"{user}:{password}" if password else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh, empty database; its name."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
            conn.execute(f'GRANT ALL ON DATABASE "{name}" TO {PASSWORD_ROLE}')
        with psycopg.connect(self.url(name), autocommit=True) as conn:
            conn.execute(f"GRANT ALL ON SCHEMA public TO {PASSWORD_ROLE}")
        return name

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            try:
                _as_postgres(
                    [str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]
                )
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def start() -> PgServer:
    """initdb, then pg_ctl start; a ServerMissing naming what is missing."""
    for tool in ("initdb", "pg_ctl"):
        if not (BIN / tool).exists():
            raise ServerMissing(
                f"{BIN / tool} not found: the PostgreSQL tests need Debian's postgresql (15) "
                "installed (tests/run.sh installs it: apt-get install -y postgresql)"
            )
    try:
        pwd.getpwnam("postgres")
        grp.getgrnam("postgres")
    except KeyError as exc:
        raise ServerMissing("no `postgres` user: install Debian's postgresql") from exc
    root = Path(tempfile.mkdtemp(prefix="rbk-pg-"))
    os.chmod(root, 0o755)
    shutil.chown(root, "postgres", "postgres")
    server = PgServer(root, _free_port())
    try:
        _as_postgres(
            [
                str(BIN / "initdb"),
                "-D",
                str(server.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]
        )
        (server.data / "pg_hba.conf").write_text(_HBA)
        _as_postgres(
            [
                str(BIN / "pg_ctl"),
                "-D",
                str(server.data),
                "-w",
                "-t",
                "60",
                "-l",
                str(root / "server.log"),
                "-o",
                f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c max_connections=200 -c shared_buffers=16MB",
                "start",
            ]
        )
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'")
    except BaseException as exc:
        log = root / "server.log"
        detail = log.read_text()[-2000:] if log.exists() else ""
        if isinstance(exc, subprocess.CalledProcessError):
            detail = (exc.stderr or "") + detail
        server.stop()
        raise RuntimeError(f"the test PostgreSQL server did not start: {detail}") from exc
    return server
