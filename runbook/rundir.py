"""A run directory and every artifact in it: the one module that writes and reads them.

A guided run (`runbook run`, `demo`, a recovery check's walk) leaves:

- **events.jsonl**: one whole JSON line per event (`run-started`, each `probe` and `stage`,
  `run-done`), appended at once; a line cut short by a SIGKILL is dropped on reading;
- **state.json**: the conductor after every completed stage, replaced atomically;
- **bundle/**: every piece of evidence, a DESIGN §4 bundle;
- **verdict.json**: the typed verdict (DESIGN §5);
- **run.json**, written when the run starts: the runbook (the reference given, the file it
  resolved to and that file's sha256, so a runbook changed since is refused), the target as
  the approval store records it (`remedies.plans.Target`: the URL, key *paths*, known_hosts,
  jump host, timeouts, the ssh config file an `ssh://ALIAS` was resolved with — never a key's
  contents, never a password), whether new host keys were
  accepted, the `--var` values (redacted like every write: a value that looks like a credential
  is not written, and a run that had one cannot be resumed), the working directory (relative
  paths in variables mean what they meant), the approval store and config used, and the
  run's options.
- **approvals.json**, the ledger of the approval phase: the proposals this run queued, the
  decision taken at each prompt (`approved`, `denied`, `skipped`, …), the one being waited
  on, and `done` once every proposal was decided or listed. It is saved before each prompt
  and after each decision, so a resume asks only what was not yet answered.

Where a run stands, from the files alone: no state.json → interrupted before its first stage
was complete; state.json without verdict.json → interrupted in the walk (state.json is the
last completed stage); verdict.json without a finished ledger → interrupted in the approval
phase; ledger done → finished, nothing to resume.

Where these are created: `new_path` names a new run, job or sweep directory under the state
directory (`$RUNBOOK_STATE_DIR`, else `$XDG_STATE_HOME/nccl-runbook`).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook import atomic, jsontext
from runbook.config import state_dir
from runbook.errors import SpecError, StateError, UsageError, disk_full_as_error
from runbook.redact import redact, redact_data
from runbook.spec.models import Runbook
from runbook.timestamps import now_iso, utc_stamp
from runbook.verdict import Verdict, VerdictError

RECORD = "run.json"
LEDGER = "approvals.json"
RECORD_FORMAT = 1
#: a temporary of an atomic write (tempfile.mkstemp(prefix=".NAME.")) left by a SIGKILL
_TEMPORARY = re.compile(r"^\..+\.[a-z0-9_]{8}$")


def new_path(kind: str, *name: str, root: Path | None = None) -> Path:
    """A new directory's path for a run (`kind` "runs"), a job ("jobs") or a sweep ("sweeps"):
    `<state dir>/<kind>/<UTC stamp>-<name…>-<6 hex>`, so they sort by start and never clash."""
    return (root or state_dir() / kind) / "-".join((utc_stamp(), *name, secrets.token_hex(3)))



# ---------------------------------------------------------------------- the directory


def _atomic_json(path: Path, data: Any, within: Path | None = None) -> None:
    text = json.dumps(redact_data(data), indent=2, default=str) + "\n"
    atomic.write_text(path, text, within=within)


def _now_z() -> str:
    """An event's time: now, UTC, to the microsecond, ending in `Z` as every time in JSON."""
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


