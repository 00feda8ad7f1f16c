from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers import registry
from runbook.parsers.dmesg import DmesgFacts, parse_dmesg
from runbook.parsers.xid import catalog, lookup

from .helpers import missing, result, roundtrip, sample, sample_lines

GiB = 1024**3
INCIDENT = "dmesg/incident-dmesg-T-v2.txt"
POD_SLICE = (
    "/kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod7c1d3a52_8e4b_4f0a_9d21_5b6c8e9f0a13.slice"
)


def parse(path: str, **kw: object) -> DmesgFacts:
    return parse_dmesg(sample_lines(path), collected_at="2025-03-04T12:00:00Z", **kw)  # type: ignore[arg-type]


def test_the_incident_memcg_oom_is_one_event_at_640_gib_usage_equal_to_limit() -> None:
    facts = parse(INCIDENT)
    assert len(facts.memcg_ooms) == 1
    assert facts.global_ooms == ()
    oom = facts.memcg_ooms[0]
    assert oom.usage_bytes == 640 * GiB
    assert oom.limit_bytes == 640 * GiB
    assert oom.at_limit
    assert oom.memcg == POD_SLICE
    assert oom.task_memcg is not None and oom.task_memcg.startswith(POD_SLICE + "/cri-containerd-")
    assert (oom.killed_pid, oom.killed_comm) == (48230, "train_process")
    assert oom.constraint == "CONSTRAINT_MEMCG"
    assert oom.text.endswith("invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
                             "oom_score_adj=984")
    assert oom.time == "2025-03-04T10:12:01"
    assert oom.kill_text is not None and "Killed process 48230" in oom.kill_text
    assert oom.stat_shmem_bytes == 50 * GiB
    assert oom.shmem_rss_bytes == 6710886 * 1024


def test_pinning_failures_of_4_and_16_gib_are_found_with_their_lines() -> None:
    facts = parse(INCIDENT)
    maps = [p for p in facts.pin_failures if p.kind == "cannot-map"]
    assert [p.pages for p in maps] == [0x100000, 0x400000]
    assert [p.bytes for p in maps] == [4 * GiB, 16 * GiB]
    lines = sample_lines(INCIDENT)
    for p in maps:
        assert "Cannot map memory" in lines[p.line - 1]
    locks = [p for p in facts.pin_failures if p.kind == "os_lock_user_pages"]
    assert len(locks) == 1 and locks[0].comm == "train_process"


def test_page_size_scales_pinned_bytes() -> None:
    facts = parse(INCIDENT, page_size=65536)
    maps = [p for p in facts.pin_failures if p.kind == "cannot-map"]
    assert maps[0].bytes == 0x100000 * 65536


def test_the_allocation_failure_is_attributed_to_nvidia_pinning_and_precedes_the_oom() -> None:
    facts = parse(INCIDENT)
    (alloc,) = facts.page_alloc_failures
    assert alloc.comm == "train_process"
    assert alloc.nvidia_pinning
    assert alloc.order == 0
    assert alloc.line < facts.memcg_ooms[0].line


def test_the_incident_has_no_hardware_signal() -> None:
    facts = parse(INCIDENT)
    assert facts.xids == () and facts.fallen_off_bus == () and facts.aer == ()


def test_an_oom_in_another_pods_cgroup_is_recorded_with_its_own_memcg() -> None:
    facts = parse("dmesg/ubuntu-5.4-v1-plain-other-pod.txt")
    (oom,) = facts.memcg_ooms
    assert oom.memcg == "/kubepods/burstable/pod3b9c2e10-7d4a-4c1e-9f00-2a6b8c7d9e01"
    assert "7c1d3a52" not in (oom.memcg or "")
    assert oom.usage_bytes == oom.limit_bytes == 8 * GiB
    assert oom.failcnt == 1923
    assert oom.swap_limit_bytes is None  # memory+swap unlimited
    assert oom.kmem_usage_bytes == 40112 * 1024


def test_plain_dmesg_keeps_monotonic_seconds_and_no_wall_time_without_a_boot_time() -> None:
    facts = parse("dmesg/ubuntu-5.4-v1-plain-other-pod.txt")
    oom = facts.memcg_ooms[0]
    assert oom.uptime_s == pytest.approx(81234.567001)
    assert oom.time is None
    assert facts.time_format == "monotonic"


def test_plain_dmesg_gets_wall_time_from_the_boot_time() -> None:
    facts = parse("dmesg/ubuntu-5.4-v1-plain-other-pod.txt", boot_epoch=1741000000.0)
    assert facts.memcg_ooms[0].time == "2025-03-04T09:40:34.567001+00:00"


