"""`py-spy dump` of each live rank process (`pyspy/*`): where every thread of it is right now.

Both forms py-spy prints: the text (``Process 4711: python train.py`` / ``Thread 4711 (idle):
"MainThread"`` / one ``    name (file:line)`` line per frame, innermost first; with
``--native`` C/C++ frames interleave, and ``--locals`` adds indented ``name = value`` lines,
which are skipped) and ``--json`` (a list of threads with their ``frames``).

And the form Python's own faulthandler prints (``faulthandler.dump_traceback``, or on a fatal
signal: ``Fatal Python error: Aborted`` when PyTorch's watchdog aborts a rank whose job enabled
faulthandler, as sglang and vLLM do): ``Thread 0x00007fe403b964c0 (most recent call first):``
(``Current thread 0x…``, or ``Stack (most recent call first):`` for one thread), then
``  File "/path/f.py", line 2425 in broadcast`` per frame, innermost first. Threads have no
names there: the main thread is the one whose outermost frame is ``<module>``, else the last
one listed (faulthandler lists the newest thread first). Such stacks are read from a
``pyspy/`` file and from the ranks' logs (``app/``, ``nccl/``), where a rank that aborted
printed them; a log's stack belongs to the rank its file name or its ``[rankN]:`` lines name.

The file's name says which process it is: ``pyspy/rank-R.pid-P.txt`` as the runbook writes
it (or ``pyspy/P.txt``). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from runbook.parsers._common import files_under, is_collected
from runbook.parsers.applog import rank_from_name
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
#: faulthandler's thread header and frame, anywhere in a line (a log prefix may come first);
#: a Python traceback's `File "f.py", line 3, in name` (a comma before `in`) is no frame here
_FH_THREAD = re.compile(
    r"(?:(?P<current>Current thread)|Thread|Stack)(?: (?P<tid>0x[0-9A-Fa-f]+))? "
    r"\(most recent call first\):\s*$"
)
_FH_FRAME = re.compile(r'File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<name>[^\s,]\S*)\s*$')
_RANK_TAG = re.compile(r"\[rank(\d{1,7})\]:")
LOG_SOURCES = ("app/", "nccl/")
#: where a rank waits when it is inside a collective: the c10d call and its backends
COLLECTIVE_FILES = ("distributed_c10d.py", "c10d_logger.py", "_functional_collectives.py")
#: where a main thread waits while autograd's engine runs the backward pass on its own threads
AUTOGRAD_FILES = ("torch/autograd/__init__.py", "torch/autograd/graph.py")


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


def _faulthandler_blocks(
    lines: Iterable[str], tags: set[int] | None = None
) -> list[tuple[int, list[dict[str, Any]]]]:
    """Each run of faulthandler thread dumps in `lines`: (its first line number, its threads).
    A run ends at the first line that is neither a thread header, a frame, nor blank. The
    `[rankN]:` tags of the lines are added to `tags` when it is given (one pass over a log)."""
    blocks: list[tuple[int, list[dict[str, Any]]]] = []
    threads: list[dict[str, Any]] | None = None
    start = 0
    for number, raw in enumerate(lines, 1):
        if tags is not None and len(tags) < 2 and (tag := _RANK_TAG.search(raw[:200])):
            tags.add(int(tag.group(1)))
        if m := _FH_THREAD.search(raw):
            if threads is None:
                threads, start = [], number
                blocks.append((start, threads))
            if len(threads) < KEEP_THREADS:
                threads.append(
                    {
                        "id": m.group("tid") or "?",
                        "state": "current" if m.group("current") else "",
                        "name": "",
                        "frames": [],
                    }
                )
            continue
        if threads is not None and (m := _FH_FRAME.search(raw)):
            frames = threads[-1]["frames"] if threads else []
            if len(frames) < KEEP_FRAMES:
                frames.append(
                    {**_frame(m.group("name"), m.group("file"), int(m.group("line"))), "at": number}
                )
            continue
        if threads is not None and raw.strip():
            threads = None
    return [(at, found) for at, found in blocks if found]


def parse_faulthandler(text: str) -> dict[str, Any]:
    """Python's faulthandler dump (every run of thread dumps in the text, read as one
    process's threads): threads with frames, innermost first, in the order listed."""
    threads: list[dict[str, Any]] = []
    for _, found in _faulthandler_blocks(text.splitlines()):
        threads.extend(found)
    return {"threads": threads[:KEEP_THREADS], "form": "faulthandler"}


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
    """The thread named MainThread, else the one whose id is the pid, else (faulthandler's
    unnamed threads) the one whose outermost frame is `<module>` or the last one listed, else
    the first."""
    threads = [t for t in facts.get("threads") or [] if isinstance(t, Mapping)]
    for thread in threads:
        if thread.get("name") == "MainThread":
            return thread
    pid = facts.get("pid")
    for thread in threads:
        if str(thread.get("id")) == str(pid):
            return thread
    if facts.get("form") == "faulthandler" and threads:
        for thread in threads:
            frames = list(thread.get("frames") or [])
            if frames and frames[-1].get("name") == "<module>":
                return thread
        return threads[-1]
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
        if body.startswith("["):
            facts = parse_json(body)
        elif not _PROCESS.search(body.split("\n", 1)[0]) and any(
            _FH_THREAD.search(line) for line in body.splitlines()
        ):
            facts = parse_faulthandler(body)
        else:
            facts = parse_text(body)
    except (ValueError, RecursionError) as err:  # RecursionError: JSON nested too deep
        facts = {"threads": [], "error": f"not py-spy JSON: {err}"}
    facts["source"] = name
    named = _NAME.search(name.rsplit("/", 1)[-1])
    if named:
        facts.setdefault("pid", int(named.group("pid")))
        if named.group("rank") is not None:
            facts["rank"] = int(named.group("rank"))
    _add_main(facts)
    if "main" not in facts and "error" not in facts:
        facts["error"] = " ".join(body.splitlines()[-1:])[:200] or "empty"
    return facts


