"""The signature catalog (runbook/data/signatures.yaml): every entry is proved by a real line.

Each sample below is machine output copied from a public incident thread (the source is named
beside it); the line is given as posted, launcher prefixes included, and must be read behind
them (runbook.parsers.lines) to the entry that names it.
"""

from __future__ import annotations

import pytest

from runbook import signatures
from runbook.parsers.lines import strip

# (signature id, the line as posted, the public source)
SAMPLES = [
    ("slurm-cgroup-oom",
     "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your "
     "processes may have been killed by the cgroup out-of-memory handler.",
     "https://github.com/ZwwWayne/K-Net/issues/30"),
    ("dcgm-diag-hardware-error",
     "| Error                     | GPU 3 has uncorrectable memory errors and row  |",
     "https://github.com/stas00/ml-engineering (compute/accelerator/nvidia/debug.md, "
     "`srun ... dcgmi diag -r 3` on a node with repeating Xid 64)"),
    ("cuda-uncorrectable-ecc", "RuntimeError: CUDA error: uncorrectable ECC error encountered",
     "https://github.com/jade-hpc-gpu/jade-hpc-gpu.github.io/issues/194"),
    ("nccl-ib-verbs-failure", "misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed",
     "https://github.com/NVIDIA/nccl/issues/451"),
    ("nccl-ib-verbs-failure",
     "ibvwrap.cc: NCCL WARN Call to ibv_modify_qp failed with error Connection timed out",
     "https://github.com/NVIDIA/nccl/issues/769"),
    ("nccl-ib-missing", "NCCL INFO NET/IB : No device found.",
     "https://github.com/NVIDIA/nccl/issues/451"),
    ("cuda-oom",
     "[gpu187:2]:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB "
     "(GPU 2; 79.35 GiB total capacity; 33.66 GiB already allocated; 709.69 MiB free; 34.91 GiB "
     "reserved in total by PyTorch)",
     "https://github.com/huggingface/accelerate/issues/1519"),
    ("cuda-oom",
     "ins-7df6eojsifuykig9:3018451:3018451 [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of "
     "memory'", "https://github.com/PKU-YuanGroup/Open-Sora-Plan/issues/386"),
    ("cuda-oom", "ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc "
     "6291456 bytes", "https://github.com/NVIDIA/nccl/issues/1235"),
    ("shm-exhausted",
     "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
     "shared memory (shm).", "https://github.com/pangeo-data/pangeo-docker-images/issues/258"),
    ("shm-exhausted",
     "RuntimeError: DataLoader worker (pid 262) is killed by signal: Bus error. It is possible "
     "that dataloader's workers are out of shared memory. Please try to raise your shared memory "
     "limit.", "https://github.com/NVlabs/Deep_Object_Pose/issues/297"),
    ("p2p-unsupported",
     "(pid=909608) z-pc:909608:910337 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC "
     "handle : 217 peer access is not supported between these two devices",
     "https://github.com/ray-project/ray_lightning/issues/24"),
    ("socket-no-interface", "[rank0]: Bootstrap : no socket interface found",
     "https://github.com/EvolvingLMMs-Lab/open-r1-multimodal/issues/7"),
    ("socket-connect-failed",
     "include/socket.h:344 WARN Socket creation failed : Address family not supported by protocol",
     "https://github.com/NVIDIA/nccl/issues/210"),
    ("nccl-socket-system-error",
     "dso-s1-r1-a100-03:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2",
     "https://github.com/NVIDIA/nccl/issues/1000"),
    # NCCL 2.0–2.4: no `NCCL` before WARN/INFO, include/socket.h and bootstrap.cu
    ("socket-connect-failed",
     "gpu-bql-144-103:18553:18611 [0] include/socket.h:360 WARN Call to connect failed : "
     "Connection timed out", "https://github.com/NVIDIA/nccl-tests/issues/15"),
    ("nccl-socket-system-error", "gpu-bql-144-103:18553:18611 [0] INFO bootstrap.cu:28 -> 2 [Net]",
     "https://github.com/NVIDIA/nccl-tests/issues/15"),
    # NCCL_SOCKET_IFNAME naming an interface the node lacks (2.27.7)
    ("socket-no-interface",
     "[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is neither "
     "AF_INET(2) nor AF_INET6(10)", "https://github.com/NVIDIA/nccl/issues/1837"),
    # DeepSpeed's loss scaler raises the built-in Exception
    ("python-exception",
     "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting "
     "run.", "https://github.com/ymcui/Chinese-LLaMA-Alpaca/issues/534"),
    ("peer-closed",
     "ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed "
     "by remote peer ng30903-ib.narval.calcul.quebec<51159>",
     "https://github.com/NVIDIA/nccl/issues/1235"),
    ("store-timeout", "RuntimeError: Socket Timeout", "https://github.com/pytorch/pytorch/issues/55571"),
    ("collective-timeout",
     "[rank0]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE, "
     "NumelIn=544997376, NumelOut=68124672, Timeout(ms)=600000) ran for 600061 milliseconds "
     "before timing out.", "https://github.com/hiyouga/LlamaFactory/issues/6269"),
    ("host-alloc-failed", "terminate called after throwing an instance of 'std::bad_alloc'",
     "https://github.com/huggingface/lerobot/issues/2209"),
    ("rank-killed", "  exitcode  : -9 (pid: 1286)", "https://github.com/zai-org/GLM-130B/issues/31"),
    ("rank-killed", "RuntimeError: DataLoader worker (pid 4411) is killed by signal: Killed",
     "https://github.com/open-mmlab/mmrotate/issues/501"),
    ("launcher-failed", "Primary job  terminated normally, but 1 process returned",
     "https://github.com/horovod/horovod/issues/1350"),
    ("nccl-surfaced",
     "rdma-test-gpu-worker-1: torch.distributed.DistBackendError: NCCL error in: "
     "/opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1197, unhandled cuda "
     "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.3",
     "https://github.com/NVIDIA/nccl/issues/1029"),
    ("nccl-plugin-probe",
     "VM-0-14-tencentos:162637:162637 [6] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot "
     "open shared object file: No such file or directory No plugin found (libnccl-net.so), using "
     "internal implementation", "https://github.com/NVIDIA/nccl/issues/1231"),
    ("nccl-plugin-probe",
     "h0913n-ubuntu:12877:12877 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
     "https://github.com/NVIDIA/nccl/issues/259"),
    ("nccl-setting-adjusted",
     "node0021:21858:22794 [5] graph/search.cc:765 NCCL WARN Could not find a path for pattern 4, "
     "falling back to simple order", "https://github.com/NVIDIA/nccl/issues/487"),
    ("nccl-setting-adjusted",
     "nodea:26799:27025 [0] graph/tuning.cc:187 NCCL WARN CollNet is not supported or fails to "
     "initialize, ignoring NCCL_ALGO=COLLNET", "https://github.com/NVIDIA/nccl-tests/issues/133"),
    ("python-warning",
     "/home/krumo/work/utils/anaconda3/envs/knet/lib/python3.7/multiprocessing/semaphore_tracker.py"
     ":144: UserWarning: semaphore_tracker: There appear to be 56 leaked semaphores to clean up at "
     "shutdown", "https://github.com/ZwwWayne/K-Net/issues/30"),
    ("cuda-error", "rdma-test-gpu-worker-1: Cuda failure 'initialization error'",
     "https://github.com/NVIDIA/nccl/issues/1029"),
    ("cuda-error",
     "(train_rft pid=2657296) 2024-05-11 14:10:52.227 n176-080-198:2657296:2658232 [0] "
     "include/alloc.h:102 NCCL WARN Cuda failure 1 'invalid argument'",
     "https://github.com/NVIDIA/nccl/issues/1283"),
    ("nccl-warn", "misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3",
     "https://github.com/NVIDIA/nccl-tests/issues/188"),
    ("python-exception", "[rank5]: ValueError: File data/mllm_dome.json not found.",
     "https://github.com/hiyouga/LlamaFactory/issues/6191"),
    ("python-exception", "[1,2]<stderr>:KeyError: 'img_r1'",
     "https://github.com/ChenRocks/UNITER/issues/42"),
]  # fmt: skip

