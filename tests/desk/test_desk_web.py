"""The desk as a web application, through the real `runbook desk serve` (uvicorn) on
127.0.0.1, signed in through a real OpenID Connect provider run locally (oidc-provider-mock):
no page without sign-in, PKCE on the way out, cookies and headers that keep the pages safe,
CSRF on every POST, a proxy's header believed only from the proxy, a rate-limited sign-in,
sessions that end, evidence that stays text."""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.desk.conftest import oidc_desk
from tests.desk.queueing import HOSTILE, enqueue


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:2000]
    return found.group(1)


def test_every_page_needs_sign_in_and_sign_in_sends_pkce_s256(
    desk_factory: Any, oidc_provider: str
) -> None:
    server = desk_factory(oidc_desk(oidc_provider))
    pid = enqueue(server.db)
    with server.client() as client:
        for path in ("/queue", f"/p/{pid}", "/audit"):
            page = client.get(path)
            assert page.status_code == 303 and page.headers["location"].startswith("/login"), path
        refused = client.post(f"/p/{pid}/approve", data={"csrf": "x"})
        assert refused.status_code == 403
        start = client.get("/login/start")
    query = parse_qs(urlsplit(start.headers["location"]).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert query["response_type"] == ["code"] and "openid" in query["scope"][0].split()
    cookie = start.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie.replace("Lax", "lax")


def test_a_signed_in_page_carries_the_security_headers_and_evidence_stays_text(
    desk_factory: Any, oidc_provider: str, sign_in: Any
) -> None:
    server = desk_factory(oidc_desk(oidc_provider))
    pid = enqueue(server.db, text=HOSTILE)
    client = sign_in(server, "alice")
    page = client.get(f"/p/{pid}")
    assert page.status_code == 200, page.text[:2000]
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "script-src" not in csp
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    assert "<script" not in page.text and "<img" not in page.text
    assert 'href="javascript:' not in page.text
    assert "&lt;script&gt;document.title=&#34;owned&#34;&lt;/script&gt;" in page.text
    assert "[click me](javascript:alert(1))" in page.text  # Markdown is not rendered either


def test_a_post_without_its_sessions_csrf_token_or_from_another_origin_is_refused(
    desk_factory: Any, oidc_provider: str, sign_in: Any
) -> None:
    server = desk_factory(oidc_desk(oidc_provider))
    pid = enqueue(server.db)
    client = sign_in(server, "alice")
    token = csrf_of(client.get(f"/p/{pid}").text)
    assert client.post(f"/p/{pid}/deny", data={"reason": "no"}).status_code == 403
    assert client.post(f"/p/{pid}/deny", data={"reason": "no", "csrf": "forged"}).status_code == 403
    other = client.post(f"/p/{pid}/deny", data={"reason": "no", "csrf": token},
                        headers={"Origin": "http://127.0.0.1:1"})  # fmt: skip
    assert other.status_code == 403 and "another origin" in other.text
    # another person's token does not work in this session either
    bob = sign_in(server, "bob")
    assert client.post(f"/p/{pid}/deny", data={"reason": "no",
                       "csrf": csrf_of(bob.get(f"/p/{pid}").text)}).status_code == 403  # fmt: skip
    assert "pending" in client.get(f"/p/{pid}").text
    done = client.post(f"/p/{pid}/deny", data={"reason": "not now", "csrf": token})
    assert done.status_code == 303
    page = client.get(f"/p/{pid}").text
    assert "denied" in page and "not now" in page and "as alice@example.org" in page


def test_a_person_no_rule_names_is_refused_and_a_reader_cannot_decide(
    desk_factory: Any, oidc_provider: str, sign_in: Any
) -> None:
    server = desk_factory(oidc_desk(oidc_provider))
    pid = enqueue(server.db)
    client = server.client(follow_redirects=False)
    start = client.get("/login/start")
    form = httpx.post(start.headers["location"], data={"sub": "mallory"}, follow_redirects=False)
    back = client.get(form.headers["location"])
    assert back.status_code == 403 and "not allowed on this desk" in back.text
    assert client.get("/queue").status_code == 303
    carol = sign_in(server, "carol")
    page = carol.get(f"/p/{pid}").text
    assert 'id="approve"' not in page and "may not decide" in page
    refused = carol.post(f"/p/{pid}/deny", data={"reason": "x", "csrf": csrf_of(page)})
    assert refused.status_code == 409 and "may not decide" in refused.text
    checked = carol.post(f"/p/{pid}/preview", data={"csrf": csrf_of(page)})
    assert checked.status_code == 403 and "may not decide" in checked.text


def test_sign_in_attempts_are_rate_limited_per_client(
    desk_factory: Any, oidc_provider: str
) -> None:
    server = desk_factory(oidc_desk(oidc_provider, login_attempts=3))
    with server.client() as client:
        codes = [client.get("/login/start").status_code for _ in range(5)]
    assert codes == [302, 302, 302, 429, 429]


def test_a_session_ends_after_its_idle_time(
    desk_factory: Any, oidc_provider: str, sign_in: Any
) -> None:
    server = desk_factory(oidc_desk(oidc_provider, session_idle="4s"))
    client = sign_in(server, "alice")
    assert client.get("/queue").status_code == 200
    time.sleep(4.5)
    ended = client.get("/queue")
    assert ended.status_code == 303 and ended.headers["location"] == "/login?expired=1"


def test_the_proxy_header_is_believed_only_from_a_configured_proxy_address(
    desk_factory: Any,
) -> None:
    allow = [{"users": ["alice@example.org"], "kinds": ["*"]}]
    trusting = desk_factory({"trusted_header": {"proxies": ["127.0.0.1/32"]}, "allow": allow})
    headers = {"X-Forwarded-Email": "alice@example.org"}
    with trusting.client(headers=headers) as client:
        page = client.get("/queue")
        assert page.status_code == 200 and "alice@example.org" in page.text
    other = desk_factory({"trusted_header": {"proxies": ["10.99.0.0/24"]}, "allow": allow})
    with other.client(headers=headers) as client:
        assert client.get("/queue").status_code == 303


def test_serve_refuses_bad_input_in_one_line_with_exit_2(tmp_path: Any) -> None:
    import subprocess
    import sys

    from tests.integration.conftest import cli_env

    env = cli_env(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("desk: {allow: [{users: [a]}]}\n")
    cases = [
        (["--listen", "nowhere"], "expected HOST:PORT"),
        (["--cert", str(config)], "--cert and --key go together"),
        (["--listen", "0.0.0.0:8443", "--insecure-http"], "only on a loopback address"),
        ([], "no sign-in configured"),
    ]
    for args, said in cases:
        done = subprocess.run([sys.executable, "-m", "runbook", "desk", "serve", "--config",
                               str(config), *args], capture_output=True, text=True, env=env,
                              timeout=60, check=False)  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_with_cert_and_key_it_serves_https_with_secure_host_cookies_and_hsts(
    desk_factory: Any, tmp_path: Any
) -> None:
    import ssl
    import subprocess

    cert, key = tmp_path / "desk.crt", tmp_path / "desk.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    trust = ssl.create_default_context(cafile=str(cert))
    desk = {"trusted_header": {"proxies": ["127.0.0.1/32"]},
            "allow": [{"users": ["alice@example.org"], "kinds": ["*"]}]}  # fmt: skip
    server = desk_factory(desk, insecure=False, scheme="https", verify=trust,
                          args=("--cert", str(cert), "--key", str(key)))  # fmt: skip
    with server.client(headers={"X-Forwarded-Email": "alice@example.org"}) as client:
        page = client.get("/queue")
    assert page.status_code == 200 and "alice@example.org" in page.text
    cookie = page.headers["set-cookie"]
    assert cookie.startswith("__Host-rbk_desk=") and "Secure" in cookie and "HttpOnly" in cookie
    assert page.headers["strict-transport-security"].startswith("max-age=")
    with httpx.Client() as plain:  # plain HTTP to the TLS port
        try:
            answered = plain.get(server.url.replace("https://", "http://") + "/healthz").status_code
        except httpx.HTTPError:
            answered = None
    assert answered != 200


def test_signing_out_ends_the_session_on_the_server_not_only_in_the_browser(
    desk_factory: Any, oidc_provider: str, sign_in: Any
) -> None:
    server = desk_factory(oidc_desk(oidc_provider))
    client = sign_in(server, "alice")
    held = dict(client.cookies)
    token = csrf_of(client.get("/queue").text)
    out = client.post("/logout", data={"csrf": token})
    assert out.status_code == 303 and out.headers["location"] == "/login"
    with server.client(cookies=held) as replayed:  # the cookie a thief kept
        assert replayed.get("/queue").status_code == 303


def test_the_desk_serves_a_queue_shared_in_postgresql(desk_factory: Any, pg_url: str) -> None:
    from runbook import config as config_mod
    from runbook.remedies.store import Store

    allow = [{"users": ["alice@example.org"], "kinds": ["*"]}]
    server = desk_factory({"trusted_header": {"proxies": ["127.0.0.1/32"]}, "allow": allow},
                          args=("--db", pg_url))  # fmt: skip
    db = config_mod.load(None, db=pg_url).db
    pid = enqueue(db)
    with server.client(headers={"X-Forwarded-Email": "alice@example.org"}) as client:
        assert pid in client.get("/queue").text
        token = csrf_of(client.get(f"/p/{pid}").text)
        assert (
            client.post(f"/p/{pid}/deny", data={"reason": "freeze", "csrf": token}).status_code
            == 303
        )
        audit = client.get("/audit").text
    with Store(db) as store:
        denied = store.get(pid)
    assert denied.state == "denied" and denied.reason == "freeze"
    assert denied.decided_by is not None and denied.decided_by.endswith(" as alice@example.org")
    assert "audit chain intact" in audit and "denied" in audit


def test_the_queue_has_tabs_filters_and_pages_from_the_database(desk_factory: Any) -> None:
    allow = [{"users": ["alice@example.org"], "kinds": ["*"]}]
    server = desk_factory({"trusted_header": {"proxies": ["127.0.0.1/32"]}, "allow": allow,
                           "page_size": 20})  # fmt: skip
    for n in range(45):
        enqueue(server.db, node=f"gpu-node-{n % 3}", n=n)
    stale = [enqueue(server.db, node="gpu-node-9", n=100 + n, ttl=0.01) for n in range(2)]
    drain = enqueue(server.db, kind="node-drain", node="gpu-node-5", n=200)
    time.sleep(0.05)
    with server.client(headers={"X-Forwarded-Email": "alice@example.org"}) as client:
        first = client.get("/queue").text
        assert "46 pending proposals · page 1 of 3" in first
        assert first.count('class="item ') == 20 and 'rel="next"' in first
        last = client.get("/queue?page=3").text
        assert last.count('class="item ') == 6 and 'rel="prev"' in last and 'rel="next"' not in last
        assert re.search(r"proposed \d+ s ago ·\s+expires in (59|60) min", first), first[-3000:]
        expired = client.get("/queue?tab=expired").text
        assert "2 expired proposals" in expired and all(p in expired for p in stale)
        assert re.search(r"expired \d+ s ago", expired)
        by_node = client.get("/queue?node=gpu-node-1").text
        assert "15 pending proposals" in by_node
        by_kind = client.get("/queue?kind=node-drain").text
        assert "1 pending proposal" in by_kind and drain in by_kind
        token = csrf_of(first)
        client.post(f"/p/{drain}/deny", data={"reason": "no", "csrf": token})
        decided = client.get("/queue?tab=decided").text
        assert "1 decided proposal" in decided and drain in decided and "denied by" in decided


def test_a_callback_whose_state_is_not_this_browsers_sign_in_is_refused(
    desk_factory: Any, oidc_provider: str
) -> None:
    server = desk_factory(oidc_desk(oidc_provider))
    with server.client() as client:
        client.get("/login/start")
        forged = client.get("/login/callback", params={"code": "stolen", "state": "forged"})
        assert forged.status_code == 400 and "sign-in failed" in forged.text
        assert client.get("/queue").status_code == 303
    with server.client() as stranger:  # no sign-in started in this browser
        assert (
            stranger.get("/login/callback", params={"code": "c", "state": "s"}).status_code == 400
        )


def test_the_proxys_groups_header_is_what_the_allow_rules_match(desk_factory: Any) -> None:
    server = desk_factory({"trusted_header": {"proxies": ["127.0.0.1/32"]},
                           "allow": [{"groups": ["gpu-oncall"], "kinds": ["*"]}]})  # fmt: skip
    member = {"X-Forwarded-Email": "a@example.org", "X-Forwarded-Groups": "staff, gpu-oncall"}
    with server.client(headers=member) as client:
        assert client.get("/queue").status_code == 200
    outsider = {"X-Forwarded-Email": "b@example.org", "X-Forwarded-Groups": "staff"}
    with server.client(headers=outsider) as client:
        refused = client.get("/queue")
        assert refused.status_code == 403 and "not allowed on this desk" in refused.text


def test_sigterm_stops_the_desk_cleanly_and_its_log_holds_no_warning(
    desk_factory: Any, oidc_provider: str
) -> None:
    import signal

    server = desk_factory(oidc_desk(oidc_provider))
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(20) == 0
    log = server.log()
    assert "desk: stopped" in log and "Warning" not in log and "Traceback" not in log, log
