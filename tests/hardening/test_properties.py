"""Every parser takes any input: no exception escapes, and the facts stay well-typed.

Property tests (hypothesis) of each parser registered in runbook/parsers/ (through the registry,
as the executor calls it: `fn(files, context)`) and of the pure job parsers (Slurm's
`scontrol`/`sacct` text and hostlists, `--hosts-from-file` files, Kubernetes pods), on:

* arbitrary text, mixed with real lines and hostile numbers (`nan`, `1e999`, 5000 digits);
* arbitrary bytes, decoded as the transports decode them (UTF-8, errors replaced) and also with
  `surrogateescape` (lone surrogates, as Python gives undecodable argv and file names);
* mixed encodings: real lines in latin-1, UTF-16 fragments (with and without a BOM), NULs;
* the recorded bundles (tests/bundles/, the demo incident) and the samples under tests/unit and
  tests/job, cut at any byte and spliced with garbage;
* lines of several MiB;
* hostile run context: the evidence-derived clock values and `--var`s the parsers read.

"Well-typed" is the contract the engine relies on: facts are JSON (strictly: no NaN or
infinity, which `verdict.json` readers such as jq refuse), a dict with the documented keys
(`CONTRACT`: each key the parser returns on real evidence, with its type).

The examples each property ran are counted and printed at the end of the module (the profile
`runbook-hardening` sets how many: RUNBOOK_HYPOTHESIS_EXAMPLES, default 200 each).
"""

from __future__ import annotations

