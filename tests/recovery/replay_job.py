"""A small CPU ``torch.distributed`` (gloo) training job whose host memory follows its loader
configuration, for the staged replay. It is a program, not a test module.

``python replay_job.py --ranks 2 --workers W --prefetch P --batch-mib B [--worker-mib M]
[--cache-mib C] [--hold S]`` is the job's launcher (named ``torchrun``, as the real one): it
imports torch once and forks the ranks (so the ranks share its pages, as forked processes do,
and a stage does not pay for an import per rank), waits for them, and exits with the first
non-zero status of a rank. Each rank does what a training input pipeline does, for real, as
tests/scenarios/rank.py's ranks do:

1. builds a data cache of C MiB (anonymous memory, every page touched);
2. forks W DataLoader workers (named ``pt_data_worker``, as PyTorch names them), each filling
   M MiB of its own;
3. fills its prefetch queue: P batches of B MiB, one after the other, in 16 MiB steps (a
   loader reads a batch in pieces), so the memory grows the way a real pipeline's does;
4. joins the process group (gloo, ``tcp://127.0.0.1:PORT`` in the node's own namespace), runs
   the first ``all_reduce`` and says so (``first all_reduce ok``: the first collective), then
   holds its memory for S seconds (the steady state) and exits.

Every line goes to standard output, flushed, prefixed with the rank.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as dt
import os
import signal
import socket
import sys
import time
import warnings

MIB = 1 << 20
PAGE = 4096
STEP = 16 * MIB


def say(rank: int, text: str) -> None:
    print(f"[{'launcher' if rank < 0 else f'rank{rank}'}] {text}", flush=True)


def fill(size: int, *, step_sleep: float = 0.004) -> bytearray:
    buf = bytearray(size)
    for start in range(0, size, STEP):
        for off in range(start, min(size, start + STEP), PAGE):
            buf[off] = 1
        time.sleep(step_sleep)
    return buf


def set_name(name: bytes) -> None:
    try:
        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def worker(rank: int, index: int, mib: int, hold_fd: int) -> None:
    set_name(b"pt_data_worker")
    keep = fill(mib * MIB)
    say(rank, f"worker {index} filled {mib} MiB")
    os.read(hold_fd, 1)  # until the rank closes the pipe
    del keep
    os._exit(0)


def rank_main(args: argparse.Namespace, rank: int) -> int:
    import torch
    import torch.distributed as dist

    set_name(b"python3")
    keep: list[object] = []
    if args.cache_mib:
        keep.append(fill(args.cache_mib * MIB))
        say(rank, f"cache {args.cache_mib} MiB")
    read_end, write_end = os.pipe()
    children = []
    for index in range(args.workers):
        pid = os.fork()
        if pid == 0:
            os.close(write_end)
            worker(rank, index, args.worker_mib, read_end)
        children.append(pid)
    os.close(read_end)
    for batch in range(args.prefetch):
        keep.append(fill(args.batch_mib * MIB))
        say(rank, f"prefetched batch {batch + 1}/{args.prefetch} of {args.batch_mib} MiB")
    dist.init_process_group("gloo", init_method=args.init_method, rank=rank,
                            world_size=args.ranks, timeout=dt.timedelta(seconds=30))
    t = torch.ones(1024)
    dist.all_reduce(t)
    say(rank, f"first all_reduce ok: {t[0].item():.0f}")
    time.sleep(args.hold)
    dist.barrier()
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    say(rank, "done")
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(args: argparse.Namespace) -> int:
    set_name(b"torchrun")
    warnings.simplefilter("ignore")
    import torch  # once, before the ranks fork: they share it

    say(-1, f"torch {torch.__version__} imported")
    args.init_method = f"tcp://127.0.0.1:{free_port()}"
    ranks = []
    for rank in range(args.ranks):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = rank_main(args, rank)
            except BaseException as exc:
                say(rank, f"{type(exc).__name__}: {exc}")
            finally:
                sys.stdout.flush()
                os._exit(code)  # no interpreter teardown of the forked copy
        ranks.append(pid)

    def stop(signum: int, frame: object) -> None:
        for pid in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in ranks]
    sys.stdout.flush()
    os._exit(next((c for c in codes if c != 0), 0))  # torch's teardown adds nothing here


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--prefetch", type=int, default=1)
    p.add_argument("--batch-mib", type=int, default=16)
    p.add_argument("--worker-mib", type=int, default=32)
    p.add_argument("--cache-mib", type=int, default=0)
    p.add_argument("--hold", type=float, default=0.5)
    args = p.parse_args(argv)
    return launch(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
