"""The two-person rule (runbook.remedies.two_person), pure: who may run a disruptive kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runbook.config import load
from runbook.errors import UsageError
from runbook.remedies.two_person import Policy, check, names, stated

DRAIN = Policy()


@dataclass
class P:
    kind: str = "node-drain"
    requested_by: str | None = "alice"
    approvals: list[str] = field(default_factory=list)


def test_the_person_who_queued_a_drain_cannot_run_it_alone() -> None:
    assert check(P(), "alice", DRAIN) == "a node drain needs a second person: you queued it"
    # nor through a shared account whose alias or user is theirs
    assert check(P(requested_by="root as alice"), "alice", DRAIN) is not None
    assert check(P(requested_by="root as alice"), "root", DRAIN) is not None


def test_another_person_runs_it_with_one_approval_and_after_the_requesters_approval() -> None:
    assert check(P(), "bob", DRAIN) is None
    assert check(P(approvals=["alice"]), "bob", DRAIN) is None
    # the requester approving after bob's approval: two people have approved
    assert check(P(approvals=["bob"]), "alice", DRAIN) is None


def test_with_nobody_known_to_have_queued_it_two_people_must_approve() -> None:
    unknown = P(requested_by=None)
    assert check(unknown, "alice", DRAIN) == "one more approval needed"
    assert check(P(requested_by=None, approvals=["alice"]), "alice", DRAIN) == (
        "one more approval needed"
    )
    assert check(P(requested_by=None, approvals=["alice"]), "bob", DRAIN) is None


def test_kinds_outside_the_policy_need_one_approval_and_the_policy_comes_from_config(
    tmp_path: Path,
) -> None:
    assert check(P(kind="shm-size-limit"), "alice", DRAIN) is None
    config = tmp_path / "c.yaml"
    config.write_text("two_person:\n  kinds: [node-drain, shm-size-limit]\n")
    policy = Policy.from_config(load(config))
    assert check(P(kind="shm-size-limit"), "alice", policy) == (
        "a shm-size-limit needs a second person: you queued it"
    )
    assert Policy.from_config(load(tmp_path / "c.yaml")).kinds == ("node-drain", "shm-size-limit")
    config.write_text("two_person:\n  kinds: drain\n")
    with pytest.raises(UsageError, match=r"two_person\.kinds"):
        load(config)
    assert stated("node-drain", DRAIN) and stated("shm-size-limit", DRAIN) is None


def test_an_actor_record_names_every_name_it_carries() -> None:
    assert names("root as alice") == {"root", "alice"}
    assert names("alice") == {"alice"} and names(None) == set()
