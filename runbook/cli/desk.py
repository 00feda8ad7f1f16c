"""`runbook desk serve`: the approval queue on a web page, with sign-in (runbook/desk;
docs/desk.md). Registered by runbook/cli/app.py through `COMMANDS`.

Exit codes: 0 stopped (^C, SIGTERM) once the approvals running had finished; 1 stopped by a
second signal (or desk.shutdown_wait) while an approval still ran: it stays `running` in the
store, for `runbook approvals recover`; 2 usage: a bad flag or desk section of the config, a
store that does not open, a certificate that does not load, a port taken.
"""

from __future__ import annotations

from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from runbook.errors import UsageError

if TYPE_CHECKING:
    from runbook.config import Config
    from runbook.desk.settings import DeskSettings


@click.group()
def desk() -> None:
    """The approval desk: the queue on a web page, where on-call signs in and decides."""


@desk.command("serve")
@click.option(
    "--db", metavar="PATH|postgresql://…", help="Approval store to serve (default from the config)."
)
@click.option(
    "--listen",
    default="127.0.0.1:8443",
    show_default=True,
    metavar="HOST:PORT",
    help="Address to listen on.",
)
@click.option("--cert", type=click.Path(dir_okay=False), help="TLS certificate (PEM); with --key.")
@click.option("--key", type=click.Path(dir_okay=False), help="TLS private key (PEM); with --cert.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    help="Configuration file (its desk: section: sign-in, who may approve what).",
)
@click.option(
    "--insecure-http",
    is_flag=True,
    help="Plain HTTP with cookies not marked Secure: for a loopback address only "
    "(a test, a laptop). Without --cert, TLS is otherwise the proxy's job and "
    "desk.base_url must be https://.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    db: str | None,
    listen: str,
    cert: str | None,
    key: str | None,
    config_file: str | None,
    insecure_http: bool,
) -> None:
    """Serve the approval queue over HTTPS (--cert/--key) or behind a TLS-terminating proxy.

    People sign in with OpenID Connect (desk.oidc) or through an authenticating proxy's
    header taken only from its addresses (desk.trusted_header); the config's desk.allow says
    who may approve or deny which kinds and severities. Approving on a page runs what
    `runbook approvals approve ID` runs, once.
    """
    from runbook import config as config_mod
    from runbook.cli.options import load_config
    from runbook.desk import settings as settings_mod

    host, port = settings_mod.parse_listen(listen)
    if bool(cert) != bool(key):
        raise UsageError("--cert and --key go together: give both, or neither")
    for flag, path in (("--cert", cert), ("--key", key)):
        if path and not Path(path).is_file():
            raise UsageError(f"{flag} {path}: no such file")
    if insecure_http and cert:
        raise UsageError("--insecure-http and --cert: choose one")
    if insecure_http and not settings_mod.is_loopback(host):
        raise UsageError(
            f"--insecure-http serves plain HTTP: only on a loopback address, not {host}"
        )
    if config_file:
        cfg = config_mod.load(Path(config_file), db=db)
    else:
        cfg = load_config(ctx, db=db)
    scheme = "https" if cert else "http"
    shown_host = f"[{host}]" if ":" in host else host
    desk_settings = settings_mod.load(
        cfg.desk,
        source=str(cfg.source or config_file or "(none)"),
        base_url=f"{scheme}://{shown_host}:{port}",
        insecure_http=insecure_http,
    )
    if not cert and not insecure_http and not desk_settings.base_url.startswith("https://"):
        raise UsageError(
            f"desk.base_url {desk_settings.base_url}: without --cert/--key the desk serves plain "
            "HTTP, for a proxy that terminates TLS: set desk.base_url to the proxy's https:// "
            "address (or give --cert and --key; --insecure-http for a loopback test)"
        )
    if insecure_http and desk_settings.oidc and desk_settings.oidc.issuer.startswith("http://"):
        import os

        # Authlib refuses a provider over plain HTTP unless told: a loopback test's provider
        os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"
    where = _preflight(cfg, cert, key)
    _serve(cfg, desk_settings, where, host, port, cert, key)


def _preflight(cfg: Config, cert: str | None, key: str | None) -> str:
    """The store opens and the certificate loads, before anything listens; the store as it
    may be shown (a PostgreSQL URL without its password)."""
    import ssl

    from runbook.remedies.approval import Desk

    with Desk(cfg, readonly=True) as reader:
        reader.store.count(None)
        where = str(getattr(reader.store, "where", cfg.db))
    if cert and key:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--cert {cert} / --key {key}: {exc}") from None
    return where


def _serve(
    cfg: Config,
    desk_settings: DeskSettings,
    where: str,
    host: str,
    port: int,
    cert: str | None,
    key: str | None,
) -> None:
    import socket

    import uvicorn

    from runbook.desk.app import build

    app = build(cfg, desk_settings)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"--listen {host}:{port}: {exc.strerror or exc}") from None
    scheme = "https" if cert else "http"
    click.echo(
        f"desk: serving {where} on {scheme}://{host}:{port} (open {desk_settings.base_url})",
        err=True,
    )
    state = app.state.desk

    class Server(uvicorn.Server):
        """The first SIGTERM or ^C: no new decision, the running approvals waited for (the
        app's lifespan); the second: stop now, whatever runs."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.should_exit:
                click.echo("desk: second signal: stopping now", err=True)
                state.runs.abandon()
            else:
                state.runs.close()
            super().handle_exit(sig, frame)

    server = Server(
        uvicorn.Config(
            app,
            ssl_certfile=cert,
            ssl_keyfile=key,
            log_level="warning",
            # X-Forwarded-For is read by the desk itself, and only from its trusted proxies
            proxy_headers=False,
            server_header=False,
            access_log=False,
            # connections still open this long after a stop is asked are closed
            timeout_graceful_shutdown=30,
        )
    )
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn hands SIGTERM/^C back once it has shut down
        pass
    left = state.runs.running()
    if left:
        click.echo(
            "desk: stopped; left running: " + ", ".join(f"{r.what} {r.pid}" for r in left), err=True
        )
        raise SystemExit(1)
    click.echo("desk: stopped", err=True)


COMMANDS = [desk]
