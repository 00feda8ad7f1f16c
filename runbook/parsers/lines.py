"""Launcher and log-pipeline prefixes, removed in a loop so a rank's own text is read whatever
stack of them it arrived behind.

Each layer that carries a training job's output adds its own tag before the line:

    kubectl logs --timestamps    2025-05-03T08:14:02.551908112Z <line>
    CRI log file (containerd)    2025-05-03T08:14:02.551908112Z stderr F <line>
    kubectl logs --prefix        [pod/trainer-0/pytorch] <line>
    torchrun --tee / log_dir     [default3]:<line>
    PyTorch >= 2.4 rank tag      [rank5]:<line>
    Open MPI --tag-output        [1,3]<stderr>:<line>
    srun --label                 3: <line>
    DeepSpeed/pdsh               host-3: <line>
    Ray                          (pid=1234) <line>, (RayTrainWorker pid=1234, ip=10.0.0.5) <line>
    docker compose               trainer-1  | <line>

(A job run as a systemd unit logs through journald; `journalctl -u UNIT` lines are read behind
their `Mar 04 10:12:07 host python[4711]: ` prefix by the app-log reader, which knows the year.)

`strip(line)` peels them off outermost first and keeps what they said: the rank (from the
innermost tag that names one — never guessed from a host or pod name), the host, the pid,
and the time a timestamp prefix gave. Numbers are bounded (a 5,000-digit rank tag is text, not
a rank). Pure; no library does this for log lines, hence this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runbook.parsers._common import iso

#: at most this many prefixes are removed from one line (a hostile line cannot loop for long)
MAX_DEPTH = 12

_TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d)"
_CRI = re.compile(rf"^(?P<t>{_TS}) (?:stdout|stderr) [FP] ")
_KTS = re.compile(rf"^(?P<t>{_TS}) ")
_KPREFIX = re.compile(r"^\[pod/[^\s/\]]{1,253}/[^\s\]]{1,253}\] ")
_DEFAULT = re.compile(r"^\[default(?P<r>\d{1,6})\]: ?")
_RANK = re.compile(r"^\[[Rr]ank ?(?P<r>\d{1,6})\]: ?")
_MPI = re.compile(r"^\[\d{1,6},(?P<r>\d{1,6})\]<(?:stdout|stderr)>: ?")
_SRUN = re.compile(r"^(?P<r>\d{1,6}): ")
_RAY = re.compile(
    r"^\((?:(?P<actor>[\w.:-]{1,100}) )?pid=(?P<pid>\d{1,9})(?:, ip=[0-9a-fA-F.:]{1,45})?\) "
)
#: a host name: lower case, at least one digit or dash (so `error: `, `warnings: ` and
#: `RuntimeError: ` are never taken for one), or `localhost`
_HOST = re.compile(
    r"^(?!\d{4}-\d\d-\d\d: )"  # a date is not a host
    r"(?P<h>(?=[a-z0-9.-]*[0-9-])[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9-]{1,63}){0,8}"
    r"|localhost): "
)
_COMPOSE = re.compile(r"^(?P<h>[\w.-]{1,100}?)\s+\| ")


@dataclass(frozen=True)
class Stripped:
    """A line without its prefixes, and what they said."""

    text: str
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    #: ISO time a timestamp prefix (kubectl --timestamps, CRI) gave
    time: str | None = None
    #: the prefixes removed, outermost first (their kinds: `cri`, `rank`, `host`, …)
    layers: tuple[str, ...] = ()


#: every prefix, in the order they are tried at each depth; a pattern's named groups say what
#: it knows: `t` a time, `r` a rank, `pid` a process id, `h` a host
_LAYERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cri", _CRI),
    ("kubectl-timestamps", _KTS),
    ("kubectl-prefix", _KPREFIX),
    ("default", _DEFAULT),
    ("rank", _RANK),
    ("mpi", _MPI),
    ("ray", _RAY),
    ("srun-label", _SRUN),
    ("host", _HOST),
    ("compose", _COMPOSE),
)


def strip(line: str) -> Stripped:
    """Remove every known prefix from `line` (see the module docstring): the outermost time
    counts, and the innermost rank, pid and host (a compose service names the host only when
    no host tag does)."""
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    time: str | None = None
    layers: list[str] = []
    text = line
    for _ in range(MAX_DEPTH):
        found = next(((name, m) for name, p in _LAYERS if (m := p.match(text))), None)
        if found is None:
            break
        layer, match = found
        said = match.groupdict()
        if said.get("t"):
            time = time or iso(said["t"])
        if said.get("r"):
            rank = int(said["r"])
        if said.get("pid"):
            pid = int(said["pid"])
        if said.get("h"):
            host = said["h"] if layer == "host" else (host or said["h"])
        layers.append(layer)
        text = text[match.end() :]
    return Stripped(text, rank, host, pid, time, tuple(layers))
