"""A gloo job of 2-4 ranks on this machine that hangs for real (tests/hang/hangjob.py), and its
teardown: every rank is a process group of its own, killed at the end whatever happened.

    with hanging_job(tmp_path, world=3, mode="sleep", bad_rank=1) as job:
        job.wait_for_dumps()          # every rank's flight recorder dump written
        ... runbook run nccl-hang --target local --var app_log_dir=job.dir ...

Each rank runs as torchrun would start it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
LOCAL_RANK in its environment) plus HANG_JOB=<a token of this job>, so the runbook's
`--var job_env=HANG_JOB=<token>` finds this job's ranks and no other test's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY_SPY = str(Path(sys.executable).parent / "py-spy")
#: importing torch takes seconds on a loaded machine; the hang is detected 1.5 s after it
READY_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HangingJob:
    dir: Path
    world: int
    mode: str
    bad_rank: int
    token: str
    fr_prefix: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def wait_for_dumps(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Until every rank wrote its flight recorder dump (the job's watchdog threads)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(list(self.dir.glob("**/fr/nccl_trace_rank_[0-9]*"))) >= self.world:
                return
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                raise AssertionError(f"a rank exited before the hang: {self.logs()}")
            time.sleep(0.3)
        raise AssertionError(f"no dumps after {timeout} s: {self.logs()}")

    def freeze_once_dumped(self, rank: int, timeout: float = READY_TIMEOUT_S) -> None:
        """SIGSTOP `rank`'s process once it wrote its dump (it is then inside the collective)."""
        deadline = time.monotonic() + timeout
        while not list(self.dir.glob(f"**/fr/nccl_trace_rank_{rank}")):
            if time.monotonic() > deadline:
                raise AssertionError(f"rank {rank} wrote no dump: {self.logs()}")
            time.sleep(0.1)
        os.kill(self.procs[rank].pid, signal.SIGSTOP)

    def logs(self) -> str:
        return "\n".join(
            p.read_text(errors="replace")[-2000:]
            for p in sorted(self.dir.glob("**/rank-*.log")) + sorted(self.dir.glob("stderr-*"))
        )

    def alive(self) -> list[int]:
        return [r for r, p in enumerate(self.procs) if p.poll() is None]


@dataclass(frozen=True)
class Placement:
    """Where a rank runs: the argv that enters its node (empty: this machine), the node's
    directory for its log and dump, and the node's index (torchrun's GROUP_RANK)."""

    enter: tuple[str, ...] = ()
    dir: Path | None = None
    group_rank: int = 0


@contextlib.contextmanager
def hanging_job(
    work: Path,
    *,
    world: int,
    mode: str,
    bad_rank: int,
    dump_format: str = "pickle",
    placements: dict[int, Placement] | None = None,
    master_addr: str = "127.0.0.1",
) -> Iterator[HangingJob]:
    """The job started (see the module docstring); every rank killed when the block exits."""
    work.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(6)
    job = HangingJob(work, world, mode, bad_rank, token, str(work / "fr" / "nccl_trace_rank_"))
    (work / "fr").mkdir(exist_ok=True)
    placements = placements or {}
    fifo = work / "batches.fifo"
    if mode == "fifo":
        os.mkfifo(fifo)
    port = free_port()
    env_base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH", "RANK", "HANG_"))}
    handles = []
    try:
        for rank in range(world):
            where = placements.get(rank, Placement())
            rank_dir = where.dir or work
            (rank_dir / "fr").mkdir(parents=True, exist_ok=True)
            env = {
                **env_base,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "WORLD_SIZE": str(world),
                "MASTER_ADDR": master_addr,
                "GROUP_RANK": str(where.group_rank),
                "MASTER_PORT": str(port),
                "HANG_JOB": token,
                "HANG_MODE": mode,
                "HANG_RANK": str(bad_rank),
                "HANG_DIR": str(rank_dir),
                "HANG_SIGNAL": str(work / "dump-signal"),
                "HANG_FIFO": str(fifo),
                "HANG_DUMP_FORMAT": dump_format,
                "HANG_TIMEOUT_S": "60",
                "TORCH_FR_BUFFER_SIZE": "200",
                "TORCH_FR_DUMP_TEMP_FILE": str(rank_dir / "fr" / "nccl_trace_rank_"),
                "PYTHONWARNINGS": "ignore",
            }
            handles.append(open(work / f"stderr-{rank}.txt", "wb"))
            job.procs.append(
                subprocess.Popen(
                    [*where.enter, sys.executable, str(HERE / "hangjob.py")],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=handles[-1],
                    start_new_session=True,
                )
            )
        yield job
    finally:
        for proc in job.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in job.procs:
            proc.wait(timeout=30)
        for handle in handles:
            handle.close()
        if fifo.exists():
            fifo.unlink()