class RunDirectory:
    """A run's artifacts: `events.jsonl` (one whole line per event, written at once), `state.json`
    (the conductor, rewritten atomically after every stage), `bundle/` (every piece of evidence,
    a DESIGN §4 bundle) and `verdict.json`. Enough to audit or replay a run. A full disk is a
    DiskFullError naming the directory; what was written before stays whole.

    `exclusive`: hold an flock on events.jsonl while open, so a guided run and a `runbook
    resume` of it (or two resumes) never write one directory at once; the kernel drops it when
    the holder dies, even of SIGKILL."""

    def __init__(self, path: Path, *, exclusive: bool = False) -> None:
        self.path = path
        with disk_full_as_error(path):
            # owner-only: a run directory holds a node's logs, its pod spec and its verdict; a
            # link placed at it, or at events.jsonl, is refused (runbook/atomic.py)
            atomic.owner_only_dir(path)
            self._events = atomic.open_append(path / "events.jsonl")
        if exclusive:
            try:
                fcntl.flock(self._events, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(self._events)
                raise UsageError(
                    f"{path} is in use by another runbook process (a run or a resume of it)"
                ) from None
        self.bundle = path / "bundle"
        #: stage id -> (the record object last saved, its JSON): see save_state
        self._state_records: dict[str, tuple[Any, str]] = {}

    def write_json(self, name: str, data: Any) -> None:
        """`name` in the run directory, replaced atomically (redacted, like every write)."""
        with disk_full_as_error(self.path):
            _atomic_json(self.path / name, data, self.path)

    def event(self, kind: str, **data: Any) -> None:
        record = redact_data(
            {"time": _now_z(), "event": kind, **data}
        )
        with disk_full_as_error(self.path):
            atomic.append_whole(self._events, (json.dumps(record, default=str) + "\n").encode())

    def save_state(self, state: Mapping[str, Any]) -> None:
        """state.json, compact: it is rewritten after every stage and read back only by
        `resume` (json's indenting encoder is pure Python, several times the C encoder's
        cost). A stage record that is the very object the last save wrote (Conductor.to_state
        keeps unchanged records) is not redacted and encoded again."""
        encoded = {}
        for stage_id, record in state["records"].items():
            kept = self._state_records.get(stage_id)
            if kept is None or kept[0] is not record:
                kept = (record, json.dumps(redact_data(record), default=str))
            encoded[stage_id] = kept
        self._state_records = encoded
        head = {k: v for k, v in state.items() if k != "records"}
        rest = json.dumps(redact_data(head), default=str)
        # as json.dumps writes the whole state (its separators; records is its last key)
        parts = ", ".join(f"{json.dumps(redact(str(k)))}: {kept[1]}" for k, kept in encoded.items())
        text = rest[:-1] + (", " if rest != "{}" else "") + f'"records": {{{parts}}}}}\n'
        with disk_full_as_error(self.path):
            atomic.write_text(self.path / "state.json", text, within=self.path)

    def save_verdict(self, verdict: Verdict) -> None:
        """verdict.json: one line per key, one per stage (runbook/jsontext.py)."""
        text = jsontext.readable(redact_data(verdict.to_json()))
        with disk_full_as_error(self.path):
            atomic.write_text(self.path / "verdict.json", text, within=self.path)

    def close(self) -> None:
        if self._events >= 0:
            os.close(self._events)
            self._events = -1


# ------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class RunbookFile:
    """The runbook a run walked: as given (`ref`), the file it resolved to, its sha256."""

    ref: str
    path: str
    sha256: str

    def as_dict(self) -> dict[str, str]:
        return {"ref": self.ref, "path": self.path, "sha256": self.sha256}


def read_runbook(ref: str) -> tuple[Runbook, RunbookFile]:
    """Resolve and load RUNBOOK, hashing the very bytes that were loaded."""
    from runbook.spec import load_text, resolve

    path = resolve(ref).resolve()
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SpecError(f"cannot read runbook {path}: {reason}") from None
    runbook = load_text(text, str(path))
    return runbook, RunbookFile(ref, str(path), hashlib.sha256(data).hexdigest())


@dataclass(frozen=True)
class RunRecord:
    """run.json: everything `runbook resume` needs to re-open the target and walk the same
    runbook with the same variables, and nothing secret."""

    runbook: RunbookFile
    target: dict[str, Any]
    variables: dict[str, Any] = field(default_factory=dict)
    accept_new_host_keys: bool = False
    cwd: str = ""
    db: str | None = None
    config: str | None = None
    as_user: str | None = None
    no_input: bool = False
    started_at: str = ""
    #: variables whose value looked like a credential and was not written
    redacted: tuple[str, ...] = ()
    #: the user signature catalog the run read evidence with (--signatures, or the config's
    #: signatures.user_catalog), so a resumed run reads the rest with the same one
    signatures: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": RECORD_FORMAT,
            "kind": "runbook-run",
            "runbook": self.runbook.as_dict(),
            "target": dict(self.target),
            "accept_new_host_keys": self.accept_new_host_keys,
            "variables": dict(self.variables),
            "redacted_variables": list(self.redacted),
            "cwd": self.cwd,
            "db": self.db,
            "config": self.config,
            "as_user": self.as_user,
            "no_input": self.no_input,
            "started_at": self.started_at,
            "signatures": self.signatures,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        rb = data["runbook"]
        target = data["target"]
        if not isinstance(rb, Mapping) or not isinstance(target, Mapping) or "url" not in target:
            raise ValueError("runbook and target must be objects, the target with a url")
        variables = data.get("variables") or {}
        if not isinstance(variables, Mapping):
            raise ValueError("variables must be an object")
        return cls(
            runbook=RunbookFile(str(rb["ref"]), str(rb["path"]), str(rb["sha256"])),
            target=dict(target),
            variables=dict(variables),
            accept_new_host_keys=bool(data.get("accept_new_host_keys")),
            cwd=str(data.get("cwd") or ""),
            db=data.get("db"),
            config=data.get("config"),
            as_user=data.get("as_user"),
            no_input=bool(data.get("no_input")),
            started_at=str(data.get("started_at") or ""),
            redacted=tuple(str(n) for n in data.get("redacted_variables") or ()),
            signatures=_str_or_none(data.get("signatures")),
        )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def new_record(
    runbook: RunbookFile,
    target: Mapping[str, Any],
    variables: Mapping[str, Any],
    **options: Any,
) -> RunRecord:
    """A record for a run starting now; credentials among the variables are named, not kept."""
    kept = redact_data(dict(variables))
    redacted = tuple(sorted(k for k in variables if kept.get(k) != variables[k]))
    return RunRecord(
        runbook=runbook,
        target=dict(target),
        variables=dict(variables),
        cwd=os.getcwd(),
        started_at=now_iso(),
        redacted=redacted,
        **options,
    )


def _read_json(path: Path) -> Any:
    try:
        return jsontext.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateError(f"{path}: unreadable: {exc}") from None


def read_record(path: Path) -> RunRecord:
    """run.json of the run directory `path`; StateError when it is not a resumable run."""
    if not path.is_dir():
        raise StateError(f"{path} is not a run directory")
    data = _read_json(path / RECORD)
    if data is None:
        what = (
            "a run directory without run.json (stopped before it began, a job run, or a run "
            "of an older version)"
            if (path / "events.jsonl").exists()
            else "not a run directory (no run.json)"
        )
        raise StateError(f"{path}: {what}; it cannot be resumed")
    if not isinstance(data, dict) or data.get("kind") != "runbook-run":
        raise StateError(f"{path / RECORD}: not the record of a runbook run")
    if data.get("format") != RECORD_FORMAT:
        raise StateError(f"{path / RECORD}: format {data.get('format')!r} is not supported")
    try:
        return RunRecord.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"{path / RECORD}: malformed: {exc}") from None


