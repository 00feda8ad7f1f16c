"""The desk's settings (the config's desk: section) are validated in full before anything
listens, each problem one line naming its key; and who may decide what follows the rules."""

from __future__ import annotations

from typing import Any

import pytest

from runbook.desk.policy import Identity, Policy, Rule
from runbook.desk.settings import load, parse_listen
from runbook.errors import UsageError

OIDC = {"issuer": "https://idp.example.org", "client_id": "desk"}
ALLOW = [{"groups": ["oncall"], "kinds": ["*"]}]


def settings(**desk: Any) -> Any:
    return load({"oidc": OIDC, "allow": ALLOW, **desk}, source="c.yaml",
                base_url="https://desk.example.org")  # fmt: skip


@pytest.mark.parametrize(
    ("desk", "said"),
    [
        ({"oidc": None}, "no sign-in configured"),
        ({"allow": []}, "desk.allow: no rule"),
        ({"allow": [{"kinds": ["*"]}]}, "allow[0]: names nobody"),
        ({"allow": [{"users": ["a"], "severities": ["urgent"]}]}, "'urgent' is not one of"),
        ({"allow": [{"users": ["a"], "kind": ["*"]}]}, "unknown key 'kind'"),
        ({"oidc": {"issuer": "http://idp", "client_id": "d"}}, "only with --insecure-http"),
        ({"oidc": {"issuer": "https://idp"}}, "oidc.client_id"),
        ({"trusted_header": {"user": "X-Email"}}, "trusted_header.proxies: name"),
        ({"trusted_header": {"proxies": ["proxy.local"]}}, "'proxy.local' is not an address"),
        ({"session_idle": "soon"}, "desk.session_idle"),
        ({"colour": "blue"}, "unknown key 'colour'"),
    ],
)
def test_a_bad_desk_section_is_one_line_naming_its_key(desk: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError) as caught:
        settings(**desk)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("config c.yaml: desk")


def test_listen_takes_an_address_and_a_port_only() -> None:
    assert parse_listen("127.0.0.1:8443") == ("127.0.0.1", 8443)
    assert parse_listen("[::1]:8443") == ("::1", 8443)
    for bad in ("8443", "desk.example.org:8443", "127.0.0.1:99999", "127.0.0.1:"):
        with pytest.raises(UsageError):
            parse_listen(bad)


def test_rules_give_kinds_and_severities_to_users_and_groups_and_a_rule_without_kinds_reads() -> (
    None
):
    policy = Policy((
        Rule(groups=("oncall",), kinds=("*",), severities=("warning", "info")),
        Rule(users=("lead@example.org",), kinds=("node-drain",)),
        Rule(groups=("sre",)),
    ))  # fmt: skip
    oncall = Identity("a@example.org", ("oncall",))
    lead = Identity("lead@example.org")
    reader = Identity("r@example.org", ("sre",))
    stranger = Identity("x@example.org", ("contractors",))
    assert policy.may_decide(oncall, "shm-size-limit", "shm-exhausted")  # warning
    assert not policy.may_decide(oncall, "node-drain", "gpu-hardware")  # critical
    assert policy.may_decide(lead, "node-drain", "gpu-hardware")
    assert not policy.may_decide(lead, "shm-size-limit", "shm-exhausted")
    assert policy.may_enter(reader) and not policy.may_decide(reader, "shm-size-limit", None)
    assert not policy.may_enter(stranger)
    why = policy.why_not(oncall, "node-drain", "gpu-hardware")
    assert why is not None and "severity critical" in why