import collections
import fnmatch
import json
import os
import time
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runbook.bundle import Bundle
from runbook.job import kube_pods, slurm_parse
from runbook.job.resolve_hosts import parse_hosts_file, parse_ranks
from runbook.parsers import registry
from runbook.transports.base import CommandResult, decode
from tests.tools import bundles
from tests.tools.framed import split_headers

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("RUNBOOK_HYPOTHESIS_EXAMPLES", "200"))
settings.register_profile(
    "runbook-hardening",
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("runbook-hardening")
#: examples run per property (test node id → count), printed when the module ends
RAN: collections.Counter[str] = collections.Counter()
HUGE_LINE_BYTES = 2 * 1024 * 1024


def _count(request: pytest.FixtureRequest) -> None:
    RAN[request.node.name] += 1


def run(prop: Any, request: pytest.FixtureRequest) -> None:
    """Run a property and check it ran its examples (hypothesis stops early only when it has
    tried every distinct input, which none of these strategies allows)."""
    prop()
    assert RAN[request.node.name] >= min(EXAMPLES, 20), (request.node.name, RAN)


@pytest.fixture(scope="module", autouse=True)
def _report_examples(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not RAN:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(f"hypothesis examples run per property ({sum(RAN.values())} in all):")
        for name, count in sorted(RAN.items()):
            reporter.write_line(f"  {count:5d}  {name}")


# -- the corpus: real evidence ---------------------------------------------------------------


@cache
def bundle_files() -> list[dict[str, CommandResult]]:
    """Every recorded bundle's files, as the replay transport reads them, plus the procmem
    captures and a recovery run (the only inputs the recorded bundles lack)."""
    roots = [bundles.path(name) for name in bundles.names()]
    out = []
    for root in [*roots, REPO / "runbook" / "demo" / "incident"]:
        bundle = Bundle.open(root)
        out.append({name: bundle.read(name) for name in bundle.names()})
    for capture in sorted((REPO / "tests" / "unit" / "procmem_samples").glob("*.txt")):
        joined = CommandResult("procmem/*", "tail -v", stdout=capture.read_text(), exited=0)
        out.append({piece.name: piece for piece in split_headers(joined)})
    perf = REPO / "tests" / "scenarios" / "node-data" / "healthy-8gpu" / "all_reduce_perf.txt"
    name = "nccl-tests/recovery-1.txt"
    out.append({name: _result(name, perf.read_text())})
    return out


@cache
def sample_texts() -> list[tuple[str, str]]:
    """(path, text) of every real-format sample: bundle evidence, parser, Slurm and hang samples
    (py-spy, faulthandler, flight recorder, watchdog and ncclras output)."""
    found = [
        (name, result.stdout)
        for files in bundle_files()
        for name, result in files.items()
        if result.stdout
    ]
    for folder in ("tests/unit/parsers/samples", "tests/job/slurm", "tests/hang/samples"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix != ".md":
                found.append((path.relative_to(REPO).as_posix(), path.read_text(errors="replace")))
    return found


@cache
def real_lines() -> list[str]:
    lines = {line for _, text in sample_texts() for line in text.splitlines() if line.strip()}
    return sorted(lines)[:5000]


@cache
def file_names() -> list[str]:
    names = {name for files in bundle_files() for name in files}
    return sorted(
        names
        | {
            "ibv-devinfo.txt",
            "timezone.txt",
            "hostname.txt",
            "dcgmi-discovery.txt",
            "dcgmi-health.txt",
            "dcgmi-diag.txt",
        }
    )


#: which bundle files each parser reads (from its registry summary and module constants)
READS: dict[str, tuple[str, ...]] = {
    "applog": ("app/*", "nccl/*", "nccl-tests/*",),
    "cgroup": ("cgroup/*",),
    "clock": ("clock.txt",),
    "dcgm": ("dcgmi-discovery.txt", "dcgmi-health.txt"),
    "dcgm_diag": ("dcgmi-diag.txt",),
    "dmesg": ("dmesg.txt", "clock.txt"),
    "flight_recorder": ("fr/*",),
    "hang": ("fr/*", "pyspy/*", "app/*", "nccl/*", "ranks.txt", "ncclras.txt"),
    "host": ("meminfo.txt", "df-shm.txt"),
    "journal": ("journal-*",),
    "keyvalue": ("*",),
    "kube": ("pod.json", "node.json"),
    "nccl_log": ("nccl/*", "app/*"),
    "nccl_recovery": ("nccl-tests/recovery-*", "nvidia-smi-*", "ibv-devinfo.txt"),
    "nccl_tests": ("nccl-tests/*",),
    "ncclras": ("ncclras.txt",),
    "nvidia_smi": ("nvidia-smi-*",),
    "procmem": ("procmem/*",),
    "pyspy": ("pyspy/*", "app/*", "nccl/*"),
    "rdma": ("dev-infiniband.txt", "sys-class-infiniband.txt", "rdma-link.txt",
             "ibdev2netdev.txt", "lspci.txt"),
    "text": ("*",),
    "watchdog": ("app/*", "nccl/*"),
}  # fmt: skip
PARSERS = sorted(registry.names())


def reads(parser: str) -> list[str]:
    return [n for n in file_names() if any(fnmatch.fnmatch(n, g) for g in READS[parser])]


def test_every_registered_parser_is_covered_here() -> None:
    assert set(PARSERS) == set(READS), "a new parser needs its READS entry (and CONTRACT)"
    assert all(reads(p) for p in PARSERS)


# -- the contract ------------------------------------------------------------------------------

N = type(None)
NUM = (int, float)
#: top-level keys of each parser's facts and their types; keys marked * are always present
CONTRACT: dict[str, dict[str, tuple[type, ...]]] = {
    "applog": {
        "*collected": (bool,), "ranks": (list,), "first_failed_rank": (int, N),
        "first_error": (dict, N), "surfaced": (dict, N), "silent_ranks": (list,),
        "errors_by_category": (dict,), "by_cause": (dict,), "causes": (list,),
        "killed": (list,), "peer_consequences": (list,), "context": (list,), "pids": (list,),
        "*app_collected": (bool,), "parse_errors": (list,), "silent_evidence": (list,),
    },
    "cgroup": {
        "*collected": (bool,), "*present": (bool, N), "version": (int, N),
        "limit_bytes": (int, N), "usage_bytes": (int, N), "peak_bytes": (int, N),
        "failcnt": (int, N), "oom_events": (int, N), "oom_kills": (int, N),
        "anon_bytes": (int, N), "file_bytes": (int, N), "shmem_bytes": (int, N),
        "usage_at_limit": (bool,), "slack_bytes": (int, N), "under_oom": (bool, N),
        "events": (dict,), "stat": (dict,), "files": (list,), "unreadable": (list,),
        "oom_killed": (bool,), "evidence": (list,),
    },
    "clock": {
        "*collected": (bool,), "now_epoch": (*NUM, N), "now": (str, N), "uptime_s": (*NUM, N),
        "idle_s": (*NUM, N), "boot_epoch": (*NUM, N), "boot_time": (str, N),
    },
    "dcgm": {
        "*collected": (bool,), "*available": (bool, N), "*unavailable_reason": (str, N),
        "*discovery": (dict,), "*health": (dict,), "*incidents": (list,),
        "*hardware_failures": (list,), "*other_failures": (list,), "*warnings": (list,),
        "*healthy": (bool,),
    },
    "dcgm_diag": {
        "*collected": (bool,), "available": (bool, N), "unavailable_reason": (str, N),
        "ran": (bool,), "version": (str, N), "results": (list,), "hardware_failures": (list,),
        "other_failures": (list,), "warnings": (list,), "passed": (bool, N),
        "recognized": (bool,),
    },
    "dmesg": {
        "*collected": (bool,), "memcg_ooms": (list,), "global_ooms": (list,),
        "page_alloc_failures": (list,), "pin_failures": (list,), "xids": (list,),
        "fallen_off_bus": (list,), "aer": (list,), "lines": (int,), "totals": (dict,),
        "time_format": (str, N), "boot_epoch": (*NUM, N), "fatal_aer": (list,),
        "gpu_fault_xids": (list,), "drain_xids": (list,), "catalog_hits": (list,),
        "recognized": (bool,), "iommu_faults": (list,), "nvswitch_faults": (list,),
        "unknown_xids": (list,), "aer_corrected": (list,), "boot_iommu_faults": (list,),
        "gpu_reset_required": (list,), "unrecognized": (list,),
    },
    "flight_recorder": {
        "*collected": (bool,), "*dumps": (list,), "*analyses": (list,), "*ranks": (list,),
        "*unreadable": (list,),
    },
    "hang": {
        "*collected": (bool,), "*read_at": (str, N), "*cause": (str, N), "*statement": (str,),
        "*basis": (str, N), "*confidence": (str, N), "*evidence": (list,),
        "*stalled_ranks": (list,), "*analysis": (dict,), "*views": (list,),
        "*processes": (list,), "*fr": (dict,), "*pyspy": (dict,), "*watchdog": (dict,),
        "*ncclras": (dict,),
    },
    "host": {"*collected": (bool,), "*meminfo": (dict,), "*shm": (dict,)},
    "journal": {
        "*collected": (bool,), "*kubelet": (dict,), "*containerd": (dict,), "*events": (list,),
        "*oom_events": (list,), "pod_events": (list,),
    },
    "kube": {"*collected": (bool,), "*pod": (dict, N), "*pods": (list,), "*node": (dict, N)},
    "nccl_log": {
        "*collected": (bool,), "*versions": (list,), "*network": (str, N), "*networks": (list,),
        "*ib_no_device": (bool,), "*ib_devices": (list,), "*socket_interfaces": (list,),
        "*env": (dict,), "*warns": (list,), "*init_complete_ranks": (list,), "*nranks": (int, N),
        "*nnodes": (int, N), "*hosts": (list,), "*nccl_lines": (int,), "*version": (str, N),
        "*transports": (dict,), "*transport_kinds": (list,), "*warn_categories": (dict,),
        "*result_codes": (dict,), "*first_result_code": (int, N),
        "*first_result_meaning": (str, N), "*ib_disabled": (bool,), "*sources": (list,),
    },
    "nccl_recovery": {
        "*collected": (bool,), "*runs": (list,), "*ranks": (int, N), "*threshold": (dict,),
        "*criteria": (dict,), "*failed": (list,), "*passed": (bool,), "*cause": (str, N),
        "*summary": (str,), "*transport": (dict,), "*bandwidth": (dict,),
        "*fixed_set": (dict, list, str, N), "*single_node": (bool,), "*evidence": (list,),
        "*gpu": (dict,),
    },
    "nccl_tests": {
        "*collected": (bool,), "*runs": (dict,), "*all_passed": (bool,), "*wrong_total": (int,),
        "*evidence": (list,), "*unmeasured": (list,),
    },
    "ncclras": {
        "*collected": (bool,), "*available": (bool,), "why": (str,), "format": (str,),
        "nccl_version": (str, N), "missing_ranks": (list,), "dead_processes": (list,),
        "unresponsive_processes": (list,), "behind": (list,), "ahead": (list,),
        "problems": (list,),
    },
    "nvidia_smi": {
        "*collected": (bool,), "*exit_code": (int, N), "*exit_meaning": (str, N),
        "*exit_evidence": (list,),
        "*driver_loaded": (bool, N), "*not_installed": (bool,), "*gpu_lost": (bool,),
        "*list": (dict,), "*query": (dict,),
        "*gpu_count": (int, N), "*driver_version": (str, N), "*q": (dict,),
        "uncorrectable_ecc_volatile": (int,), "uncorrectable_ecc_aggregate": (int,),
        "remap_pending": (bool,), "remap_failure": (bool,), "retired_pages_pending": (bool,),
        "recovery_actions": (list,), "faulty_gpus": (list,), "anomalies": (list,),
        "*topo": (dict,), "*p2p_read": (dict,), "*p2p_write": (dict,), "*p2p_all_ok": (bool, N),
        "*p2p_failing": (list,), "*nvlink": (dict,), "*unreachable": (list,),
        "*no_devices": (list,), "*lost_evidence": (list,), "*plain": (dict,),
    },
    "procmem": {
        "*collected": (bool,), "*processes": (list,), "*ranks": (int,), "*workers": (int,),
        "*workers_per_rank": (dict,), "*per_rank": (dict,), "*per_worker": (dict,),
        "*total_rss_bytes": (int, N), "*total_anon_bytes": (int, N),
        "*total_pss_bytes": (int, N), "*total_pss_anon_bytes": (int, N),
        "*total_shmem_bytes": (int, N), "*total_pss_shmem_bytes": (int, N),
        "*total_swap_bytes": (int, N), "*other_anon_bytes": (int, N), "*method": (str, N),
        "*listed": (int,), "*vanished": (list,), "*rank_pids": (list,),
        "*worker_pids": (list,), "*features": (dict,),
    },
    "pyspy": {"*collected": (bool,), "*dumps": (list,), "*not_read": (list,)},
    "rdma": {
        "*collected": (bool,), "*dev_infiniband": (dict,), "*sys_class_infiniband": (dict,),
        "*rdma_link": (dict,), "*ibdev2netdev": (dict,), "*lspci": (dict,), "*devices": (list,),
        "*active_ports": (list,), "*nics": (list,), "*gpus_on_pci": (int, N),
        "*uverbs": (bool, N), "*usable": (bool,),
    },
    "watchdog": {
        "*collected": (bool,), "timeouts": (list,), "statuses": (list,), "lagging": (list,),
        "desync_states": (list,), "mismatches": (list,), "gloo_timeouts": (list,),
        "last_seen": (list,), "*timed_out_ranks": (list,),
    },
}  # fmt: skip
TEXT_ENTRY = {"stdout": (str,), "stderr": (str,), "rc": (int, N), "lines": (int,),
              "collected": (bool,)}  # fmt: skip


def check_facts(parser: str, facts: Any, files: Mapping[str, CommandResult]) -> None:
    """The engine's contract: a dict, strict JSON, the documented keys with their types."""
    assert isinstance(facts, dict), type(facts)
    json.dumps(facts, allow_nan=False)  # strict JSON: no NaN or infinity either
    if parser == "text":
        assert set(facts) == set(files)
        for entry in facts.values():
            assert set(entry) == set(TEXT_ENTRY)
            assert all(isinstance(entry[k], t) for k, t in TEXT_ENTRY.items()), entry
        return
    if parser == "keyvalue":
        assert all(isinstance(v, str | int | float) for v in facts.values())
        return
    contract = {k.lstrip("*"): types for k, types in CONTRACT[parser].items()}
    required = {k.lstrip("*") for k in CONTRACT[parser] if k.startswith("*")}
    assert required <= set(facts), f"{parser}: missing {required - set(facts)}"
    assert set(facts) <= set(contract), f"{parser}: undocumented {set(facts) - set(contract)}"
    for key, value in facts.items():
        assert isinstance(value, contract[key]), f"{parser}.{key} = {value!r:.80}"


def _result(name: str, stdout: str, *, stderr: str = "", rc: int | None = 0) -> CommandResult:
    return CommandResult(name, f"collect {name}", stdout=stdout, stderr=stderr, exited=rc)


def run_parser(
    parser: str, files: Mapping[str, CommandResult], context: Mapping[str, Any] | None = None
) -> None:
    ctx = {"node": "n1", "page_size": 4096, "vars": {}, **(context or {})}
    facts = registry.get(parser).func(files, ctx)
    check_facts(parser, facts, files)


def test_the_contract_holds_on_every_recorded_bundle() -> None:
    """The contract is what the parsers give on real evidence (so it is not made up)."""
    for files in bundle_files():
        for parser in PARSERS:
            run_parser(parser, files)
    for parser in PARSERS:
        run_parser(parser, {})


# -- strategies ----------------------------------------------------------------------------------

HOSTILE_NUMBERS = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999", "1" * 5000,
                   "9" * 400 + ".5", "-0", "0x10", "1_000", "٣٤", "²", "18446744073709551616",
                   "-9223372036854775809"]  # fmt: skip
SEPARATORS = ["\n", "\r\n", "\r", " ", "\t", "=", ":", ",", "|", "\x00", "\x0b", "\u2028", "["]


@st.composite
def hostile_text(draw: st.DrawFn, max_parts: int = 30) -> str:
    parts = draw(
        st.lists(
            st.one_of(
                st.text(max_size=60),
                st.sampled_from(real_lines()),
                st.sampled_from(HOSTILE_NUMBERS),
                st.sampled_from(SEPARATORS),
            ),
            max_size=max_parts,
        )
    )
    return "".join(parts)


@st.composite
def mixed_encoding_bytes(draw: st.DrawFn) -> bytes:
    """Real lines re-encoded as a node's tools and files really mix them."""
    out = []
    for line in draw(st.lists(st.sampled_from(real_lines()), min_size=1, max_size=12)):
        how = draw(st.sampled_from(["utf-8", "latin-1", "utf-16-le", "utf-16", "nul", "cut"]))
        if how == "latin-1":
            out.append(line.encode("latin-1", "replace") + b"\xe9\xff\xfe")
        elif how.startswith("utf-16"):
            out.append(line.encode(how))  # "utf-16" adds a BOM
        elif how == "nul":
            out.append(line.encode().replace(b" ", b"\x00"))
        elif how == "cut":
            data = line.encode()
            out.append(data[: draw(st.integers(0, len(data)))] + "€".encode()[:2])
        else:
            out.append(line.encode())
        out.append(draw(st.sampled_from([b"\n", b"\r\n", b"", b"\x00\n"])))
    return b"".join(out)


def both_decodings(data: bytes) -> list[str]:
    """As a transport decodes it, and with lone surrogates kept (surrogateescape)."""
    return [decode(data), data.decode("utf-8", "surrogateescape")]


CONTEXT_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    hostile_text(max_parts=4),
    st.lists(st.text(max_size=10), max_size=3),
)
VAR_NAMES = ["pod", "namespace", "rank_comm", "nodes", "gpus", "min_busbw", "max_spread_pct",
             "hosts", "nics", "nccl_version", "ib_gid_index", "pod_uid", "cgroup_dir"]  # fmt: skip


@st.composite
def contexts(draw: st.DrawFn) -> dict[str, Any]:
    """The run context a parser gets: clock values derived from evidence, and `--var`s."""
    ctx: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "collected_at": CONTEXT_VALUES,
                "now": CONTEXT_VALUES,
                "uptime_s": CONTEXT_VALUES,
                "utc_offset": CONTEXT_VALUES,
                "page_size": st.one_of(st.integers(), st.sampled_from([4096, 65536])),
            },
        )
    )
    ctx["vars"] = draw(st.dictionaries(st.sampled_from(VAR_NAMES), CONTEXT_VALUES, max_size=5))
    return ctx


