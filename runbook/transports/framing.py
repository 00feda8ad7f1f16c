"""Multi-file probes (`app/*.log`): their output framed by a token the files cannot know, and
read on the node without following a link or waiting on a FIFO.

Why: such a probe reads files a job writes. Cut apart on `tail -v` headers, a log holding a
line `==> /var/log/train/rank-0.log <==` became another rank's evidence, and one holding
`==> rank-1.log.rc <==` rewrote a file's exit status. Here every file starts and ends with a
line carrying the walk's token (`\\n__RBK_FILE_<token> file rank-0.log`, then
`\\n__RBK_FILE_<token> end 0`), and only those lines cut the output: text in a file cannot
start, end or rename a file without the token.

The token never appears in a command line or an environment: the probe reads it as the first
line of its standard input (every transport gives it there: transports/base.Probe.secret), so
`ps` on the node shows it to nobody. The probe's command starts with PRELUDE, which reads the
token and defines three shell functions the runbook's commands use:

* `rbk_tail LINES DIR PATTERN...` — each file of DIR matching a PATTERN (a glob, no blanks),
  its last LINES lines (or `all`: the file from its start). Only regular files are read; a
  link, FIFO, socket, device or directory is not opened and is reported instead
  (`skip link rank-8.log`), as is a name with a control character. The file is opened by `dd
  iflag=nofollow,nonblock` (O_NOFOLLOW|O_NONBLOCK), so a file swapped for a link after the
  check is refused rather than followed, and a FIFO swapped in reads as empty rather than
  holding the probe; at most WINDOW_BYTES of each file are read.
* `rbk_file NAME` / `rbk_end STATUS` — frame output a command makes itself (the processes of a
  cgroup, the runs of a test).

The parsing here is pure: `parse(stdout, token)` gives the records; runbook/bundle.py makes
them one result per file.
"""

from __future__ import annotations

import fnmatch
import re
import secrets
from dataclasses import dataclass, field, replace

from runbook.transports.base import Probe

#: the start of every frame line; the walk's token follows it
MARK = "__RBK_FILE_"
#: what a token is: 32 lower-case hex digits (from secrets.token_hex(16))
_TOKEN = re.compile(r"[0-9a-f]{32}")
#: most bytes read of one file (the end of the file for a number of lines, its start for `all`):
#: a probe's output is kept up to this bound anyway (transports/base.MAX_CAPTURE_BYTES)
WINDOW_BYTES = 16 * 1024 * 1024
#: files one pattern reads at most (as a bundle is read: bundle.MAX_MULTI_FILES)
MAX_FILES = 1024

#: why a file was not read, by the word the node says
SKIPPED = {
    "link": "a symbolic link (not followed)",
    "fifo": "a FIFO (not opened)",
    "socket": "a socket (not opened)",
    "device": "a device (not opened)",
    "directory": "a directory",
    "other": "not a regular file",
    "name": "its name holds a control character",
    "unreadable": "not readable",
}

_BLOCK = 65536
_BLOCKS = WINDOW_BYTES // _BLOCK

#: the shell that frames a multi-file probe's output (POSIX sh: dash, bash, busybox ash), then
#: the probe's own command. GNU dd is needed for the O_NOFOLLOW|O_NONBLOCK open; without it the
#: probe says so and exits 126, never reads a file by following its links.
PRELUDE = f"""\
IFS= read -r rbk_m || rbk_m=
case $rbk_m in ''|*[!0-9a-f]*) echo 'runbook: no frame token on standard input' >&2; exit 125;; esac
rbk_m={MARK}$rbk_m
rbk_file() {{ printf '\\n%s file %s\\n' "$rbk_m" "$1"; }}
rbk_end() {{ printf '\\n%s end %s\\n' "$rbk_m" "$1"; }}
rbk_skip() {{ printf '\\n%s skip %s %s\\n' "$rbk_m" "$1" "$2"; }}
rbk_tail() {{
  [ -n "$rbk_dd" ] || dd if=/dev/null iflag=nofollow,nonblock count=0 status=none 2>/dev/null || {{
    echo 'runbook: this dd cannot open a file without following a link (GNU dd needed)' >&2
    exit 126
  }}
  rbk_dd=1; rbk_n=$1; rbk_d=$2; shift 2
  for rbk_p in "$@"; do
    rbk_c=0; rbk_big=
    # the files past the window, in one look (a file's own size is asked only for those)
    [ "$rbk_n" = all ] || rbk_big=$(find "$rbk_d/" -maxdepth 1 -name "$rbk_p" -type f \
      -size +{WINDOW_BYTES // (1024 * 1024)}M -printf ' %f ' 2>/dev/null)
    for rbk_f in "$rbk_d"/$rbk_p; do
      rbk_b=${{rbk_f##*/}}
      if [ -L "$rbk_f" ]; then rbk_w=link
      elif [ -f "$rbk_f" ]; then rbk_w=
      elif [ ! -e "$rbk_f" ]; then continue
      elif [ -d "$rbk_f" ]; then rbk_w=directory
      elif [ -p "$rbk_f" ]; then rbk_w=fifo
      elif [ -S "$rbk_f" ]; then rbk_w=socket
      elif [ -b "$rbk_f" ] || [ -c "$rbk_f" ]; then rbk_w=device
      else rbk_w=other; fi
      rbk_c=$((rbk_c + 1))
      if [ "$rbk_c" -gt {MAX_FILES} ]; then printf '\\n%s more %s\\n' "$rbk_m" "$rbk_p"; break; fi
      case $rbk_b in
        *[[:cntrl:]]*) rbk_b=$(printf '%s' "$rbk_b" | tr '[:cntrl:]' '?'); rbk_w=name;;
      esac
      [ -n "$rbk_w" ] || [ -r "$rbk_f" ] || rbk_w=unreadable
      if [ -n "$rbk_w" ]; then rbk_skip "$rbk_w" "$rbk_b"; continue; fi
      rbk_file "$rbk_b"
      if [ "$rbk_n" = all ]; then
        dd if="$rbk_f" iflag=nofollow,nonblock bs={_BLOCK} count={_BLOCKS} status=none
      else
        rbk_s=0
        case $rbk_big in *" $rbk_b "*) rbk_s=$(stat -c %s -- "$rbk_f" 2>/dev/null) || rbk_s=0;; esac
        rbk_s=$((rbk_s > {WINDOW_BYTES} ? rbk_s - {WINDOW_BYTES} : 0))
        dd if="$rbk_f" iflag=nofollow,nonblock,skip_bytes skip="$rbk_s" bs={_BLOCK} \
          count={_BLOCKS} status=none | tail -n "$rbk_n"
      fi
      rbk_end $?
    done
  done
}}
"""


