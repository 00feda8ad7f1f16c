"""Kernel log stamps beyond `dmesg -T` and plain `dmesg`, and what a file of unknown lines may
not prove. Lines from public incident threads (source beside each)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.parsers.dmesg import parse_dmesg

# `dmesg -H`: https://github.com/rwth-i6/returnn/issues/1500
RELTIME = [
    "[  +0.000001] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: "
    "0000:00:03.0",
    "[  +0.000004] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
    "type=Transaction Layer, (Requester ID)",
    "[  +0.000898] pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000",
    "[  +0.000889] pcieport 0000:00:03.0:    [ 5] SDES                  ",
]  # fmt: skip


def test_dmesg_reltime_lines_are_read_and_a_fatal_aer_found() -> None:
    facts = parse_dmesg(RELTIME, collected_at="2024-01-02T00:00:00")
    assert facts.recognized
    assert [a.severity for a in facts.fatal_aer] == ["fatal"]
    assert facts.fatal_aer[0].line == 1 and facts.fatal_aer[0].time is None


def test_dmesg_human_header_gives_the_minute() -> None:
    facts = parse_dmesg(
        ["[Mar 3 14:02] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
         "fallen off the bus."], collected_at="2025-03-04T00:00:00")  # fmt: skip
    assert facts.xids[0].code == 79 and facts.xids[0].time == "2025-03-03T14:02:00"


def test_dmesg_delta_stamps_are_monotonic_seconds() -> None:
    line = "[ 5021.113456 <    0.000412>] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE"
    facts = parse_dmesg([line])
    assert facts.xids[0].uptime_s == 5021.113456 and facts.xids[0].drain


def test_talos_kernel_lines_carry_their_time() -> None:
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/446
    line = ("192.168.11.119: kern: warning: [2026-04-22T21:25:20.505406921Z]: NVRM: Xid "
            "(PCI:0000:48:00): 62, 00002740 00002b08 00001126 0000117a 0000279f 0002a91a 00000011 "
            "00000000")  # fmt: skip
    facts = parse_dmesg([line])
    assert facts.xids[0].code == 62 and facts.xids[0].time == "2026-04-22T21:25:20.505406+00:00"


def test_a_secondary_xid_takes_the_judgement_of_the_xid_it_names() -> None:
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150
    line = ("kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused "
            "by previous Xid 149")  # fmt: skip
    x = parse_dmesg([line]).xids[0]
    assert (x.code, x.caused_by, x.gpu_fault) == (45, 149, True)
    assert "Xid 149" in x.meaning


def test_an_unknown_xid_is_unknown_not_benign() -> None:
    x = parse_dmesg(["[ 1.0] NVRM: Xid (PCI:0000:3b:00): 999, something new"]).xids[0]
    assert x.category == "unknown" and "look it up" in x.meaning


def test_a_file_of_lines_nobody_understands_is_unrecognized() -> None:
    facts = parse_dmesg(["<<weird>> pcieport something AER: text we do not know"] * 3)
    assert not facts.recognized
    assert parse_dmesg([]).recognized  # an empty log is clean, not unrecognized


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=10**40), st.text(max_size=200))
def test_any_xid_number_and_text_never_raise(code: int, rest: str) -> None:
    facts = parse_dmesg([f"[ 1.0] NVRM: Xid (PCI:0000:3b:00): {code}, {rest}"])
    assert len(facts.xids) <= 1


def test_iommu_faults_are_read_from_plain_lines_as_from_a_scanned_file() -> None:
    # https://github.com/NVIDIA/cuda-samples/issues/48 (parse_dmesg fed lines directly takes
    # its own fast path, which must know the catalog's kernel words too)
    line = ("Sep 21 09:59:59 runtime kernel: nvidia 0000:07:00.0: AMD-Vi: Event logged "
            "[IO_PAGE_FAULT domain=0x0003 address=0x80000040 flags=0x0020]")  # fmt: skip
    facts = parse_dmesg([line], collected_at="2020-09-22T00:00:00")
    assert [h.signature for h in facts.iommu_faults] == ["iommu-fault"]
