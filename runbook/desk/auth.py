"""Who is at the desk: OpenID Connect (authorization code with PKCE, through Authlib), or the
identity an authenticating proxy (oauth2-proxy) puts in a header — taken only from the
proxy addresses the config names; the same header from anywhere else is ignored.

There is no anonymous access and no password of the desk's own. A signed-in identity that
no `desk.allow` rule names is refused at the door. Starting a sign-in and coming back from
the provider are rate-limited per client address.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

from runbook.desk.policy import Identity

if TYPE_CHECKING:
    from starlette.requests import Request

    from runbook.desk.settings import OIDC, DeskSettings, TrustedHeader

log = logging.getLogger(__name__)


def oidc_client(oidc: OIDC) -> Any:
    """The Authlib client of the provider (its metadata fetched on the first sign-in)."""
    with warnings.catch_warnings():
        # Authlib 1.x warns, when its httpx client is first loaded, that the integration will
        # move to another package: not ours to fix, and not the operator's to read. Its module
        # of warnings puts an "always" filter first when imported: ours goes in after it
        from authlib.deprecate import AuthlibDeprecationWarning

        warnings.simplefilter("ignore", AuthlibDeprecationWarning)
        from authlib.integrations.starlette_client import OAuth

        oauth = OAuth()
        return oauth.register(
            name="desk",
            client_id=oidc.client_id,
            client_secret=oidc.client_secret,
            server_metadata_url=oidc.metadata_url,
            client_kwargs={"scope": " ".join(oidc.scopes), "code_challenge_method": "S256"},
        )


def oauth_error() -> type[Exception]:
    with warnings.catch_warnings():
        from authlib.deprecate import AuthlibDeprecationWarning

        warnings.simplefilter("ignore", AuthlibDeprecationWarning)
        from authlib.integrations.base_client import OAuthError

    error: type[Exception] = OAuthError
    return error


def identity_from_claims(claims: dict[str, Any], oidc: OIDC) -> Identity | None:
    """The person the ID token (or userinfo) names: the configured claim, else `sub`."""
    name = claims.get(oidc.user_claim) or claims.get("sub")
    if not isinstance(name, str) or not name.strip():
        return None
    groups = claims.get(oidc.groups_claim) or []
    if isinstance(groups, str):
        groups = [g for g in groups.replace(",", " ").split() if g]
    if not isinstance(groups, list):
        groups = []
    return Identity(name.strip(), tuple(str(g) for g in groups), "oidc")


def peer(request: Request) -> str | None:
    return request.client.host if request.client else None


def client_address(request: Request, settings: DeskSettings) -> str:
    """The client's address for the rate limit: the peer, or — behind a trusted proxy — the
    address the proxy says it forwarded for."""
    address = peer(request) or "?"
    header = settings.header
    if header is not None and header.trusts(address):
        forwarded = request.headers.get("x-forwarded-for", "").split(",")[0].strip()
        return forwarded or address
    return address


def header_identity(request: Request, header: TrustedHeader | None) -> Identity | None:
    """The proxy's header identity, only when the request comes from a trusted proxy."""
    if header is None:
        return None
    name = request.headers.get(header.user, "").strip()
    if not name:
        return None
    if not header.trusts(peer(request)):
        log.warning("ignored %s from %s: not a configured proxy", header.user, peer(request))
        return None
    groups = [g.strip() for g in request.headers.get(header.groups, "").split(",") if g.strip()]
    return Identity(name, tuple(groups), "header")