def _add_main(facts: dict[str, Any]) -> None:
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
        if facts["main"]["collective"] is None and frames and _in_backward(frames[0]):
            # the main thread waits for autograd's engine, whose own thread runs the backward
            # hooks (ZeRO-3's all-gathers, FSDP's reduce-scatters): its collective is the rank's
            for thread in facts.get("threads") or []:
                found = in_collective(list(thread.get("frames") or []))
                if thread is not main and found:
                    facts["main"]["collective"] = found
                    facts["main"]["collective_thread"] = thread.get("id")
                    break


def _in_backward(frame: Mapping[str, Any]) -> bool:
    """Whether a thread's innermost frame is autograd's backward, waiting for its engine."""
    return str(frame.get("file") or "").endswith(AUTOGRAD_FILES)


def log_dumps(name: str, lines: Iterable[str]) -> list[dict[str, Any]]:
    """The faulthandler dumps a rank's log holds (one per run of thread dumps), each with
    the rank the file's name gives, else the one rank its `[rankN]:` lines name."""
    tagged: set[int] = set()
    blocks = _faulthandler_blocks(lines, tagged)
    if not blocks:
        return []
    rank = rank_from_name(name)
    if rank is None and len(tagged) == 1:
        rank = tagged.pop()
    dumps = []
    for at, threads in blocks:
        facts: dict[str, Any] = {
            "threads": threads, "form": "faulthandler", "source": name, "line": at,
        }  # fmt: skip
        if rank is not None:
            facts["rank"] = rank
        _add_main(facts)
        dumps.append(facts)
    return dumps


@register("pyspy", "`py-spy dump` of live rank processes (pyspy/*, text or --json)")
def pyspy_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    dumps = []
    # a log's stacks first: a live process's dump of the same rank, read later, is newer
    for prefix in LOG_SOURCES:
        for name, result in files_under(files, prefix):
            if is_collected(result):
                dumps.extend(log_dumps(name, result.lines()))
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
