"""A real OpenID Connect provider for the desk's tests: oidc-provider-mock (a Flask app, from
PyPI) served on 127.0.0.1, with predefined people and their groups.

    python tests/desk/oidc_provider.py PORT

It issues real signed ID tokens through the authorization code flow (its sign-in page asks
for the subject, or offers the predefined ones as buttons). It accepts the client's PKCE
parameters but does not check the verifier: that PKCE is sent is asserted on the desk's side.
"""

from __future__ import annotations

import sys
import warnings

warnings.simplefilter("ignore")  # Authlib's own deprecation warnings, inside the provider

import werkzeug.serving  # noqa: E402
from oidc_provider_mock import User, app  # noqa: E402

PEOPLE = [
    User(sub="alice", claims={"email": "alice@example.org", "groups": ["gpu-oncall"]}),
    User(sub="bob", claims={"email": "bob@example.org", "groups": ["gpu-oncall"]}),
    User(sub="carol", claims={"email": "carol@example.org", "groups": ["sre-readers"]}),
    User(sub="mallory", claims={"email": "mallory@example.org", "groups": ["contractors"]}),
]


def main() -> None:
    port = int(sys.argv[1])
    provider = app(user_claims=PEOPLE)
    provider.debug = False
    # the package wraps itself in Werkzeug's interactive debugger: not in front of a test
    provider.wsgi_app = getattr(provider.wsgi_app, "app", provider.wsgi_app)  # type: ignore[method-assign]
    server = werkzeug.serving.make_server("127.0.0.1", port, provider, threaded=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