def files_strategy(parser: str, texts: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    rcs = st.sampled_from([0, 0, 0, 1, 2, 15, 127, None])
    one = st.tuples(texts, st.text(max_size=40), rcs)
    return st.dictionaries(st.sampled_from(reads(parser)), one, min_size=1, max_size=6)


def as_files(drawn: Mapping[str, tuple[str, str, int | None]]) -> dict[str, CommandResult]:
    return {name: _result(name, out, stderr=err, rc=rc) for name, (out, err, rc) in drawn.items()}


# -- the registered parsers ----------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
def test_arbitrary_text_and_context_never_raise_and_keep_the_contract(
    parser: str, request: pytest.FixtureRequest
) -> None:
    @PROFILE
    @given(drawn=files_strategy(parser, hostile_text()), context=contexts())
    def prop(drawn: Mapping[str, tuple[str, str, int | None]], context: dict[str, Any]) -> None:
        _count(request)
        run_parser(parser, as_files(drawn), context)

    run(prop, request)


@pytest.mark.parametrize("parser", PARSERS)
def test_arbitrary_and_mixed_encoding_bytes_never_raise(
    parser: str, request: pytest.FixtureRequest
) -> None:
    @PROFILE
    @given(
        data=st.one_of(st.binary(max_size=3000), mixed_encoding_bytes()),
        names=st.lists(st.sampled_from(reads(parser)), min_size=1, max_size=4, unique=True),
    )
    def prop(data: bytes, names: list[str]) -> None:
        _count(request)
        for text in both_decodings(data):
            run_parser(parser, {name: _result(name, text) for name in names})

    run(prop, request)


@pytest.mark.parametrize("parser", PARSERS)
def test_truncated_and_spliced_real_evidence_never_raises(
    parser: str, request: pytest.FixtureRequest
) -> None:
    @PROFILE
    @given(
        files=st.sampled_from(bundle_files()),
        sample=st.sampled_from(sample_texts()),
        name=st.sampled_from(reads(parser)),
        cut=st.floats(0, 1),
        junk=st.one_of(st.just(""), hostile_text(max_parts=3)),
    )
    def prop(
        files: dict[str, CommandResult], sample: tuple[str, str], name: str, cut: float, junk: str
    ) -> None:
        _count(request)
        text = sample[1][: int(len(sample[1]) * cut)] + junk
        damaged = {**files, name: _result(name, text)}
        for other in list(damaged)[:: max(1, len(damaged) // 3)]:  # and cut a few others too
            damaged[other] = _result(other, damaged[other].stdout[: int(len(text) * cut)])
        run_parser(parser, damaged)

    run(prop, request)


NUMBER_SHAPES = ["{n}", "key={n}", "key: {n}", "max {n}", "MemTotal:       {n} kB",
                 "oom_kill {n}", "{n} {n} {n} {n}", "Pid:\t{n}", "Rss:  {n} kB"]  # fmt: skip


@pytest.mark.parametrize("parser", PARSERS)
def test_every_hostile_number_in_every_shape_never_raises(parser: str) -> None:
    """Numbers too long for int(), overflowing floats, NaN, non-ASCII digits: as a value, in
    `key=value`, `key: value`, /proc and cgroup shapes, in every file the parser reads (found
    by the properties above; pinned here so they stay covered whatever hypothesis draws)."""
    for number in HOSTILE_NUMBERS:
        for shape in NUMBER_SHAPES:
            text = shape.format(n=number)
            run_parser(parser, {name: _result(name, text) for name in reads(parser)})


def _huge_lines() -> dict[str, str]:
    oom = next(line for line in real_lines() if "Killed process" in line)
    return {
        "repeated-real-line": " ".join([oom] * (HUGE_LINE_BYTES // len(oom))),
        "nuls-and-digits": ("\x00" + "9" * 63) * (HUGE_LINE_BYTES // 64),
        "json-ish": '{"a": [' + "[" * 2000 + "1," * (HUGE_LINE_BYTES // 2) + "]",
    }


@pytest.mark.parametrize("parser", PARSERS)
def test_lines_of_several_mib_are_survived_in_linear_time(parser: str) -> None:
    """A line of HUGE_LINE_BYTES in the middle of real evidence, in two of the files the parser
    reads (the others real): parsed at no worse than 2 s per MiB on this machine (the slowest,
    applog's sixteen error classes, take about 0.7 s per MiB; a quadratic scan would take
    minutes)."""
    real = bundle_files()[0]
    names = reads(parser)
    for label, line in _huge_lines().items():
        files = {name: real[name] for name in names if name in real}
        for name in [n for n in names if n in real][:2] or names[:2]:
            around = real[name].stdout if name in real else ""
            files[name] = _result(name, around + line + "\n" + around)
        started = time.monotonic()
        run_parser(parser, files)
        took = time.monotonic() - started
        mib = 2 * len(line) / 2**20
        assert took < 2 * mib + 1, f"{parser} took {took:.1f}s on {mib:.0f} MiB of {label}"


# -- the pure job parsers ------------------------------------------------------------------------


def _slurm_samples() -> list[str]:
    return [text for path, text in sample_texts() if path.startswith("tests/job/slurm/")]


def check_slurm_jobs(jobs: Any) -> None:
    assert isinstance(jobs, list)
    for job in jobs:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in job.fields.items())
        assert isinstance(job.ref, str) and isinstance(job.job_id, str)
        assert job.state is None or isinstance(job.state, str)
        assert all(v is None or isinstance(v, int) for v in job.exit)
        for alloc in job.allocations:
            assert all(isinstance(h, str) for h in alloc.hosts)
            assert len(alloc.hosts) <= slurm_parse.MAX_HOSTS
            assert all(isinstance(g, str) for g in alloc.gpus)


HOSTLISTS = st.lists(
    st.one_of(
        st.text(alphabet="gpu-0123456789[],:", max_size=30),
        st.from_regex(r"[a-z]{1,4}\[[0-9]{1,12}-[0-9]{1,12}(,[0-9]{1,3})*\]", fullmatch=True),
        st.sampled_from(["gpu-[0-99999999]", "a[0-999]b[0-999]c[0-999]", "x[1-2]y[]z[", "²-3"]),
    ),
    max_size=4,
).map(",".join)


@st.composite
def slurm_text(draw: st.DrawFn) -> str:
    sample = draw(st.sampled_from(_slurm_samples()))
    cut = draw(st.integers(0, len(sample)))
    return sample[:cut] + draw(
        st.one_of(
            hostile_text(max_parts=6),
            HOSTLISTS.map(lambda h: f"\n   Nodes={h} CPU_IDs=0-3 Mem=1 GRES=gpu(IDX:{h})\n"),
        )
    )


def test_slurm_text_never_raises_and_hostlists_stay_bounded(request: pytest.FixtureRequest) -> None:
    @PROFILE
    @given(text=st.one_of(slurm_text(), hostile_text()), data=st.binary(max_size=2000))
    def prop(text: str, data: bytes) -> None:
        _count(request)
        for each in (text, *both_decodings(data)):
            check_slurm_jobs(slurm_parse.parse_scontrol_jobs(each))
            check_slurm_jobs(slurm_parse.parse_sacct(each))

    run(prop, request)


def test_hostlists_expand_or_stay_as_written_never_fill_memory(
    request: pytest.FixtureRequest,
) -> None:
    @PROFILE
    @given(text=HOSTLISTS)
    def prop(text: str) -> None:
        _count(request)
        hosts = slurm_parse.expand_hostlist(text)
        assert all(isinstance(h, str) for h in hosts) and len(hosts) <= slurm_parse.MAX_HOSTS
        assert all(isinstance(i, str) for i in slurm_parse.gpu_indices(f"gpu(IDX:{text})"))

    run(prop, request)
    assert slurm_parse.expand_hostlist("gpu-[0-99999999]") == ["gpu-[0-99999999]"]
    assert slurm_parse.expand_hostlist("gpu-[01-03]") == ["gpu-01", "gpu-02", "gpu-03"]


HOSTS_FILE_WORDS = st.one_of(
    st.sampled_from(["ssh://root@10.0.0.11:22", "kubectl://ml/agent-1", "local", "gpu-07",
                     "ssh://[::1]:2222", "ranks=0-7", "ranks=0-99999999999", "ranks=0,0,1",
                     "ranks=²", "node=", "pod=$(touch /tmp/x)", "'a b'=c", "# comment", "\"",
                     "ssh://", "kubectl://-n/x", "x=y#z"]),
    st.text(max_size=20),
)  # fmt: skip


def test_hosts_files_give_a_job_or_one_job_error(request: pytest.FixtureRequest) -> None:
    from runbook.errors import JobError, RunbookError

    @PROFILE
    @given(
        lines=st.lists(st.lists(HOSTS_FILE_WORDS, max_size=5).map(" ".join), max_size=8),
        data=st.binary(max_size=500),
    )
    def prop(lines: list[str], data: bytes) -> None:
        _count(request)
        for text in ("\n".join(lines), *both_decodings(data)):
            try:
                spec = parse_hosts_file(text, source="job.hosts", ssh_user="root")
            except JobError as exc:
                assert str(exc).startswith("job.hosts") and "\n" not in str(exc), str(exc)
                continue
            except RunbookError as exc:  # pragma: no cover - would be a wrong error type
                raise AssertionError(f"not a JobError: {exc!r}") from exc
            assert spec.kind == "hosts" and spec.nodes
            for node in spec.nodes:
                assert isinstance(node.name, str) and node.name
                assert all(r is None or isinstance(r, int) for r in node.ranks)
                assert len(node.ranks) <= 100_000

    run(prop, request)
    with pytest.raises(ValueError, match="more than"):
        parse_ranks("0-99999999999")


# Kubernetes pods as the API returns them (the schema holds: metadata, spec and status are
# objects), with hostile values wherever a user writes the value: labels, env, command, limits.
USER_STRINGS = st.one_of(
    hostile_text(max_parts=3),
    st.sampled_from(["0", "-1", "1000000000", "99999999999999999999", "gpu", "auto", "Worker",
                     "master", "LAUNCHER", "--nproc-per-node=1000000000", "1e9", "nan"]),
)  # fmt: skip
QUANTITIES = st.one_of(USER_STRINGS, st.integers(), st.floats())


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    label_keys = st.sampled_from([*kube_pods.TYPE_LABELS, *kube_pods.INDEX_LABELS,
                                  kube_pods.COMPLETION_INDEX, "app"])  # fmt: skip
    env = st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["RANK", "PET_NPROC_PER_NODE", "NVIDIA_VISIBLE_DEVICES"])},
            optional={"value": USER_STRINGS},
        ),
        max_size=4,
    )
    container = st.fixed_dictionaries(
        {"name": st.sampled_from(["pytorch", "tensorflow", "main", "sidecar"])},
        optional={
            "env": env,
            "command": st.lists(USER_STRINGS, max_size=4),
            "args": st.lists(USER_STRINGS, max_size=4),
            "resources": st.fixed_dictionaries(
                {}, optional={"limits": st.dictionaries(st.just("nvidia.com/gpu"), QUANTITIES)}
            ),
        },
    )
    terminated = st.fixed_dictionaries(
        {},
        optional={
            "exitCode": st.integers(),
            "signal": st.integers(),
            "reason": USER_STRINGS,
            "startedAt": USER_STRINGS,
        },
    )
    status = st.fixed_dictionaries(
        {},
        optional={
            "phase": USER_STRINGS,
            "reason": USER_STRINGS,
            "startTime": USER_STRINGS,
            "containerStatuses": st.lists(
                st.fixed_dictionaries(
                    {"name": st.sampled_from(["pytorch", "main"])},
                    optional={
                        "restartCount": st.integers(),
                        "state": st.fixed_dictionaries({}, optional={"terminated": terminated}),
                        "lastState": st.fixed_dictionaries({}, optional={"terminated": terminated}),
                    },
                ),
                max_size=2,
            ),
        },
    )
    return {
        "metadata": {
            "name": draw(USER_STRINGS),
            "labels": draw(st.dictionaries(label_keys, USER_STRINGS, max_size=4)),
            "annotations": draw(st.dictionaries(st.just(kube_pods.COMPLETION_INDEX), USER_STRINGS)),
        },
        "spec": {
            "nodeName": draw(USER_STRINGS),
            "containers": draw(st.lists(container, max_size=3)),
        },
        "status": draw(status),
    }


WORKLOADS = st.fixed_dictionaries(
    {},
    optional={
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "slotsPerWorker": QUANTITIES,
                "runLauncherAsWorker": st.booleans(),
                "pytorchReplicaSpecs": st.dictionaries(st.sampled_from(["Master", "Worker"]),
                                                       st.just({})),
                "mpiReplicaSpecs": st.dictionaries(st.sampled_from(["Launcher", "Worker"]),
                                                   st.just({})),
            },
        )
    },
)  # fmt: skip


def test_pods_of_a_hostile_workload_give_bounded_well_typed_ranks(
    request: pytest.FixtureRequest,
) -> None:
    @PROFILE
    @given(
        kind=st.sampled_from(["PyTorchJob", "TFJob", "MPIJob", "Job"]),
        job=WORKLOADS,
        pod_list=st.lists(pods(), max_size=4),
    )
    def prop(kind: str, job: dict[str, Any], pod_list: list[dict[str, Any]]) -> None:
        _count(request)
        layout = kube_pods.layout_of(kind, job)
        facts = [kube_pods.pod_facts(pod, layout) for pod in pod_list]
        for pod in facts:
            assert len(pod.ranks) <= kube_pods.MAX_PROCS
            assert all(r is None or isinstance(r, int) for r in pod.ranks)
            assert isinstance(pod.name, str) and isinstance(pod.node, str)
            assert isinstance(pod.gpu_count, int) and isinstance(pod.restarts, int)
        for spec in kube_pods.rank_specs(facts, "ml"):
            assert spec.rank is None or isinstance(spec.rank, int)

    run(prop, request)
