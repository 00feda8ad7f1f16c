"""The user's ssh config read as OpenSSH reads it, with the real `ssh -G` as the oracle:
`Include` (paths relative to ~/.ssh, globs in order, nested, depth-limited) and
`StrictHostKeyChecking true`/`false` as `yes`/`no`. Nothing connects."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runbook.errors import UsageError
from runbook.transports import ssh_config


def _ssh_g(config: Path, name: str, home: Path) -> dict[str, str]:
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), name], capture_output=True, text=True, check=True,
        timeout=10, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "config.d").mkdir(parents=True)
    return tmp_path


def test_included_files_say_what_ssh_reads_from_them(home: Path) -> None:
    dot = home / ".ssh"
    (dot / "config.d" / "10-gpu").write_text(
        "Host gpu-*\n    Port 24510\n    User ops\n    StrictHostKeyChecking yes\n"
    )
    (dot / "config.d" / "20-more").write_text("Include deeper\n")
    (dot / "deeper").write_text("Host gpu-node-01\n    HostName 10.9.8.7\n")
    config = dot / "config"
    config.write_text("Include config.d/*\nUser fallback\n")
    for name in ("gpu-node-01", "cpu-1"):
        found = ssh_config.host_config(ssh_config.load(config), name)
        oracle = _ssh_g(config, name, home)
        assert found.hostname == oracle["hostname"], name
        assert str(found.port or 22) == oracle["port"], name
        assert (found.user or "") == oracle["user"], name
    gpu = ssh_config.host_config(ssh_config.load(config), "gpu-node-01")
    assert (gpu.hostname, gpu.port, gpu.user, gpu.strict) == ("10.9.8.7", 24510, "ops", "yes")
    # a line after the Include applies to every host again, as in ssh
    assert ssh_config.host_config(ssh_config.load(config), "cpu-1").user == "fallback"


def test_an_included_strict_host_key_checking_yes_refuses_new_keys(home: Path) -> None:
    """The security point of Include: a stricter setting in an included file is not lost."""
    dot = home / ".ssh"
    (dot / "config.d" / "strict").write_text("Host *\n    StrictHostKeyChecking yes\n")
    config = dot / "config"
    config.write_text("Include ~/.ssh/config.d/strict\n")
    given = ssh_config.Given(accept_new_host_keys=True)
    _, options = ssh_config.resolve("gpu-node-01", ssh_config.load(config), given)
    assert options.accept_new_host_keys is False


@pytest.mark.parametrize(("value", "expected"), [("true", "yes"), ("false", "no"), ("True", "yes")])
def test_true_and_false_are_yes_and_no(home: Path, value: str, expected: str) -> None:
    config = home / ".ssh" / "config"
    config.write_text(f"Host *\n    StrictHostKeyChecking {value}\n")
    assert ssh_config.host_config(ssh_config.load(config), "n").strict == expected
    assert _ssh_g(config, "n", home)["stricthostkeychecking"] in (expected, "true", "false")


def test_true_refuses_new_host_keys_even_with_the_flag(home: Path) -> None:
    config = home / ".ssh" / "config"
    config.write_text("Host *\n    StrictHostKeyChecking true\n")
    _, options = ssh_config.resolve(
        "n", ssh_config.load(config), ssh_config.Given(accept_new_host_keys=True)
    )
    assert options.accept_new_host_keys is False


def test_an_include_inside_a_host_block_is_one_line_refusal(home: Path) -> None:
    config = home / ".ssh" / "config"
    config.write_text("Host bastion-*\n    Include config.d/*\n")
    with pytest.raises(UsageError, match="Include inside a Host or Match block"):
        ssh_config.load(config)


def test_includes_deeper_than_sixteen_are_refused(home: Path) -> None:
    dot = home / ".ssh"
    (dot / "loop").write_text("Include loop\n")
    config = dot / "config"
    config.write_text("Include loop\n")
    with pytest.raises(UsageError, match="nested deeper than 16"):
        ssh_config.load(config)
