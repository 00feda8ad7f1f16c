"""The `procmem` parser over real captures of this machine's /proc (Linux 6.18.44, cgroup v1;
see tests/unit/procmem_samples/README.md for how they were made), split the way a run splits
the multi-file probe, and over the same captures with the lines older kernels lack removed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from runbook import bundle
from runbook.parsers import registry
from runbook.parsers.procmem import parse_smaps_rollup, parse_status, procmem_facts
from runbook.spec import load_file, resolve
from runbook.transports import framing
from runbook.transports.base import CommandResult
from tests.tools.framed import split_headers

SAMPLES = Path(__file__).parent / "procmem_samples"
MiB = 1 << 20

# the pids of the captures (README.md)
LAUNCHER, PAUSE, RANK0, RANK1 = 12053, 12054, 12055, 12056
R0_WORKERS, R1_WORKERS = (12058, 12059), (12061, 12062)
SHM_WORKER = 12058
SC_LAUNCHER, SC_RANK, SC_WORKERS = 12085, 12086, (12088, 12089)


def probe_output(name: str) -> str:
    return (SAMPLES / f"{name}.procmem.txt").read_text()


def files_of(stdout: str) -> dict[str, CommandResult]:
    """The probe's output as the executor hands it to parsers: split per file."""
    joined = CommandResult("procmem/*", "probe", stdout=stdout, exited=0)
    return {piece.name: piece for piece in split_headers(joined)}


def facts(stdout: str, **variables: Any) -> dict[str, Any]:
    parsed = procmem_facts(files_of(stdout), {"vars": variables})
    out: dict[str, Any] = json.loads(json.dumps(parsed))
    return out


