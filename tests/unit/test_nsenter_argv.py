"""The nsenter and kubectl-exec wrappers are pure argv builders, tested alone."""

from __future__ import annotations

import shlex

import pytest

from runbook.errors import UsageError
from runbook.transports.nsenter import (
    kubectl_exec_argv,
    nsenter_argv,
    nsenter_command,
    parse_kubectl_target,
)


def test_nsenter_enters_all_five_namespaces_of_pid_1_by_default() -> None:
    assert nsenter_argv("dmesg -T") == [
        "nsenter", "--target", "1", "--mount", "--uts", "--ipc", "--net", "--pid", "--",
        "/bin/sh", "-c", "dmesg -T",
    ]  # fmt: skip


def test_the_nsenter_shell_line_keeps_the_command_one_word() -> None:
    line = nsenter_command("cat '/x y'; echo $(id)", pid=4242)
    assert shlex.split(line)[-1] == "cat '/x y'; echo $(id)"
    assert shlex.split(line)[2] == "4242"


def test_a_bad_pid_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        nsenter_argv("true", 0)


def test_kubectl_exec_goes_through_nsenter_into_the_host() -> None:
    argv = kubectl_exec_argv("kube-system", "node-agent-x", "ls /dev/infiniband", context="prod")
    assert argv[:7] == ["kubectl", "--context", "prod", "exec", "-n", "kube-system", "node-agent-x"]
    assert argv[7] == "--" and argv[8] == "nsenter" and argv[-1] == "ls /dev/infiniband"


@pytest.mark.parametrize("text", ["ns", "ns/", "/pod", "a/b/c", ""])
def test_a_malformed_kubectl_target_is_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_kubectl_target(text)
