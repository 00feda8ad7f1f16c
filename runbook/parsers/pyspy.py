"""`py-spy dump` of each live rank process (`pyspy/*`): where every thread of it is right now.

Both forms py-spy prints: the text (``Process 4711: python train.py`` / ``Thread 4711 (idle):
"MainThread"`` / one ``    name (file:line)`` line per frame, innermost first; with
``--native`` C/C++ frames interleave, and ``--locals`` adds indented ``name = value`` lines,
which are skipped) and ``--json`` (a list of threads with their ``frames``).

The file's name says which process it is: ``pyspy/rank-R.pid-P.txt`` as the runbook writes
it (or ``pyspy/P.txt``). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from runbook.parsers._common import is_collected
from runbook.parsers.registry import Files, register

PREFIX = "pyspy/"
#: frames kept per thread (innermost first)
KEEP_FRAMES = 40
KEEP_THREADS = 64

_PROCESS = re.compile(r"^Process (?P<pid>\d+): (?P<cmd>.*)$")
_PYTHON = re.compile(r"^Python v(?P<v>[\w.+-]+)")
_THREAD = re.compile(
    r"^Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<state>[^)]*)\)(?:: \"(?P<name>.*)\")?\s*$"
)
_FRAME = re.compile(r"^ {4}(?P<name>\S.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
_NAME = re.compile(r"(?:rank-(?P<rank>\d{1,7})\.)?(?:pid-)?(?P<pid>\d{1,10})\.(?:txt|json)$")
#: where a rank waits when it is inside a collective: the c10d call and its backends
COLLECTIVE_FILES = ("distributed_c10d.py", "c10d_logger.py", "_functional_collectives.py")


def _frame(name: str, file: str, line: int | None) -> dict[str, Any]:
    return {"name": name, "file": file, "line": line}


def parse_text(text: str) -> dict[str, Any]:
    """A text dump: pid, command, Python version, threads with frames (innermost first)."""
    facts: dict[str, Any] = {"threads": []}
    thread: dict[str, Any] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if m := _PROCESS.match(line):
            facts["pid"] = int(m.group("pid"))
            facts["command"] = m.group("cmd")[:200]
        elif m := _PYTHON.match(line):
            facts["python"] = m.group("v")
        elif m := _THREAD.match(line):
            thread = {
                "id": m.group("tid"),
                "state": m.group("state"),
                "name": m.group("name") or "",
                "frames": [],
            }
            if len(facts["threads"]) < KEEP_THREADS:
                facts["threads"].append(thread)
        elif thread is not None and (m := _FRAME.match(line)):
            if len(thread["frames"]) < KEEP_FRAMES:
                found = m.group("line")
                thread["frames"].append(
                    {
                        **_frame(m.group("name"), m.group("file"), int(found) if found else None),
                        "at": number,
                    }
                )
    return facts


def parse_json(text: str) -> dict[str, Any]:
    """A `--json` dump (a list of threads, each with pid and frames)."""
    data = json.loads(text)
    facts: dict[str, Any] = {"threads": []}
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, Mapping):
            continue
        if isinstance(item.get("pid"), int):
            facts.setdefault("pid", item["pid"])
        frames: list[dict[str, Any]] = []
        for frame in item.get("frames") or []:
            if isinstance(frame, Mapping) and len(frames) < KEEP_FRAMES:
                line = frame.get("line")
                frames.append(
                    _frame(
                        str(frame.get("name") or "?"),
                        str(frame.get("short_filename") or frame.get("filename") or "?"),
                        line if isinstance(line, int) and not isinstance(line, bool) else None,
                    )
                )
        state = "active" if item.get("active") else "idle"
        if item.get("owns_gil"):
            state += "+gil"
        if len(facts["threads"]) < KEEP_THREADS:
            facts["threads"].append(
                {
                    "id": str(item.get("os_thread_id") or item.get("thread_id") or "?"),
                    "state": state,
                    "name": str(item.get("thread_name") or ""),
                    "frames": frames,
                }
            )
    return facts


def main_thread(facts: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The thread named MainThread, else the one whose id is the pid, else the first."""
    threads = [t for t in facts.get("threads") or [] if isinstance(t, Mapping)]
    for thread in threads:
        if thread.get("name") == "MainThread":
            return thread
    pid = facts.get("pid")
    for thread in threads:
        if str(thread.get("id")) == str(pid):
            return thread
    return threads[0] if threads else None


def in_collective(frames: list[Mapping[str, Any]]) -> str | None:
    """The c10d call a thread waits in (`all_reduce`), or None when it is in none."""
    for frame in frames:
        file = str(frame.get("file") or "")
        name = str(frame.get("name"))
        if file.endswith(COLLECTIVE_FILES) and not name.endswith("wrapper") and name != "<module>":
            return str(frame.get("name"))
    return None


def stack_text(frames: list[Mapping[str, Any]], depth: int = 3) -> list[str]:
    """The innermost `depth` frames of a stack, outermost of them first, as
    `name (file:line)`; frames of the c10d wrappers and of the import system are left out."""
    shown = []
    for frame in frames:
        file = str(frame.get("file") or "")
        if "<frozen importlib" in file or (
            str(frame.get("name")).endswith("wrapper") and file.endswith("c10d_logger.py")
        ):
            continue
        line = frame.get("line")
        shown.append(f"{frame.get('name')} ({file}{':' + str(line) if line else ''})")
        if len(shown) == depth:
            break
    return list(reversed(shown))


def parse_dump(name: str, text: str) -> dict[str, Any]:
    """One process's dump, either form, with the rank and pid its file name gives."""
    body = text.strip()
    facts: dict[str, Any]
    try:
        facts = parse_json(body) if body.startswith("[") else parse_text(body)
    except ValueError as err:
        facts = {"threads": [], "error": f"not py-spy JSON: {err}"}
    facts["source"] = name
    named = _NAME.search(name.rsplit("/", 1)[-1])
    if named:
        facts.setdefault("pid", int(named.group("pid")))
        if named.group("rank") is not None:
            facts["rank"] = int(named.group("rank"))
    main = main_thread(facts)
    if main is not None:
        frames = list(main.get("frames") or [])
        facts["main"] = {
            "state": main.get("state"),
            "frames": frames,
            "collective": in_collective(frames),
            "stack": stack_text(frames),
            # the line of the dump where its innermost frame is
            "line": frames[0].get("at") if frames else None,
        }
    elif "error" not in facts:
        facts["error"] = " ".join(body.splitlines()[-1:])[:200] or "empty"
    return facts


@register("pyspy", "`py-spy dump` of live rank processes (pyspy/*, text or --json)")
def pyspy_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    dumps = []
    for name, result in sorted(files.items()):
        if name.startswith(PREFIX) and is_collected(result) and result.text().strip():
            dumps.append(parse_dump(name, result.text()))
    return {
        "collected": bool(dumps),
        "dumps": dumps,
        "not_read": [
            {"source": name, "why": (r.stderr.strip().splitlines() or ["no output"])[-1][:200]}
            for name, r in sorted(files.items())
            if name.startswith(PREFIX) and r.collected and not r.text().strip()
        ],
    }