def by_pid(f: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {p["pid"]: p for p in f["processes"]}


def drop_lines(stdout: str, *keys: str) -> str:
    """The capture as a kernel that does not print `keys` would have printed it."""
    pattern = re.compile(rf"^({'|'.join(keys)}):.*\n", re.MULTILINE)
    return pattern.sub("", stdout)


def drop_sections(stdout: str, suffix: str) -> str:
    """The capture without any `==> PID.suffix <==` file (a kernel without that /proc file)."""
    return re.sub(rf"\n==> \d+\.{suffix} <==\n.*?(?=\n==> |\Z)", "", stdout, flags=re.DOTALL)


def test_split_names_each_file_by_pid_so_processes_do_not_collide() -> None:
    names = sorted(files_of(probe_output("named")))
    assert "procmem/pids" in names
    assert f"procmem/{RANK0}.status" in names and f"procmem/{RANK0}.smaps_rollup" in names
    assert len([n for n in names if n.endswith(".status")]) == 8


def test_launcher_pause_ranks_and_named_workers_get_their_roles() -> None:
    f = facts(probe_output("named"))
    p = by_pid(f)
    assert (p[LAUNCHER]["role"], p[LAUNCHER]["why"]) == ("other", "launcher (torchrun)")
    assert (p[PAUSE]["role"], p[PAUSE]["why"]) == ("other", "infrastructure")
    assert {pid for pid, x in p.items() if x["role"] == "rank"} == {RANK0, RANK1}
    for rank, workers in ((RANK0, R0_WORKERS), (RANK1, R1_WORKERS)):
        for w in workers:
            assert p[w]["role"] == "worker" and p[w]["rank_pid"] == rank
            assert p[w]["name"] == "pt_data_worker"
    assert f["ranks"] == 2 and f["workers"] == 4
    assert f["workers_per_rank"] == {str(RANK0): 2, str(RANK1): 2}
    assert f["listed"] == 8 and f["vanished"] == []


def test_each_worker_costs_what_it_allocated_not_its_ranks_pages_again() -> None:
    """A forked worker's RssAnon counts its rank's pages (copy-on-write) again: 69 MiB for a
    16 MiB worker. Its own cost, from Pss_Anon, is within 1 MiB of the 16 MiB it touched."""
    f = facts(probe_output("named"))
    p = by_pid(f)
    for w in (*R0_WORKERS, *R1_WORKERS):
        assert p[w]["anon_bytes"] > 60 * MiB  # the shared pages, counted again
        assert 15 * MiB <= p[w]["own_anon_bytes"] <= 17 * MiB, p[w]
    # the ranks touched 48 and 56 MiB, plus the interpreter's own few MiB
    assert 48 * MiB <= p[RANK0]["own_anon_bytes"] <= 48 * MiB + 6 * MiB
    assert 56 * MiB <= p[RANK1]["own_anon_bytes"] <= 56 * MiB + 6 * MiB
    assert f["per_rank"]["anon_bytes"]["max"] == p[RANK1]["anon_bytes"]
    assert f["per_worker"]["own_anon_bytes"]["count"] == 4
    assert f["method"] == "pss"
    assert f["features"] == {"rss_anon": True, "smaps_rollup": True, "pss_anon": True}


def test_anon_of_all_processes_counted_once_matches_the_cgroups_own_count() -> None:
    """The sum of Pss_Anon is what the kernel charged: the v1 cgroup's total_rss, captured at
    the same moment, within 0.1%; the rank groups' attributed costs add up to the same."""
    f = facts(probe_output("named"))
    stat = (SAMPLES / "named.cgroup.txt").read_text()
    total_rss = int(re.search(r"^total_rss (\d+)$", stat, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert abs(f["total_anon_bytes"] - total_rss) <= total_rss * 0.001
    groups = f["per_rank"]["group_anon_bytes"]["total"] + f["other_anon_bytes"]
    assert abs(groups - total_rss) <= total_rss * 0.03


def test_a_mapped_shm_segment_is_the_workers_shmem_and_the_cgroups() -> None:
    f = facts(probe_output("named"))
    p = by_pid(f)
    assert p[SHM_WORKER]["shmem_bytes"] == 16 * MiB
    assert p[SHM_WORKER]["pss_shmem_bytes"] == 16 * MiB
    assert f["total_pss_shmem_bytes"] == 16 * MiB
    stat = (SAMPLES / "named.cgroup.txt").read_text()
    assert re.search(rf"^total_shmem {16 * MiB}$", stat, re.MULTILINE)


def test_workers_keeping_their_ranks_name_and_a_python_launcher_are_told_apart() -> None:
    """Before PyTorch named its workers they kept the rank's comm; and `python -m
    torch.distributed.run` is a `python3` too. The launcher is the one whose children have
    children; the rank's children are its workers."""
    f = facts(probe_output("same-comm"))
    p = by_pid(f)
    assert {x["name"] for x in p.values()} == {"python3"}
    assert p[SC_LAUNCHER]["role"] == "other" and "launcher" in p[SC_LAUNCHER]["why"]
    assert p[SC_RANK]["role"] == "rank"
    for w in SC_WORKERS:
        assert (p[w]["role"], p[w]["rank_pid"]) == ("worker", SC_RANK)
        assert 15 * MiB <= p[w]["own_anon_bytes"] <= 17 * MiB


@pytest.mark.parametrize("sample", ["named", "same-comm"])
def test_kernels_before_5_3_without_pss_anon_subtract_the_ranks_rss_anon(sample: str) -> None:
    """4.14-5.2: smaps_rollup has Rss, Pss, Anonymous but no Pss_Anon/Pss_File/Pss_Shmem (nor
    5.4's FilePmdMapped, 6.0's Pss_Dirty, 6.x's KSM)."""
    old = drop_lines(
        probe_output(sample), "Pss_Anon", "Pss_File", "Pss_Shmem", "Pss_Dirty", "KSM",
        "FilePmdMapped",
    )
    f = facts(old)
    assert f["method"] == "rss-difference"
    assert f["features"]["smaps_rollup"] and not f["features"]["pss_anon"]
    workers = [p for p in f["processes"] if p["role"] == "worker"]
    assert workers and all(p["pss_anon_bytes"] is None for p in workers)
    for w in workers:
        assert 15 * MiB <= w["own_anon_bytes"] <= 17 * MiB, w
    assert all(p["pss_bytes"] is not None for p in f["processes"])


def test_kernels_before_4_14_have_status_only_and_give_the_same_roles() -> None:
    f = facts(drop_sections(probe_output("named"), "smaps_rollup"))
    assert not f["features"]["smaps_rollup"]
    assert f["total_pss_bytes"] is None
    assert f["method"] == "rss-difference"
    assert f["ranks"] == 2 and f["workers"] == 4
    for w in facts(probe_output("named"))["worker_pids"]:
        own = by_pid(f)[w]["own_anon_bytes"]
        assert 15 * MiB <= own <= 17 * MiB


def test_kernels_before_4_5_fall_back_to_vmrss_and_say_so() -> None:
    old = drop_lines(
        drop_sections(probe_output("same-comm"), "smaps_rollup"), "RssAnon", "RssFile", "RssShmem"
    )
    f = facts(old)
    assert f["method"] == "rss"
    p = by_pid(f)
    assert p[SC_RANK]["anon_bytes"] is None
    assert p[SC_RANK]["own_anon_bytes"] == p[SC_RANK]["rss_bytes"]
    for w in SC_WORKERS:
        # VmRSS differences: the worker's 16 MiB, give or take the file pages each maps
        assert 12 * MiB <= p[w]["own_anon_bytes"] <= 20 * MiB, p[w]
    assert not f["features"]["rss_anon"]


def test_threads_listed_by_v1_tasks_are_not_processes() -> None:
    thread = (SAMPLES / "thread.status").read_text()
    status = parse_status(thread, 12087)
    assert (status.pid, status.tgid) == (12087, 12086)
    stdout = probe_output("same-comm") + f"\n==> 12087.status <==\n{thread}"
    f = facts(stdout)
    assert 12087 not in by_pid(f)
    assert f["ranks"] == 1 and f["workers"] == 2


def test_a_listed_pid_that_exited_before_it_was_read_is_reported_vanished() -> None:
    stdout = probe_output("same-comm").replace("==> pids <==\n", "==> pids <==\n99999\n", 1)
    f = facts(stdout)
    assert f["vanished"] == [99999]
    assert 99999 not in by_pid(f)


def test_a_zombie_holds_no_memory_and_is_left_out() -> None:
    stdout = probe_output("same-comm")
    zombie = "Name:\tpython3\nState:\tZ (zombie)\nTgid:\t12090\nPid:\t12090\nPPid:\t12086\n"
    f = facts(stdout + f"\n==> 12090.status <==\n{zombie}")
    assert 12090 not in by_pid(f)


def test_an_empty_cgroup_is_collected_with_no_process() -> None:
    f = facts("==> pids <==\n\n")
    assert f["collected"] is True
    assert (f["ranks"], f["workers"], f["processes"]) == (0, 0, [])


def test_not_collected_keeps_the_shape_templates_dig_into() -> None:
    f = procmem_facts({"procmem/*": CommandResult("procmem/*", "", collected=False)}, {})
    assert f["collected"] is False
    assert f["per_rank"]["anon_bytes"]["max"] is None
    assert f["per_worker"]["own_anon_bytes"]["max"] is None
    assert f["ranks"] == 0


def test_a_renamed_rank_binary_is_a_rank_by_rank_comm_or_by_the_fallback() -> None:
    stdout = probe_output("named").replace("Name:\tpython3", "Name:\ttrain_process")
    stdout = stdout.replace("Name:\ttorchrun", "Name:\tsupervisor")
    # no launcher name, no Python: the top process is a launcher by structure (children with
    # children), so its children are ranks whatever their name
    assert facts(stdout)["ranks"] == 2
    # a lone renamed rank without workers is no recognisable rank: the fallback takes it
    lone = (
        "==> pids <==\n7\n\n==> 7.status <==\n"
        + (SAMPLES / "thread.status").read_text()
        .replace("Name:\tpython3", "Name:\ttrain_process")
        .replace("Pid:\t12087", "Pid:\t7")
        .replace("Tgid:\t12086", "Tgid:\t7")
    )
    f = facts(lone)
    assert f["ranks"] == 1 and "no recognisable rank" in f["processes"][0]["why"]
    assert facts(lone, rank_comm="^train_")["processes"][0]["why"] == "matches rank_comm"


def test_a_known_sidecar_is_never_taken_for_a_rank() -> None:
    envoy = (SAMPLES / "thread.status").read_text().replace("Name:\tpython3", "Name:\tenvoy")
    envoy = envoy.replace("Pid:\t12087", "Pid:\t7").replace("Tgid:\t12086", "Tgid:\t7")
    f = facts(f"==> pids <==\n7\n\n==> 7.status <==\n{envoy}")
    assert f["ranks"] == 0 and f["processes"][0]["role"] == "other"


def test_smaps_rollup_fields_are_read_in_bytes() -> None:
    text = files_of(probe_output("named"))[f"procmem/{SHM_WORKER}.smaps_rollup"].stdout
    rollup = parse_smaps_rollup(text)
    assert rollup is not None
    assert rollup.pss_shmem_bytes == 16 * MiB
    assert rollup.anonymous_bytes is not None and rollup.anonymous_bytes % 1024 == 0
    assert parse_smaps_rollup("") is None


def test_registered_and_parsed_by_the_shipped_runbooks_cgroup_stage() -> None:
    assert "procmem" in registry.names()
    stage = load_file(resolve("nccl-init-failure")).stage("cgroup-memory")
    assert "procmem" in stage.parse
    probe = next(c for c in stage.collect if c.name == "procmem/*")
    assert "cmdline" not in probe.command and "environ" not in probe.command


def test_a_bundle_replays_to_the_same_facts(tmp_path: Path) -> None:
    """Written as a run writes it, read back as replay reads it: the same facts."""
    pieces = list(files_of(probe_output("named")).values())
    bundle.write_bundle(tmp_path, bundle.BundleMeta(node="n", collected_at="2025-01-01"), pieces)
    token = framing.new_token()
    replayed = bundle.Bundle.open(tmp_path).read_multi("procmem/*", token=token)
    again = {p.name: p for p in bundle.split_multi(replayed, token)}
    assert procmem_facts(again, {}) == procmem_facts(files_of(probe_output("named")), {})


def test_beside_named_workers_a_ranks_other_child_is_a_helper_not_a_worker() -> None:
    """multiprocessing's resource_tracker (a `python3` child of the rank) is no DataLoader
    worker when the rank's workers are named: it must not raise the worker count."""
    stdout = probe_output("named")
    tracker = (SAMPLES / "thread.status").read_text()
    tracker = tracker.replace("Pid:\t12087", "Pid:\t12070").replace("Tgid:\t12086", "Tgid:\t12070")
    tracker = tracker.replace("PPid:\t12085", f"PPid:\t{RANK0}")
    f = facts(stdout + f"\n==> 12070.status <==\n{tracker}")
    p = by_pid(f)
    assert p[12070]["ppid"] == RANK0
    assert (p[12070]["role"], p[12070]["why"]) == ("other", f"helper process of rank {RANK0}")
    assert f["workers_per_rank"] == {str(RANK0): 2, str(RANK1): 2}