def test_old_kernel_oom_with_sacrifice_child_and_task_in_lines_is_one_memcg_event() -> None:
    facts = parse("dmesg/old-4.14-v1-plain.txt")
    (oom,) = facts.memcg_ooms
    assert oom.memcg == "/kubepods/burstable/pod1f8e9c20-5b7a-11e9-8647-d663bd873d93"
    assert oom.task_memcg is not None and oom.task_memcg.startswith(oom.memcg + "/")
    assert (oom.killed_pid, oom.killed_comm) == (20114, "java")
    assert oom.usage_bytes == oom.limit_bytes == 2 * GiB
    assert oom.failcnt == 8431
    assert oom.anon_rss_bytes == 2077608 * 1024
    assert oom.kill_line == 32
    assert oom.constraint is None


def test_a_corrected_aer_error_is_counted_not_fatal() -> None:
    facts = parse("dmesg/old-4.14-v1-plain.txt")
    assert facts.aer == () and facts.fatal_aer == ()
    (corrected,) = facts.aer_corrected
    assert (corrected.device, corrected.reports) == ("0018", 1)  # `received: id=0018` (4.x)
    assert corrected.first.line == corrected.last.line == 34
    assert corrected.first.uptime_s == 6001.000001
    assert facts.totals["aer_corrected"] == 1


def test_an_old_style_allocation_failure_without_a_driver_trace_is_not_pinning() -> None:
    facts = parse("dmesg/old-4.14-v1-plain.txt")
    (alloc,) = facts.page_alloc_failures
    assert (alloc.comm, alloc.order, alloc.nvidia_pinning) == ("python", 4, False)
    assert facts.pin_failures == ()


def test_journal_kernel_lines_give_a_global_oom_with_wall_time() -> None:
    facts = parse("dmesg/journal-k-global-oom.txt")
    assert facts.memcg_ooms == ()
    (oom,) = facts.global_ooms
    assert oom.scope == "global" and oom.constraint == "CONSTRAINT_NONE"
    assert (oom.killed_pid, oom.killed_comm) == (77120, "stress")
    assert oom.time == "2025-03-04T10:30:00"
    assert facts.time_format == "syslog"


def test_iso_timestamps_and_nvrm_prefixed_map_failures() -> None:
    facts = parse("dmesg/iso-nvrm-cannot-map.txt")
    assert [p.bytes for p in facts.pin_failures] == [1 * GiB, 0x8700C * 4096]
    assert facts.pin_failures[0].time == "2025-03-04T10:11:58.100300+00:00"


XID_SAMPLE = "dmesg/xid-aer-plain.txt"


@pytest.mark.parametrize(
    ("code", "device", "pid", "process", "category", "drain"),
    [
        (13, "0000:3b:00", 30211, "python", "application", False),
        (43, "0000:3b:00", 30211, "python", "application", False),
        (48, "0000:5e:00", None, None, "hardware", True),
        (79, "0000:af:00", None, None, "hardware", True),
        (45, "0000:18:00", 50211, "python3", "secondary", False),
        (154, "0000:86:00", None, None, "informational", False),
    ],
)
def test_xid_lines_in_every_variant_are_classified(
    code: int, device: str, pid: int | None, process: str | None, category: str, drain: bool
) -> None:
    facts = parse(XID_SAMPLE)
    x = next(x for x in facts.xids if x.code == code)
    assert (x.device, x.pid, x.process, x.category, x.drain) == (
        device, pid, process, category, drain
    )


def test_a_repeated_contained_ecc_xid_justifies_a_drain() -> None:
    facts = parse(XID_SAMPLE)
    x94 = [x for x in facts.xids if x.code == 94]
    assert len(x94) == 2 and all(x.repeated and x.drain for x in x94)
    single = parse_dmesg(
        ["[ 1.0] NVRM: Xid (PCI:0000:86:00): 94, pid=1, name=p, Contained: SM (0x1)."]
    )
    assert not single.xids[0].drain and single.xids[0].gpu_fault


def test_xid_154_keeps_the_recovery_action() -> None:
    facts = parse(XID_SAMPLE)
    x = next(x for x in facts.xids if x.code == 154)
    assert x.recovery_action == "0x1 (GPU Reset Required)"


def test_fallen_off_the_bus_is_found_with_and_without_xid_and_across_lines() -> None:
    facts = parse(XID_SAMPLE)
    assert [(f.device, f.xid) for f in facts.fallen_off_bus] == [
        ("0000:af:00", 79),
        ("0000:af:00.0", None),
        ("0000:b3:00.0", None),
    ]
    assert facts.fallen_off_bus[2].line == 15


