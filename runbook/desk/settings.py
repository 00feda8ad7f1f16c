"""The desk's settings: the config's `desk:` section and the `desk serve` flags, validated in
full before anything listens (pure but for reading the environment's secret).

::

    desk:
      base_url: https://desk.example.org       # the address people open (OIDC redirects)
      session_ttl: 8h                          # a sign-in lasts at most this long
      session_idle: 30m                        # ... and ends after this long unused
      login_attempts: 10                       # sign-ins started per client and minute
      publish_interval: 30s                    # the queue's metrics and pages published
      shutdown_wait: 10m                       # on SIGTERM/^C: how long running approvals
                                               # may take to finish (a second signal: now)
      oidc:
        issuer: https://idp.example.org/realms/ops   # its /.well-known/openid-configuration
        client_id: runbook-desk
        client_secret: …                       # or $RUNBOOK_DESK_OIDC_SECRET (preferred)
        scopes: [openid, email, profile, groups]
        user_claim: email                      # the claim that names the person
        groups_claim: groups
      trusted_header:                          # oauth2-proxy in front: taken only from these
        proxies: [127.0.0.1/32, 10.8.0.0/24]
        user: X-Forwarded-Email
        groups: X-Forwarded-Groups
      allow:                                   # who may approve or deny what
        - groups: [gpu-oncall]
          kinds: ['*']
          severities: [warning, info]          # critical, warning, info
        - users: [lead@example.org]
          kinds: [node-drain]
        - groups: [sre]                        # no kinds: may read the desk, not decide

The two-person rule is the config's top-level `two_person.kinds` (runbook.remedies.two_person),
the same for the desk and the command line.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbook.config import parse_duration
from runbook.desk.policy import SEVERITIES, Policy, Rule
from runbook.errors import UsageError

SECRET_ENV = "RUNBOOK_DESK_OIDC_SECRET"  # noqa: S105 (a variable name)


@dataclass(frozen=True)
class OIDC:
    issuer: str
    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    scopes: tuple[str, ...] = ("openid", "email", "profile")
    user_claim: str = "email"
    groups_claim: str = "groups"

    @property
    def metadata_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"


@dataclass(frozen=True)
class TrustedHeader:
    proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    user: str = "X-Forwarded-Email"
    groups: str = "X-Forwarded-Groups"

    def trusts(self, address: str | None) -> bool:
        if not address:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self.proxies)


@dataclass(frozen=True)
class DeskSettings:
    base_url: str
    policy: Policy
    oidc: OIDC | None = None
    header: TrustedHeader | None = None
    session_ttl: float = 8 * 3600.0
    session_idle: float = 30 * 60.0
    login_attempts: int = 10
    #: cookies without `Secure`: only for plain HTTP on the loopback (tests, a laptop)
    insecure_http: bool = False
    page_size: int = 50
    #: seconds between two passes of the desk's publisher (runbook.desk.publisher)
    publish_interval: float = 30.0
    #: on SIGTERM/^C, how long the approvals running may take to finish before it stops
    shutdown_wait: float = 600.0


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: expected a list of names")
    return tuple(value)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping")
    return value


def _rules(raw: Any, where: str) -> tuple[Rule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UsageError(f"{where}: expected a list of rules (users/groups → kinds, severities)")
    rules = []
    for n, item in enumerate(raw):
        at = f"{where}[{n}]"
        item = _mapping(item, at)
        unknown = set(item) - {"users", "groups", "kinds", "severities"}
        if unknown:
            raise UsageError(f"{at}: unknown key {sorted(unknown)[0]!r}")
        rule = Rule(
            users=_strings(item.get("users"), f"{at}.users"),
            groups=_strings(item.get("groups"), f"{at}.groups"),
            kinds=_strings(item.get("kinds"), f"{at}.kinds"),
            severities=_strings(item.get("severities", ["*"]), f"{at}.severities"),
        )
        if not rule.users and not rule.groups:
            raise UsageError(f"{at}: names nobody (give users: or groups:)")
        bad = [s for s in rule.severities if s != "*" and s not in SEVERITIES]
        if bad:
            raise UsageError(f"{at}.severities: {bad[0]!r} is not one of {', '.join(SEVERITIES)}")
        rules.append(rule)
    return tuple(rules)


def _oidc(raw: Mapping[str, Any], where: str) -> OIDC | None:
    if not raw:
        return None
    issuer, client = raw.get("issuer"), raw.get("client_id")
    if not isinstance(issuer, str) or not issuer.startswith(("https://", "http://")):
        raise UsageError(f"{where}.issuer: expected the provider's https:// URL")
    if not isinstance(client, str) or not client:
        raise UsageError(f"{where}.client_id: expected the client id registered at the provider")
    secret = os.environ.get(SECRET_ENV) or raw.get("client_secret")
    scopes = _strings(raw.get("scopes"), f"{where}.scopes") or OIDC.scopes
    if "openid" not in scopes:
        raise UsageError(f"{where}.scopes: must include openid")
    return OIDC(
        issuer=issuer,
        client_id=client,
        client_secret=str(secret) if secret else None,
        scopes=scopes,
        user_claim=str(raw.get("user_claim") or "email"),
        groups_claim=str(raw.get("groups_claim") or "groups"),
    )


def _header(raw: Mapping[str, Any], where: str) -> TrustedHeader | None:
    if not raw:
        return None
    proxies = _strings(raw.get("proxies"), f"{where}.proxies")
    if not proxies:
        raise UsageError(f"{where}.proxies: name the proxy addresses the header is taken from")
    nets = []
    for text in proxies:
        try:
            nets.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise UsageError(f"{where}.proxies: {text!r} is not an address or network") from None
    return TrustedHeader(
        proxies=tuple(nets),
        user=str(raw.get("user") or "X-Forwarded-Email"),
        groups=str(raw.get("groups") or "X-Forwarded-Groups"),
    )


def load(
    raw: Mapping[str, Any], *, source: str, base_url: str | None, insecure_http: bool = False
) -> DeskSettings:
    """The desk's settings from the config's `desk:` section (`source` names the file in
    errors); `base_url` defaults to the listening address. UsageError naming the key."""
    where = f"config {source}: desk"
    known = {
        "base_url",
        "session_ttl",
        "session_idle",
        "login_attempts",
        "oidc",
        "trusted_header",
        "allow",
        "page_size",
        "publish_interval",
        "shutdown_wait",
    }
    unknown = set(raw) - known
    if unknown:
        raise UsageError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    oidc = _oidc(_mapping(raw.get("oidc"), f"{where}.oidc"), f"{where}.oidc")
    if oidc is not None and oidc.issuer.startswith("http://") and not insecure_http:
        raise UsageError(f"{where}.oidc.issuer: plain http:// only with --insecure-http (a test)")
    header = _header(
        _mapping(raw.get("trusted_header"), f"{where}.trusted_header"), f"{where}.trusted_header"
    )
    if oidc is None and header is None:
        raise UsageError(
            f"{where}: no sign-in configured: set desk.oidc (OpenID Connect) or "
            "desk.trusted_header (an authenticating proxy such as oauth2-proxy); "
            "the desk has no anonymous access and no shared password"
        )
    rules = _rules(raw.get("allow"), f"{where}.allow")
    if not rules:
        raise UsageError(f"{where}.allow: no rule: nobody could use the desk")
    url = str(raw.get("base_url") or os.environ.get("RUNBOOK_DESK_URL") or base_url or "")
    if not url.startswith(("https://", "http://")):
        raise UsageError(f"{where}.base_url: expected the desk's http(s):// address")
    try:
        attempts = int(raw.get("login_attempts", 10))
        page_size = int(raw.get("page_size", 50))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None
    if attempts < 1 or not 1 <= page_size <= 500:
        raise UsageError(f"{where}: login_attempts must be >= 1 and page_size in 1..500")
    return DeskSettings(
        base_url=url.rstrip("/"),
        policy=Policy(rules=rules),
        oidc=oidc,
        header=header,
        session_ttl=parse_duration(raw.get("session_ttl", "8h"), what=f"{where}.session_ttl"),
        session_idle=parse_duration(raw.get("session_idle", "30m"), what=f"{where}.session_idle"),
        login_attempts=attempts,
        insecure_http=insecure_http,
        page_size=page_size,
        publish_interval=parse_duration(
            raw.get("publish_interval", "30s"), what=f"{where}.publish_interval"
        ),
        shutdown_wait=parse_duration(
            raw.get("shutdown_wait", "10m"), what=f"{where}.shutdown_wait"
        ),
    )


def parse_listen(text: str) -> tuple[str, int]:
    """`127.0.0.1:8443`, `[::1]:8443` → (host, port); UsageError otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8443")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise UsageError(f"--listen {text!r}: expected an IP address (or localhost)") from None
    return host, int(port)


def is_loopback(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def names(items: Sequence[str]) -> str:
    return ", ".join(items)