def reload_runbook(record: RunRecord) -> Runbook:
    """The run's runbook file, loaded again: refused if it is gone or changed since."""
    from runbook.spec import load_text

    path = Path(record.runbook.path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StateError(
            f"runbook {record.runbook.ref} ({path}) cannot be read: {exc.strerror or exc}; "
            "start a new run"
        ) from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != record.runbook.sha256:
        raise StateError(
            f"runbook {record.runbook.ref} ({path}) changed since the run started "
            f"(sha256 {record.runbook.sha256[:12]}, now {digest[:12]}); a run cannot go on "
            "with another runbook: start a new run"
        )
    return load_text(data.decode("utf-8", errors="replace"), str(path))


def read_state(path: Path) -> dict[str, Any] | None:
    data = _read_json(path / "state.json")
    if data is not None and not isinstance(data, dict):
        raise StateError(f"{path / 'state.json'}: not a conductor state")
    return data


def read_verdict(path: Path) -> Verdict | None:
    data = _read_json(path / "verdict.json")
    if data is None:
        return None
    try:
        return Verdict.from_json(data)
    except VerdictError as exc:
        raise StateError(f"{path / 'verdict.json'}: not a verdict: {exc.one_line()}") from None


def events(path: Path) -> list[dict[str, Any]]:
    """events.jsonl's whole lines (a line cut short by a SIGKILL is not one)."""
    try:
        raw = (path / "events.jsonl").read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for line in raw.split(b"\n")[:-1]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def repair(path: Path) -> list[str]:
    """Undo what only a SIGKILL in the middle of a write leaves: a last event line without
    its newline (a write of many pages can be cut short when the process is killed) and the
    temporaries of atomic writes. Call with the run directory locked. Returns what it did."""
    done: list[str] = []
    log = path / "events.jsonl"
    if log.exists():
        with log.open("rb+") as handle:
            raw = handle.read()
            if raw and not raw.endswith(b"\n"):
                keep = raw.rfind(b"\n") + 1
                handle.truncate(keep)
                done.append(f"dropped a partial last line of events.jsonl ({len(raw) - keep} B)")
    for root, _dirs, files in os.walk(path):
        for name in files:
            if _TEMPORARY.match(name):
                Path(root, name).unlink(missing_ok=True)
                done.append(f"removed the temporary {Path(root, name).relative_to(path)}")
    return done


# ---------------------------------------------------------------------------- the approvals


class ApprovalLedger:
    """approvals.json: which proposals this run queued and what became of each at its prompts.
    Saved (atomically) before each prompt and after each decision."""

    def __init__(
        self,
        directory: RunDirectory,
        queued: list[str],
        decisions: dict[str, str] | None = None,
        waiting: str | None = None,
        done: bool = False,
    ) -> None:
        self.directory = directory  # a RunDirectory (write_json)
        self.queued = list(queued)
        self.decisions = dict(decisions or {})
        self.waiting = waiting
        self.done = done

    @classmethod
    def load(cls, directory: RunDirectory) -> ApprovalLedger | None:
        data = read_ledger(directory.path)
        if data is None:
            return None
        return cls(
            directory,
            [str(p) for p in data.get("queued") or ()],
            {str(k): str(v) for k, v in (data.get("decisions") or {}).items()},
            data.get("waiting"),
            bool(data.get("done")),
        )

    def undecided(self) -> list[str]:
        return [pid for pid in self.queued if pid not in self.decisions]

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": 1,
            "queued": self.queued,
            "decisions": self.decisions,
            "waiting": self.waiting,
            "done": self.done,
            "updated_at": now_iso(),
        }

    def save(self) -> None:
        self.directory.write_json(LEDGER, self.as_dict())

    # what guided_approvals reports, each saved at once
    def asking(self, pid: str) -> None:
        self.waiting = pid
        self.save()

    def decided(self, pid: str, outcome: str) -> None:
        self.decisions[pid] = outcome
        if self.waiting == pid:
            self.waiting = None
        self.save()

    def finish(self) -> None:
        self.waiting, self.done = None, True
        self.save()


def read_ledger(path: Path) -> dict[str, Any] | None:
    data = _read_json(path / LEDGER)
    if data is not None and not isinstance(data, dict):
        raise StateError(f"{path / LEDGER}: not an approvals ledger")
    return data
