"""Did a command run at all? The exit statuses and words by which a shell, `env`, `timeout` or
the CUDA runtime say it could not — so that a tool's absence is reported as such ("all_reduce_perf
not found on gpu-node-01"), never read as a result.

Pure: a command's output and exit status in, the reason it did not run (or None) out. Used by
the A/B comparison (runbook.remedies.ab) and the recovery check (runbook.verify.check).
"""

from __future__ import annotations

import re

#: exit statuses of a command that did not run: the shell's and env's "not found" and "cannot
#: execute", and coreutils `timeout`'s own (124: it stopped the command; 137: its -k KILL)
NOT_FOUND = 127
CANNOT_EXECUTE = 126
TIMED_OUT = 124
KILLED = 137

#: the program a "not found" / "cannot execute" message names: GNU env and timeout (in any
#: quoting locale), busybox, nsenter, sh (dash: `sh: 1: X: not found`) and bash
_NAMED = re.compile(
    r"(?:can't execute |failed to (?:run command|execute) )?[‘'`\"]?(?P<name>[^\s‘’'`\":]+)"
    r"[’'`\"]?:\s*(?:No such file or directory|not found|command not found|Permission denied)"
)
#: nccl-tests and the CUDA runtime when the node has no GPU it can use
_NO_GPU = re.compile(
    r"no CUDA-capable device is detected|CUDA driver version is insufficient|"
    r"cudaErrorNoDevice|cudaErrorInsufficientDriver|CUDA driver is a stub library|"
    r"NVIDIA driver (?:is not loaded|on your system is too old)|found no NVIDIA driver"
)


#: what kubectl adds to a remote command's stderr after it exits non-zero (not the reason)
_KUBECTL_EXIT = re.compile(r"^command terminated with exit code \d+$")


def own_reason(stderr: str) -> str | None:
    """For a command that exited 127: the reason it gave itself (a runbook's probe that knows
    it cannot run, `echo 'no pod given (--var pod=NAME)' >&2; exit 127`; a probe's `X: not
    installed`), or None when its stderr is a shell's or env's "not found" message or empty.
    The first such line, at most 200 characters; a bundle's `runbook: …` notes about the
    read (runbook.bundle) are not the command's words."""
    lines = [
        line.strip()
        for line in stderr.splitlines()[:20]
        if line.strip() and not line.startswith("runbook: ")
    ]
    if any(_NAMED.search(line) for line in lines):
        return None
    said = [line for line in lines if not _KUBECTL_EXIT.match(line)]
    return said[0][:200] if said else None


def program_of(command: str, default: str) -> str:
    """The program a command line runs, by its base name (the last word: a wrapper such as
    `nsenter … --` comes first)."""
    words = command.split()
    return words[-1].rsplit("/", 1)[-1] if words else default


def named(output: str, fallback: str) -> str:
    """The program a "not found" message in the first lines of `output` names, or `fallback`."""
    for line in output.splitlines()[:20]:
        m = _NAMED.search(line)
        if m:
            return m.group("name").rsplit("/", 1)[-1]
    return fallback


def no_gpu(output: str) -> str | None:
    """The words by which the CUDA runtime said there is no GPU to use, or None."""
    m = _NO_GPU.search(output)
    return m.group(0) if m else None


def reason(
    output: str,
    rc: int | None,
    *,
    node: str,
    program: str,
    timeouts: bool = True,
    empty: bool = True,
) -> str | None:
    """Why `program` measured nothing on `node`, or None when it ran: not found (127), not
    executable (126), stopped by the time limit (124, 137: with `timeouts`), no usable GPU, or
    (with `empty`) nothing printed at all."""
    if rc == NOT_FOUND:
        return f"{named(output, program)} not found on {node}"
    if rc == CANNOT_EXECUTE:
        return f"{named(output, program)} cannot be executed on {node} (exit 126)"
    if timeouts and rc == TIMED_OUT:
        return f"{program} timed out on {node} (exit 124: stopped by the time limit)"
    if timeouts and rc == KILLED:
        return f"{program} was killed on {node} (exit 137: the time limit's KILL, or out of memory)"
    gpu = no_gpu(output)
    if gpu:
        return f"no usable GPU on {node} ({program}: {gpu})"
    if empty and not output.strip():
        status = "no exit status" if rc is None else f"exit {rc}"
        return f"{program} printed nothing on {node} ({status})"
    return None