KERNEL_SAMPLES = [
    ("iommu-fault",
     "Sep 21 09:59:59 runtime kernel: nvidia 0000:07:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT "
     "domain=0x0003 address=0x80000040 flags=0x0020]",
     "https://github.com/NVIDIA/cuda-samples/issues/48"),
    ("nvswitch-sxid",
     "192.168.11.119: kern:     err: [2026-04-22T21:25:20.466440686Z]: nvidia-nvswitch1: SXid "
     "(PCI:0000:aa:00.0): 24007, Severity 1 Engine instance 12 Sub-engine instance 00",
     "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/446"),
    # the driver wants the GPU reset and logs no Xid: GSP-RM status 0x62, RmInitAdapter 0x62
    ("nvrm-gpu-reset-required",
     "[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
     "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874 ",
     "https://github.com/scitix/sichek/issues/51"),
    ("nvrm-gpu-reset-required",
     "[  101.209077] NVRM: GPU 0000:a1:00.0: RmInitAdapter failed! (0x62:0x40:2168)",
     "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1230"),
    ("nvrm-gpu-reset-required",
     "[  101.287620] NVRM: GPU6 _kgspBootGspRm: (the GPU is likely in a bad state and may need to "
     "be reset)", "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1230"),
]  # fmt: skip


@pytest.mark.parametrize(("sig_id", "line", "source"), SAMPLES)
def test_a_real_line_reads_as_its_signature_behind_its_prefixes(
    sig_id: str, line: str, source: str
) -> None:
    text = strip(line).text.strip()
    found = signatures.catalog().classify(text)
    assert found is not None and found.id == sig_id, (source, found)


