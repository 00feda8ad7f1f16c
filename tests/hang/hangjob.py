"""One rank of a small CPU ``torch.distributed`` (gloo) job that hangs for real.

A program, not a test module: ``python hangjob.py`` with ``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT`` in its environment (as torchrun sets them) and:

* ``HANG_MODE``: ``sleep`` (the rank sleeps before the collective the others enter),
  ``fifo`` (it blocks reading a FIFO nobody writes, as a rank stuck on I/O does), ``op`` (it
  calls ``broadcast`` where the others call ``all_reduce``), ``size`` (its batch is empty: it
  all-reduces 0 elements where the others reduce 8, then goes on to the next step's),
  ``freeze`` (it enters the collective 6 s before the others, and the test stops its whole
  process with SIGSTOP once it dumped: every rank entered, nothing completes; no rank signals
  the others to dump in this mode, each dumps once its own collective is pending);
* ``HANG_RANK``: the rank that misbehaves; ``HANG_STEP``: at which step (default 3);
* ``HANG_DIR``: where its log (``rank-N.log``) goes; ``HANG_FIFO``: the FIFO of ``fifo``;
* ``TORCH_FR_BUFFER_SIZE``: the flight recorder's size; ``TORCH_FR_DUMP_TEMP_FILE``: where
  the dump goes (the file name is that prefix and the rank, as PyTorch writes it);
  ``HANG_DUMP_FORMAT``: ``pickle`` (PyTorch's on-timeout format) or ``json``.

The flight recorder records every collective with gloo in PyTorch 2.13, but gloo has no
dump-on-timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT`` is the NCCL backend's). So each rank runs a
watchdog thread of its own: when a collective of this rank has been pending for
``HANG_WATCHDOG_S`` seconds (default 1.5), or another rank has signalled (a file
``HANG_SIGNAL``, default ``HANG_DIR/dump-signal``, as NCCL's watchdog signals its peers
through the store), it
dumps the recorder with ``torch._C._distributed_c10d._dump_fr_trace`` (pickle) or
``_dump_fr_trace_json``, logs one line, and signals the others. The gloo timeout itself
(``HANG_TIMEOUT_S``, default 30) is only the backstop that ends a rank the test forgot.
The watchdog is armed only once the rank reached the step that hangs: on a loaded machine an
earlier collective can wait 1.5 s for a slow peer, and a dump of that wait is not the hang.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
import threading
import time

log = logging.getLogger("hangjob")
#: set when this rank starts the step that hangs; the watchdog dumps nothing before it
hang_step_reached = threading.Event()


class _Utc(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = dt.datetime.fromtimestamp(record.created, tz=dt.timezone.utc)
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _dump(rank: int, c10d: object, fmt: str) -> str:
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE", "/tmp/nccl_trace_rank_")
    path = f"{prefix}{rank}"
    data = c10d._dump_fr_trace_json() if fmt == "json" else c10d._dump_fr_trace()  # type: ignore[attr-defined]
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
    with open(tmp, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
    return path


def _pending_for(c10d: object) -> float:
    """How long this rank's oldest unfinished collective has been pending (0 if none)."""
    state = json.loads(c10d._dump_fr_trace_json(True, True))  # type: ignore[attr-defined]
    oldest = None
    for status in (state.get("pg_status") or {}).values():
        if int(status["last_enqueued_collective"]) > int(status["last_completed_collective"]):
            for entry in state.get("entries") or []:
                if not entry.get("retired") and entry.get("state") != "completed":
                    created = entry["time_created_ns"] / 1e9
                    oldest = created if oldest is None else min(oldest, created)
    return 0.0 if oldest is None else time.time() - oldest


def _watchdog(rank: int, hang_dir: str, fmt: str, after: float) -> None:
    import torch._C._distributed_c10d as c10d

    signal = os.environ.get("HANG_SIGNAL") or os.path.join(hang_dir, "dump-signal")
    if os.environ.get("HANG_MODE") == "freeze":
        signal = os.path.join(hang_dir, f"no-signal-{rank}")
    armed_at = None
    while True:
        time.sleep(0.2)
        if not hang_step_reached.is_set():
            continue
        armed_at = armed_at or time.monotonic()
        try:
            pending = _pending_for(c10d)
        except Exception:  # the group is being torn down
            return
        # signalled: dump once this rank's own collective of the step is recorded, or a second
        # after the step began when it enters none (a rank that sleeps, reads a FIFO)
        signalled = os.path.exists(signal) and (pending > 0 or time.monotonic() - armed_at >= 1.0)
        if pending >= after or signalled:
            path = _dump(rank, c10d, fmt)
            log.info("hangjob watchdog: no progress for %.1f s; dumped to %s", pending, path)
            with open(signal, "a") as mark:
                mark.write(f"{rank}\n")
            return


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    mode = os.environ.get("HANG_MODE", "sleep")
    bad = int(os.environ.get("HANG_RANK", "1"))
    step_at = int(os.environ.get("HANG_STEP", "3"))
    hang_dir = os.environ["HANG_DIR"]
    handler = logging.FileHandler(os.path.join(hang_dir, f"rank-{rank}.log"))
    handler.setFormatter(_Utc(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.info("pid %d starting, world size %d", os.getpid(), world)

    import torch
    import torch.distributed as dist

    timeout = float(os.environ.get("HANG_TIMEOUT_S", "30"))
    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=timeout))
    threading.Thread(
        target=_watchdog,
        args=(
            rank,
            hang_dir,
            os.environ.get("HANG_DUMP_FORMAT", "pickle"),
            float(os.environ.get("HANG_WATCHDOG_S", "1.5")),
        ),
        daemon=True,
    ).start()
    grads = torch.ones(8)
    try:
        for step in range(step_at + 3):
            log.info("step %d", step)
            if step == step_at:
                hang_step_reached.set()
            if step == step_at and rank == bad:
                misbehave(mode, grads)
            elif step == step_at and mode == "freeze":
                time.sleep(6.0)  # the rank the test freezes enters the collective first
            dist.all_reduce(grads)
    except Exception as err:
        log.error("%s: %s", type(err).__name__, err)
        return 1
    log.info("done")
    return 0


def load_next_batch(path: str) -> bytes:
    """A rank waiting on I/O: the read of a FIFO nobody writes never returns."""
    with open(path, "rb") as source:
        return source.read(4096)


def wait_for_data(seconds: float) -> None:
    """A rank held up before the collective (a slow loader, a sleep in user code)."""
    time.sleep(seconds)


def misbehave(mode: str, grads: object) -> None:
    import torch
    import torch.distributed as dist

    if mode == "sleep":
        wait_for_data(600)
    elif mode == "fifo":
        load_next_batch(os.environ["HANG_FIFO"])
    elif mode == "op":
        dist.broadcast(grads, src=0)  # type: ignore[arg-type]
    elif mode == "size":
        dist.all_reduce(torch.ones(0))  # an empty last batch


if __name__ == "__main__":
    sys.exit(main())