def test_aer_severity_device_and_first_error() -> None:
    facts = parse(XID_SAMPLE)
    summary = [(a.severity, a.device, a.first_error, a.vendor_device) for a in facts.aer]
    assert summary == [
        ("fatal", "0000:3b:00.0", "SDES", "10de:2330"),
        ("non-fatal", "0000:40:00.0", "CmpltTO", "10de:20b5"),
        ("fatal", "0000:00:03.0", "Surprise Down Error", "8086:2f08"),
    ]
    assert [a.fatal for a in facts.aer] == [True, False, True]
    assert len(facts.fatal_aer) == 3
    # the corrected report between them is counted under its device, its detail lines not
    # taken for the records around it
    assert [(c.device, c.reports) for c in facts.aer_corrected] == [("0000:d8:00.0", 1)]


def test_xid_table_documents_the_drain_choice_per_code() -> None:
    for code in (13, 31, 43, 45, 68, 69):
        assert not lookup(code).drain
    for code in (48, 61, 62, 64, 74, 79, 95, 119, 120, 140):
        assert lookup(code).drain and lookup(code).gpu_fault
    assert lookup(94).drain_if_repeated and not lookup(94).drain
    assert lookup(92).gpu_fault and not lookup(92).drain
    assert lookup(99999).category == "unknown"
    assert all(info.meaning for info in catalog().values())


def test_the_registered_adapter_reads_dmesg_txt_and_is_json() -> None:
    fn = registry.get("dmesg").func
    files = {"dmesg.txt": result("dmesg.txt", sample(INCIDENT))}
    facts = roundtrip(fn(files, {"page_size": 4096, "collected_at": "2025-03-04T12:00:00Z"}))
    assert facts["collected"] is True
    assert len(facts["memcg_ooms"]) == 1
    assert facts["memcg_ooms"][0]["usage_bytes"] == 640 * GiB
    assert facts["memcg_ooms"][0]["source"] == "dmesg.txt"
    assert facts["fatal_aer"] == [] and facts["drain_xids"] == []


def test_the_adapter_uses_clock_txt_for_plain_dmesg_wall_time() -> None:
    fn = registry.get("dmesg").func
    files = {
        "dmesg.txt": result("dmesg.txt", "[ 100.500000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has "
                            "fallen off the bus.\n"),
        "clock.txt": result("clock.txt", "1741090000.000000000\n1000.00 15000.00\n"),
    }
    facts = fn(files, {})
    assert facts["xids"][0]["time"] == "2025-03-04T11:51:40.500000+00:00"
    assert facts["xids"][0]["uptime_s"] == 100.5
    ctx = {"uptime_s": 2000.0, "now": "2025-03-04T12:00:00Z"}
    assert fn(files, ctx)["xids"][0]["time"] == "2025-03-04T11:28:20.500000+00:00"


def test_an_uncollected_dmesg_says_so() -> None:
    fn = registry.get("dmesg").func
    assert fn({"dmesg.txt": missing("dmesg.txt")}, {}) == {"collected": False}
    assert fn({}, {}) == {"collected": False}


def _check_types(facts: DmesgFacts) -> None:
    assert isinstance(facts.lines, int)
    for name in ("memcg_ooms", "global_ooms", "page_alloc_failures", "pin_failures", "xids",
                 "fallen_off_bus", "aer"):
        records = getattr(facts, name)
        assert isinstance(records, tuple)
        for r in records:
            assert isinstance(r.line, int) and r.line >= 1
            assert isinstance(r.text, str) and len(r.text) <= 300
            assert r.time is None or isinstance(r.time, str)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=40))
def test_arbitrary_text_never_raises_and_keeps_types(lines: list[str]) -> None:
    _check_types(parse_dmesg(lines))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([INCIDENT, XID_SAMPLE, "dmesg/old-4.14-v1-plain.txt",
                        "dmesg/journal-k-global-oom.txt"]), st.integers(0, 20000))
def test_a_truncated_sample_never_raises(path: str, cut: int) -> None:
    text = sample(path)[:cut]
    _check_types(parse_dmesg(text.splitlines(), collected_at="2025-03-04T12:00:00Z"))


def test_a_huge_log_streams_from_a_generator_and_keeps_a_bounded_number_of_records() -> None:
    from runbook.parsers._common import MAX_RECORDS

    def lines():  # type: ignore[no-untyped-def]
        for i in range(3 * MAX_RECORDS):
            yield f"[{i}.000000] NVRM: Xid (PCI:0000:3b:00): 13, pid={i}, name=p, Graphics Exc"
            yield f"[{i}.000001] usb 1-1: new high-speed USB device number {i}"

    facts = parse_dmesg(lines())
    assert len(facts.xids) == MAX_RECORDS and facts.totals["xids"] == 3 * MAX_RECORDS
    assert facts.lines == 6 * MAX_RECORDS and facts.xids[0].line == 1