@pytest.mark.parametrize(("sig_id", "line", "source"), KERNEL_SAMPLES)
def test_a_real_kernel_line_reads_as_its_signature(sig_id: str, line: str, source: str) -> None:
    found = signatures.catalog().classify(line, kernel=True)
    assert found is not None and found.id == sig_id, (source, found)


def test_every_catalog_entry_has_a_real_sample_with_its_source() -> None:
    sampled = {s for s, _, src in SAMPLES + KERNEL_SAMPLES if src.startswith("https://github.com/")}
    entries = {s.id for s in signatures.catalog().signatures}
    assert entries <= sampled, f"no real sample for {sorted(entries - sampled)}"


def test_a_peer_that_went_away_is_never_a_cause() -> None:
    for sig in signatures.catalog().signatures:
        if sig.role in ("peer-consequence", "surfaced", "benign"):
            assert sig.cause is None, sig.id


def test_a_malformed_catalog_is_refused_with_the_entry_named() -> None:
    bad = {"format": 1, "signatures": [{"id": "x", "class": "nccl", "role": "cause",
                                        "cause": "not-a-cause", "patterns": ["a"]}]}  # fmt: skip
    with pytest.raises(signatures.CatalogError, match="signature 'x'"):
        signatures.build(bad)
    bad["signatures"][0].update(cause=None, patterns=["("])  # type: ignore[index]
    with pytest.raises(signatures.CatalogError, match="pattern"):
        signatures.build(bad)


def test_a_megabyte_line_costs_what_a_short_one_does() -> None:
    line = "x" * (1 << 20) + " Cuda failure 'out of memory'"
    assert signatures.catalog().classify(line) is None  # beyond MAX_MATCH: not read
    assert signatures.catalog().classify("NCCL WARN " + "y" * (1 << 20)) is not None
