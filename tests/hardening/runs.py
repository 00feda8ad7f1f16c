"""Helpers of the hardening tests: the CLI as a background process (so a test can break things
while it runs, and read its peak memory), the one-line error a user must get, and what a run
directory must hold however its walk ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = Path(__file__).parent / "runbooks"
FAULT_WALK = RUNBOOKS / "fault-walk.yaml"


@dataclass
class Finished:
    rc: int
    stdout: str
    stderr: str
    wall_s: float
    #: peak resident set of the process (and any child it waited for), from wait4
    max_rss_mib: float

    def json(self) -> Any:
        return json.loads(self.stdout)


#: `python -m runbook ARGS`, writing its own peak RSS (VmHWM, KiB) to $RUNBOOK_TEST_PEAK as it
#: exits. wait4's ru_maxrss is no measure of the CLI: Linux counts in it the memory the child
#: shared with its parent before exec — the whole test process, hundreds of MiB late in a run.
_PEAK = """
import atexit, os, runpy, sys
def _peak():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    with open(os.environ["RUNBOOK_TEST_PEAK"], "w") as out:
                        out.write(line.split()[1])
    except OSError:
        pass
atexit.register(_peak)
sys.argv = ["runbook", *sys.argv[1:]]
runpy.run_module("runbook", run_name="__main__", alter_sys=True)
"""


class Background:
    """`python -m runbook ARGS` started now (stdin closed, output to files), for a test that
    acts while it runs; `finish()` reaps it with wait4, which reports its peak RSS. `prefix`
    runs it through a wrapper (`unshare …`, `nsenter …`) that execs it in the same process."""

    def __init__(
        self,
        args: Sequence[str],
        env: dict[str, str],
        work: Path,
        *,
        prefix: Sequence[str] = (),
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self._out_path, self._err_path = work / "stdout", work / "stderr"
        self._peak_path = work / "peak-rss-kib"
        self._peak_path.unlink(missing_ok=True)
        self._finished: Finished | None = None
        self.started = time.monotonic()
        with self._out_path.open("wb") as out, self._err_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, "-c", _PEAK, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env={**env, "RUNBOOK_TEST_PEAK": str(self._peak_path)},
                cwd=REPO,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self._finished is None and self._reap(os.WNOHANG) is None

    def _reap(self, flags: int) -> Finished | None:
        pid, status, usage = os.wait4(self.proc.pid, flags)
        if pid == 0:
            return None
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._finished = Finished(
            self.proc.returncode,
            self._out_path.read_text(errors="replace"),
            self._err_path.read_text(errors="replace"),
            time.monotonic() - self.started,
            self._peak_mib(usage.ru_maxrss),
        )
        return self._finished

    def _peak_mib(self, maxrss_kib: int) -> float:
        """The CLI's own peak (a process killed before it could say: wait4's, an upper
        bound)."""
        try:
            return int(self._peak_path.read_text()) / 1024
        except (OSError, ValueError):
            return maxrss_kib / 1024

    def finish(self, timeout: float = 60.0) -> Finished:
        """Wait for the CLI; kill it (and fail) when it runs past `timeout`."""
        if self._finished is not None:
            return self._finished
        deadline = time.monotonic() + timeout
        while True:
            done = self._reap(os.WNOHANG)
            if done is not None:
                return done
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(
                    f"runbook still running after {timeout:g}s; stderr:\n"
                    + self._err_path.read_text(errors="replace")[-3000:]
                )
            time.sleep(0.02)

    def kill(self) -> None:
        if self._finished is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap(0)

    def wait_for(self, path: Path, timeout: float = 30.0) -> None:
        """Until `path` exists (a probe on the host touched it); fail if the CLI ends first."""
        deadline = time.monotonic() + timeout
        while not path.exists():
            if not self.running():
                raise AssertionError(f"runbook ended before {path} appeared: {self._finished}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} did not appear within {timeout:g}s")
            time.sleep(0.01)


def run_now(
    args: Sequence[str],
    env: dict[str, str],
    work: Path,
    *,
    prefix: Sequence[str] = (),
    timeout: float = 60.0,
) -> Finished:
    proc = Background(args, env, work, prefix=prefix)
    try:
        return proc.finish(timeout)
    finally:
        proc.kill()


def one_line_error(done: Finished) -> str:
    """The single `runbook: …` line on stderr, never a traceback or an internal error."""
    assert "Traceback" not in done.stderr, done.stderr
    assert "internal error" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("runbook: "), lines
    return lines[0]


def last_line_error(done: Finished) -> str:
    """The error of a run whose guided walk already printed to stderr: its last line."""
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("runbook: "), done.stderr[-2000:]
    return line


def _no_temporaries(root: Path) -> None:
    """Atomic writes leave nothing behind: no `.NAME.xxxx` temporary anywhere."""
    left = [str(p) for p in root.rglob(".*")]
    assert not left, f"temporary files left behind: {left}"


def check_run_dir(path: Path) -> dict[str, Any]:
    """A run directory as a finished walk must leave it, whatever went wrong on the way: every
    file valid JSON (events whole lines, from run-started to run-done), state.json and
    verdict.json agreeing on every stage, a bundle that looks whole with the `.rc` (and the
    reason, in `.err`) of each probe that ran. Returns the verdict."""
    names = set(os.listdir(path))
    assert {"events.jsonl", "state.json", "bundle", "verdict.json"} <= names, names
    _no_temporaries(path)
    raw = (path / "events.jsonl").read_text()
    assert raw.endswith("\n")
    events = [json.loads(line) for line in raw.splitlines()]
    assert events[0]["event"] == "run-started" and events[-1]["event"] == "run-done", events
    state = json.loads((path / "state.json").read_text())
    verdict: dict[str, Any] = json.loads((path / "verdict.json").read_text())
    assert events[-1]["root_cause"] == verdict["root_cause"]
    walked = {stage["id"]: stage for stage in verdict["stages"] if stage["status"] != "skipped"}
    assert set(walked) == set(state["path"]), (walked, state["path"])
    for stage_id, stage in walked.items():
        assert state["records"][stage_id]["status"] == stage["status"], stage_id
    meta = yaml.safe_load((path / "bundle" / "bundle.yaml").read_text())
    assert meta["format"] == 1 and meta["node"] == verdict["node"]
    for event in (e for e in events if e["event"] == "probe"):
        evidence = path / "bundle" / event["name"]
        assert evidence.with_name(evidence.name + ".rc").is_file(), event
        if event["failure"]:
            err = evidence.with_name(evidence.name + ".err").read_text()
            assert f"runbook: {event['failure']}" in err, (event, err)
    return verdict


def stages(verdict: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {stage["id"]: stage for stage in verdict["stages"]}


def probe_events(run_dir: Path) -> dict[str, dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return {e["name"]: e for e in map(json.loads, lines) if e["event"] == "probe"}


def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.01)
