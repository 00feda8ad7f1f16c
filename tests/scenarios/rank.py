"""One rank of a small CPU ``torch.distributed`` (gloo) training job, run by the scenarios.

It is a program, not a test module: ``python rank.py --rank N --world-size W ...`` inside a test
host's namespaces and a real memory cgroup (see :mod:`tests.scenarios.job`). It does what the
incident's ranks did, on a small scale, so that what goes wrong goes wrong for real:

1. imports torch (~250-300 MiB per rank, most of a rank's footprint);
2. builds its host memory the way a training input pipeline does: a data cache (anonymous
   memory, every page touched), a prefetch queue (a list of batch buffers), locked buffers
   (``mmap(MAP_LOCKED)``, then ``mlock``; what pinned host memory is to the kernel) and files in
   the job's shm dir (a tmpfs: charged to the writer's cgroup, and they stay charged);
3. optionally fails in its own way first (``--fail``): a plain application bug, or the
   shared-memory segment NCCL's SHM transport would create, sized past what /dev/shm has left;
4. joins the process group (``init_method=tcp://...``), runs one ``all_reduce`` and a barrier.

Every line it logs carries an ISO-8601 UTC timestamp with milliseconds, to
``<log-dir>/rank-N.log``; an exception is logged as ``<Type>: <message>`` followed by its
traceback. A rank the kernel OOM-kills logs nothing more, as in production: the evidence of its
death is in the kernel log and the cgroup, which is the point of the runbook.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import logging
import mmap
import os
import resource
import sys
import time
import traceback
import warnings

MIB = 1 << 20
PAGE = mmap.PAGESIZE
MAP_LOCKED = 0x2000  # Linux; Python's mmap module has no constant for it

log = logging.getLogger("train")


class _UtcFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        stamp = dt.datetime.fromtimestamp(record.created, tz=dt.timezone.utc)
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _setup_logging(log_dir: str, rank: int) -> None:
    handler = logging.FileHandler(os.path.join(log_dir, f"rank-{rank}.log"))
    handler.setFormatter(_UtcFormatter(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def _touch(buf: bytearray | mmap.mmap, size: int) -> None:
    """Write one byte per page: the kernel charges a page to the cgroup when it is touched."""
    for off in range(0, size, PAGE):
        buf[off] = 1


def build_host_memory(args: argparse.Namespace) -> list[object]:
    """The rank's host memory, in the incident's categories; returned so it stays alive."""
    keep: list[object] = []
    if args.cache_mib:
        log.info("building data cache: %d MiB", args.cache_mib)
        cache = bytearray(args.cache_mib * MIB)
        _touch(cache, len(cache))
        keep.append(cache)
    if args.prefetch_mib:
        depth = 4
        log.info("filling prefetch queue: depth %d, %d MiB", depth, args.prefetch_mib)
        for _ in range(depth):
            batch = bytearray(args.prefetch_mib * MIB // depth)
            _touch(batch, len(batch))
            keep.append(batch)
    if args.locked_mib:
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        size = args.locked_mib * MIB
        log.info("locking %d MiB of host buffers (RLIMIT_MEMLOCK soft=%s hard=%s)", args.locked_mib,
                 soft, hard)
        try:
            locked = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_LOCKED)
        except OSError as exc:  # EAGAIN/ENOMEM past RLIMIT_MEMLOCK without CAP_IPC_LOCK
            log.warning("MAP_LOCKED refused (%s); falling back to mlock", exc)
            locked = mmap.mmap(-1, size)
            _touch(locked, size)
            libc = ctypes.CDLL(None, use_errno=True)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(locked))
            if libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) != 0:
                log.warning("mlock failed: %s", os.strerror(ctypes.get_errno()))
        else:
            _touch(locked, size)
        keep.append(locked)
    if args.shm_mib:
        path = os.path.join(args.shm_dir, f"torch-dataset-rank{args.rank}.bin")
        log.info("writing %d MiB to the shm dir: %s", args.shm_mib, path)
        with open(path, "wb") as f:
            chunk = b"\1" * MIB
            for _ in range(args.shm_mib):
                f.write(chunk)
    log.info("host memory built")
    return keep


def create_shm_segment(args: argparse.Namespace) -> None:
    """What NCCL's SHM transport does at communicator init (ncclShmOpen): create a segment in
    /dev/shm and extend it with posix_fallocate. On a full tmpfs that fails with ENOSPC; the
    rank logs it in NCCL's words and raises."""
    path = os.path.join(args.shm_dir, f"nccl-{os.getpid():x}")
    size = args.shm_segment_mib * MIB
    log.info("NCCL INFO creating shared-memory segment %s size %d", path, size)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        log.error("NCCL WARN Call to posix_fallocate failed : %s", os.strerror(exc.errno or 0))
        log.error("NCCL WARN Error while creating shared memory segment %s (size %d)", path, size)
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--init-method", required=True, help="tcp://ADDR:PORT")
    p.add_argument("--timeout", type=float, default=10.0, help="process-group timeout, seconds")
    p.add_argument("--log-dir", required=True)
    p.add_argument("--shm-dir", default="/dev/shm")
    p.add_argument("--cache-mib", type=int, default=0)
    p.add_argument("--prefetch-mib", type=int, default=0)
    p.add_argument("--locked-mib", type=int, default=0)
    p.add_argument("--shm-mib", type=int, default=0)
    p.add_argument("--shm-segment-mib", type=int, default=0)
    p.add_argument("--fail", choices=["none", "value-error", "shm-segment"], default="none")
    p.add_argument("--linger", type=float, default=0.0, help="seconds to hold memory at the end")
    args = p.parse_args(argv)
    _setup_logging(args.log_dir, args.rank)
    log.info("rank %d of %d starting (pid %d), init_method %s", args.rank, args.world_size,
             os.getpid(), args.init_method)
    try:
        warnings.simplefilter("ignore")  # torch warns about numpy being absent
        import torch
        import torch.distributed as dist

        log.info("torch %s imported", torch.__version__)
        keep = build_host_memory(args)
        if args.fail == "value-error":
            log.info("parsing the dataset shard spec")
            raise ValueError(f"invalid shard spec 'train-{args.rank:05d}-of-00000': zero shards")
        if args.fail == "shm-segment":
            # the segment comes after the rendezvous, as NCCL's does; rank 0 first
            dist.init_process_group(
                "gloo", init_method=args.init_method, rank=args.rank, world_size=args.world_size,
                timeout=dt.timedelta(seconds=args.timeout),
            )
            log.info("process group up")
            for turn in range(args.world_size):
                if turn == args.rank:
                    create_shm_segment(args)
                dist.barrier()
        else:
            log.info("init_process_group(gloo, %s)", args.init_method)
            dist.init_process_group(
                "gloo", init_method=args.init_method, rank=args.rank, world_size=args.world_size,
                timeout=dt.timedelta(seconds=args.timeout),
            )
            log.info("process group up")
        t = torch.ones(1024)
        dist.all_reduce(t)
        log.info("all_reduce ok: %s", t[0].item())
        dist.barrier()
        if args.linger:
            time.sleep(args.linger)
        dist.destroy_process_group()
        del keep
        log.info("done")
        return 0
    except BaseException as exc:
        log.error("%s: %s", type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc)
                  else "")
        # the traceback as Python prints it (untimed lines), after the timed summary line
        handler = log.handlers[0]
        assert isinstance(handler, logging.FileHandler)
        handler.stream.write(traceback.format_exc())
        handler.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