def new_token() -> str:
    """A walk's frame token."""
    return secrets.token_hex(16)


def is_multi(name: str) -> bool:
    """A probe whose name holds `*` collects several files (`app/*.log`)."""
    return "*" in name


def fnmatch_name(name: str, pattern: str) -> bool:
    """Whether a file's name matches the last part of a multi-file probe's name (`*.log`)."""
    return fnmatch.fnmatchcase(name, pattern)


def script(command: str) -> str:
    """The command a multi-file probe runs: PRELUDE, then the runbook's command."""
    return PRELUDE + command


def prepare(probe: Probe, token: str) -> Probe:
    """`probe` as a transport runs it: a multi-file probe framed (its command after PRELUDE,
    `token` its secret); any other probe as it is."""
    if not is_multi(probe.name):
        return probe
    if not _TOKEN.fullmatch(token):
        raise ValueError("a frame token is 32 lower-case hex digits")
    return replace(probe, command=script(probe.command), secret=token)


@dataclass(frozen=True)
class Record:
    """One frame of the output: a file read (`kind` "file", its `text`, and the `status` its
    reader ended with, None when its end never came: the output was cut there), or a file not
    read (`kind` "skip", `reason` a key of SKIPPED), or more files than were read ("more",
    `name` the pattern)."""

    kind: str
    name: str
    text: str = ""
    status: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class Framed:
    records: list[Record] = field(default_factory=list)
    #: characters outside any file (a login's words, anything a command printed between files)
    outside: int = 0


def parse(stdout: str, token: str) -> Framed:
    """The frames of `stdout`, cut only on lines that carry `token`."""
    if not _TOKEN.fullmatch(token):
        return Framed(outside=len(stdout.strip()))
    needle = f"\n{MARK}{token} "
    text = "\n" + stdout  # the first frame line may open the output
    at = text.find(needle)
    outside = len(text[: at if at >= 0 else len(text)].strip())
    # (head, body) of each frame line: the line after the mark, and the text up to the next
    segments: list[tuple[str, str]] = []
    while at >= 0:
        line_end = text.find("\n", at + len(needle))
        if line_end < 0:
            break  # the output ended inside a frame line
        following = text.find(needle, line_end)
        body_end = following if following >= 0 else len(text)
        segments.append((text[at + len(needle) : line_end], text[line_end + 1 : body_end]))
        at = following
    records: list[Record] = []
    index = 0
    while index < len(segments):
        head, body = segments[index]
        index += 1
        kind, _, rest = head.partition(" ")
        if kind == "file" and rest:
            status = _end_status(segments[index][0]) if index < len(segments) else None
            records.append(Record("file", rest, body, status))
            if status is not None:  # the file's end: what follows it is no file's
                outside += len(segments[index][1].strip())
                index += 1
            continue
        if kind == "skip" and " " in rest:
            reason, _, name = rest.partition(" ")
            records.append(Record("skip", name, reason=reason))
        elif kind == "more" and rest:
            records.append(Record("more", rest))
        outside += len(body.strip())
    return Framed(records, outside)


def _end_status(head: str) -> int | None:
    """The status of an `end STATUS` frame line; None for any other line."""
    kind, _, status = head.partition(" ")
    if kind != "end" or not status.lstrip("-").isdigit() or len(status) > 6:
        return None
    return int(status)


def frame(records: list[Record], token: str) -> str:
    """`records` as a framed probe prints them (the replay transport's multi-file answer)."""
    mark = f"{MARK}{token}"
    out = []
    for record in records:
        if record.kind == "file":
            status = "" if record.status is None else f"\n{mark} end {record.status}\n"
            out.append(f"\n{mark} file {record.name}\n{record.text}{status}")
        elif record.kind == "skip":
            out.append(f"\n{mark} skip {record.reason} {record.name}\n")
        else:
            out.append(f"\n{mark} more {record.name}\n")
    return "".join(out)
