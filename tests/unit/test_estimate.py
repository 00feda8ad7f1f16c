"""The host-memory estimate (runbook.remedies.estimate), its advice, its units and its command,
over explicit inputs, the real /proc captures of tests/unit/procmem_samples (cgroup v1) and the
real-format cgroup v2 and node samples of the parser tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from runbook import bundle, units
from runbook.cli.app import cli, main
from runbook.cli.estimate import estimate_memory
from runbook.errors import UsageError
from runbook.parsers import get
from runbook.remedies import advice, estimate
from runbook.remedies.estimate import EstimateError, Input, Inputs, compute
from runbook.transports.base import CommandResult
from tests.tools import bundles
from tests.tools.framed import split_headers

HERE = Path(__file__).parent
SAMPLES = HERE / "procmem_samples"
PARSER_SAMPLES = HERE / "parsers" / "samples"
MiB, GiB, TiB = 1 << 20, 1 << 30, 1 << 40


# --- units -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4GiB", 4 * GiB),
        ("4gib", 4 * GiB),
        ("512Mi", 512 * MiB),
        ("512MiB", 512 * MiB),
        ("12Gi", 12 * GiB),
        ("1Ti", TiB),
        ("64Ki", 64 * 1024),
        ("1.5G", 1_500_000_000),
        ("1.5Gi", 3 * GiB // 2),
        ("2k", 2000),
        ("2K", 2000),
        ("3M", 3_000_000),
        ("1T", 10**12),
        ("2GB", 2 * 10**9),
        ("1288490188800m", 1_288_490_189),  # Kubernetes milli, rounded up
        ("1e3", 1000),
        ("1073741824", GiB),
        ("512 bytes", 512),
        ("512B", 512),
        (" 8Gi ", 8 * GiB),
        (7, 7),
    ],
)
def test_sizes_in_every_spelling_people_and_kubernetes_use(text: str | int, expected: int) -> None:
    assert units.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "Gi", "12Gx", "-1Gi", "twelve", "1.2.3G", "nan"])
def test_what_is_not_a_size_is_a_one_line_usage_error(text: str) -> None:
    with pytest.raises(UsageError) as err:
        units.parse_size(text, "per-rank-cache")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("size", "expected"),
    [(12 * GiB, "12Gi"), (GiB + 1, "1025Mi"), (12289 * MiB, "12289Mi"), (1, "1Mi"), (0, "0Mi")],
)
def test_quantities_round_up_to_a_whole_mebibyte(size: int, expected: str) -> None:
    assert units.quantity(size) == expected
    assert units.parse_size(expected) >= size


# --- the arithmetic ----------------------------------------------------------------------------


def article(**changes: Input) -> Inputs:
    """8 ranks of 40 GiB, 8 workers of 4 GiB each, 16 batches of 256 MiB in flight, 2 GiB
    pinned per rank, 50 GiB of /dev/shm: the shape of the write-up's 640 GiB pod."""
    base = Inputs(
        ranks=Input(8, "given: --ranks"),
        per_rank_cache=Input(40 * GiB, "given: --per-rank-cache"),
        workers=Input(8, "given: --workers"),
        worker_cache=Input(4 * GiB, "given: --worker-cache"),
        prefetch=Input(16, "given: --prefetch"),
        batch_buffer=Input(256 * MiB, "given: --batch-buffer"),
        pinned=Input(2 * GiB, "given: --pinned"),
        shm=Input(50 * GiB, "given: --shm"),
    )
    return Inputs(**{**base.__dict__, **changes})


def test_the_peak_is_the_sum_of_the_terms_each_with_formula_and_sources() -> None:
    est = compute(article())
    got = {t.name: t.bytes for t in est.terms}
    assert got == {
        "per-rank cache × ranks": 320 * GiB,
        "worker cache × workers × ranks": 256 * GiB,
        "prefetch depth × batch buffer × ranks": 32 * GiB,
        "pinned buffers × ranks": 16 * GiB,
        "tmpfs/shmem": 50 * GiB,
    }
    assert est.peak_bytes == 674 * GiB
    worker = est.term("worker cache × workers × ranks")
    assert worker is not None and worker.formula == "4.0 GiB × 8 × 8"
    assert worker.sources == ("given: --worker-cache", "given: --workers", "given: --ranks")
    assert est.basis == "terms"


def test_request_and_limit_round_up_to_mebibytes_with_exact_headroom() -> None:
    est = compute(article())
    # 674 GiB × 1.2 = 828211.2 MiB: up to 828212 MiB, not float noise below it
    assert est.limit_bytes == 828212 * MiB
    assert est.limit_quantity == "828212Mi"
    assert (est.request_bytes, est.request_quantity) == (674 * GiB, "674Gi")
    est = compute(article(headroom=Input(1.5, "given"), request_factor=Input(1.1, "given")))
    assert est.limit_bytes == 1011 * GiB
    assert est.request_bytes == units.round_up_mib(674 * GiB * 11 // 10 + 1)


@pytest.mark.parametrize(
    ("allocatable", "reserved", "refused_with"),
    [
        (2 * TiB, None, ""),
        (800 * GiB, None, "at or above the node's allocatable 800.0 GiB"),
        # 5% of 840 GiB = 42 GiB: at most 798 GiB, and 808.8 GiB is more
        (840 * GiB, None, "less 42.0 GiB system headroom (798.0 GiB)"),
        (900 * GiB, None, ""),
        (900 * GiB, 100 * GiB, "less 100.0 GiB system headroom (800.0 GiB)"),
    ],
)
def test_the_guard_refuses_a_limit_the_node_cannot_give(
    allocatable: int, reserved: int | None, refused_with: str
) -> None:
    est = compute(
        article(
            allocatable=Input(allocatable, "given"),
            system_reserved=Input(reserved, "given") if reserved else Input(None, "default"),
        )
    )
    if refused_with:
        assert refused_with in est.refused
        assert "808.8 GiB (828212Mi)" in est.refused and "\n" not in est.refused
        assert est.describe()[-1].startswith("refused: ")
    else:
        assert est.refused == ""
    assert est.allocatable_bytes == allocatable


def test_the_default_system_headroom_is_at_least_one_gibibyte() -> None:
    assert estimate.default_system_reserved(8 * GiB) == GiB
    assert estimate.default_system_reserved(2 * TiB) == -(-2 * TiB // 20)  # 5%, rounded up


def test_a_limit_below_the_measured_peak_is_said_to_oom_again() -> None:
    est = compute(article(measured_peak=Input(900 * GiB, "measured: cgroup/memory.peak")))
    assert est.below_measured_peak
    assert any("below the measured cgroup peak 900.0 GiB" in w for w in est.warnings)
    assert not compute(article(measured_peak=Input(640 * GiB, "m"))).below_measured_peak


def test_unknown_allocatable_is_a_warning_not_a_pass_in_silence() -> None:
    est = compute(article())
    assert est.refused == ""
    assert any("allocatable unknown" in w for w in est.warnings)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"headroom": Input(0.9, "given")}, "headroom 0.9 is below 1.0"),
        ({"ranks": Input(2.5, "given")}, "not a whole number"),
        ({"workers": Input(-1, "given")}, "not a valid"),
        ({"request_factor": Input(0, "given")}, "request factor"),
    ],
)
def test_inputs_that_make_no_sense_are_refused_before_any_arithmetic(
    changes: dict[str, Input], message: str
) -> None:
    with pytest.raises(EstimateError, match=message):
        compute(article(**changes))


def test_nothing_measured_and_nothing_given_is_an_error() -> None:
    with pytest.raises(EstimateError, match="nothing to estimate from"):
        estimate.from_facts({})


# --- from the facts of real captures -----------------------------------------------------------


def split(name: str, stdout: str) -> dict[str, CommandResult]:
    return {p.name: p for p in split_headers(CommandResult(name, "", stdout=stdout, exited=0))}


def capture_facts(sample: str) -> dict[str, Any]:
    files = {
        **split("procmem/*", (SAMPLES / f"{sample}.procmem.txt").read_text()),
        **split("cgroup/memory.*", (SAMPLES / f"{sample}.cgroup.txt").read_text()),
    }
    return {name: get(name).func(files, {"vars": {}}) for name in ("cgroup", "procmem")}


def node_facts() -> dict[str, Any]:
    node = (PARSER_SAMPLES / "kube" / "node.json").read_text()
    files = {"node.json": CommandResult("node.json", "", stdout=node, exited=0)}
    return get("kube").func(files, {"vars": {}})


def test_from_a_v1_capture_each_term_is_measured_and_named_by_its_source() -> None:
    facts = capture_facts("named")
    est = estimate.from_facts(facts)
    i = est.inputs
    assert i.ranks.value == 2 and "12055, 12056" in i.ranks.source
    assert i.per_rank_cache.source == "measured: /proc/12056/status RssAnon (largest of 2 ranks)"
    assert i.workers.value == 2
    assert i.worker_cache.source.startswith("measured: /proc/")
    assert "Pss_Anon" in i.worker_cache.source
    assert (i.shm.value, i.shm.source) == (16 * MiB, "measured: cgroup/memory.stat total_shmem")
    assert i.measured_peak.source == "measured: cgroup/memory.max_usage_in_bytes"
    assert i.other.value == facts["procmem"]["other_anon_bytes"]
    assert i.prefetch.source == "not given"


def test_the_estimate_of_a_real_capture_is_close_to_the_cgroups_real_peak() -> None:
    """Two ranks of 48 and 56 MiB (each counted at the larger), four 16 MiB workers, 16 MiB of
    shm: the estimate is above the cgroup's max_usage by the 8 MiB the smaller rank is
    over-counted, and below it by no more than the cgroup's file pages and kernel memory."""
    for sample in ("named", "same-comm"):
        facts = capture_facts(sample)
        est = estimate.from_facts(facts)
        real = facts["cgroup"]["peak_bytes"]
        assert real * 0.97 <= est.peak_bytes <= real * 1.07, (sample, est.peak_bytes, real)


def test_overrides_replace_what_was_measured_and_say_given() -> None:
    est = estimate.from_facts(
        capture_facts("named"), {"workers": 8, "prefetch": 4, "batch_buffer": "8Mi"}
    )
    assert (est.inputs.workers.value, est.inputs.workers.source) == (8, "given: --workers")
    assert est.term("prefetch depth × batch buffer × ranks") is not None
    assert est.inputs.worker_cache.source.startswith("measured:")
    with pytest.raises(EstimateError, match="unknown estimate input"):
        estimate.from_facts({}, {"wrokers": 1})
    with pytest.raises(UsageError, match="batch-buffer"):
        estimate.from_facts(capture_facts("named"), {"batch_buffer": "8 apples"})


def test_a_v2_cgroup_at_its_limit_without_process_measurements_sizes_from_its_peak() -> None:
    """The 640 GiB v2 pod of the parser samples, on the 1.9 TiB-allocatable node: nothing per
    process, so the cgroup's peak is the estimate, with the warning that it is the old limit."""
    files = {
        f"cgroup/{p.name}": CommandResult(f"cgroup/{p.name}", "", stdout=p.read_text(), exited=0)
        for p in (PARSER_SAMPLES / "cgroup" / "v2-at-limit").iterdir()
    }
    facts = {"cgroup": get("cgroup").func(files, {}), "kube": node_facts()}
    est = estimate.from_facts(facts)
    assert est.basis == "cgroup-peak"
    assert est.peak_bytes == 640 * GiB
    assert est.inputs.measured_peak.source == "measured: cgroup/memory.peak"
    assert est.inputs.allocatable.value == 2063868540 * 1024
    assert any("is its limit 640.0 GiB" in w for w in est.warnings)
    assert est.refused == ""
    # with the rank count given, the cgroup's anon is shared out per rank
    est = estimate.from_facts(facts, {"ranks": 8})
    assert est.basis == "terms"
    assert est.inputs.per_rank_cache.value == -(-612361404416 // 8)
    assert "÷ 8 ranks" in est.inputs.per_rank_cache.source
    assert est.inputs.shm.source == "measured: cgroup/memory.stat shmem"


def test_params_of_a_real_memory_limit_proposal_give_the_same_estimate_as_the_facts() -> None:
    """The shipped runbook's memory-limit params, rendered over a corpus bundle, then
    from_params: what the approval code computes at proposal time."""
    from click.testing import CliRunner

    pod = "pod3b9c2e10-7d4a-4c1e-9f00-2a6b8c7d9e01"
    args = ["analyze", str(bundles.path("host-oom-cgroup-dir-v1")), "--format", "json", "--var",
            f"cgroup_dir=/sys/fs/cgroup/memory/kubepods/burstable/{pod}"]  # fmt: skip
    verdict = json.loads(CliRunner().invoke(cli, args, catch_exceptions=False).stdout)
    proposal = next(p for p in verdict["proposals"] if p["kind"] == "memory-limit")
    params = proposal["params"]
    assert params["peak_bytes"] == params["limit_bytes"] == str(8 * GiB)
    assert params["ranks"] == ""  # no process measured in that bundle
    est = estimate.from_params(params)
    assert est.basis == "cgroup-peak" and est.peak_bytes == 8 * GiB
    assert est.limit_bytes == units.round_up_mib(8 * GiB * 6 // 5 + 1)
    out = est.proposal_params()
    assert out["proposed_limit_bytes"] == str(est.limit_bytes)
    assert out["proposed_limit"] == est.limit_quantity and out["refused"] == ""
    stage = next(s for s in verdict["stages"] if s["id"] == "cgroup-memory")
    assert estimate.from_facts(stage["facts"]).limit_bytes == est.limit_bytes


def test_params_with_measured_processes_and_given_values() -> None:
    params = {
        "peak_bytes": str(640 * GiB), "limit_bytes": str(640 * GiB), "anon_bytes": "",
        "shmem_bytes": str(50 * GiB), "ranks": "8", "per_rank_anon_bytes": str(40 * GiB),
        "workers_per_rank": "8", "per_worker_anon_bytes": str(4 * GiB),
        "other_anon_bytes": "", "headroom": "1.2",
        "node_allocatable_bytes": str(2063868540 * 1024), "prefetch": "16",
        "batch_buffer": "256Mi",
    }  # fmt: skip
    est = estimate.from_params(params, {"pinned": "2Gi"})
    assert est.peak_bytes == 674 * GiB
    assert est.inputs.prefetch.source == "given: params.prefetch"
    assert est.inputs.pinned.source == "given: params.pinned"
    assert est.refused == ""
    with pytest.raises(EstimateError, match="param ranks"):
        estimate.from_params({**params, "ranks": "eight"})
    with pytest.raises(EstimateError, match="nothing to estimate from"):
        estimate.from_params({"peak_bytes": "", "headroom": "1.2"})


def test_describe_lists_each_term_the_proposal_and_the_node_bound() -> None:
    lines = compute(article(allocatable=Input(2 * TiB, "m"))).describe()
    assert lines[0] == "per-rank cache × ranks: 40.0 GiB × 8 = 320.0 GiB"
    assert "pod peak 674.0 GiB: request 674Gi (× 1), limit 828212Mi (× 1.2)" in lines
    assert any(line.startswith("node allocatable 2.0 TiB less 102.4 GiB") for line in lines)


# --- advice ------------------------------------------------------------------------------------


def test_advice_names_the_dominant_term_and_what_each_halving_saves() -> None:
    est = compute(article(allocatable=Input(800 * GiB, "given")))
    assert est.refused
    adv = advice.advise(est)
    assert adv.dominant is not None and adv.dominant.name == "per-rank cache × ranks"
    assert round(adv.share, 3) == round(320 / 674, 3)
    saves = {o.change.split(" (")[0]: o for o in adv.options}
    workers = saves["halve the DataLoader workers"]
    assert (workers.saves_bytes, workers.peak_bytes) == (128 * GiB, 546 * GiB)
    assert workers.refused == ""  # 546 GiB × 1.2 fits under 800 GiB less 40 GiB
    prefetch = saves["halve the prefetch depth"]
    assert (prefetch.saves_bytes, prefetch.peak_bytes) == (16 * GiB, 658 * GiB)
    assert prefetch.refused  # 789.6 GiB is still above 760 GiB
    cache = saves["halve the per-rank cache"]
    assert cache.saves_bytes == 160 * GiB
    text = adv.lines()
    assert text[0] == "largest term: per-rank cache × ranks = 320.0 GiB (47% of the peak)"
    assert "(passes the node guard)" in text[1] and "(still refused)" in text[2]


def test_no_advice_for_a_term_that_is_zero() -> None:
    adv = advice.advise(compute(article(workers=Input(0, "m"), prefetch=Input(None, "not given"))))
    assert [o.change.split(" (")[0] for o in adv.options] == ["halve the per-rank cache"]


# --- the command -------------------------------------------------------------------------------


def make_bundle(root: Path, sample: str = "named") -> Path:
    pieces = [
        *split("procmem/*", (SAMPLES / f"{sample}.procmem.txt").read_text()).values(),
        *split("cgroup/memory.*", (SAMPLES / f"{sample}.cgroup.txt").read_text()).values(),
    ]
    meta = bundle.BundleMeta(node="gpu-node-07", collected_at="2025-03-04T10:20:00+00:00")
    bundle.write_bundle(root, meta, pieces)
    shutil.copy(PARSER_SAMPLES / "kube" / "node.json", root / "node.json")
    return root


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    cli.add_command(estimate_memory)
    rc = main(["estimate-memory", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_command_on_a_bundle_prints_terms_peak_and_proposal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_bundle(tmp_path / "b")
    rc, out, err = run_cli(capsys, str(path), "--prefetch", "4", "--batch-buffer", "8Mi")
    assert rc == 0, err
    for text in ("per-rank cache × ranks", "prefetch depth × batch buffer × ranks", "pod peak",
                 "given: --prefetch", "measured: cgroup/memory.stat total_shmem", "limit "):
        assert text in out, text  # fmt: skip
    rc, out, _ = run_cli(capsys, str(path), "--format", "json")
    data = json.loads(out)
    direct = estimate.from_facts({**capture_facts("named"), "kube": node_facts()}, {})
    assert data["peak_bytes"] == direct.peak_bytes
    assert data["limit"] == direct.limit_quantity
    assert data["inputs"]["headroom"]["source"] == "default: runbook var memory_headroom"
    assert data["refused"] == "" and data["advice"]


def test_command_reads_a_run_directory_and_exits_1_when_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_bundle(tmp_path / "run" / "bundle")
    rc, out, _ = run_cli(capsys, str(tmp_path / "run"), "--allocatable", "256Mi")
    assert rc == 1
    assert "refused" in out and "256.0 MiB" in out


def test_command_without_a_bundle_takes_every_term_as_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, _ = run_cli(
        capsys, "--ranks", "8", "--per-rank-cache", "40Gi", "--workers", "8", "--worker-cache",
        "4Gi", "--prefetch", "16", "--batch-buffer", "256Mi", "--pinned", "2Gi", "--shm", "50Gi",
        "--allocatable", "2Ti", "--format", "json",
    )  # fmt: skip
    assert rc == 0
    data = json.loads(out)
    assert data["peak_bytes"] == 674 * GiB and data["limit"] == "828212Mi"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--per-rank-cache", "12Gx"], "unknown unit"),
        ([], "nothing to estimate from"),
        (["/nonexistent/bundle"], "no such bundle"),
    ],
)
def test_command_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    rc, out, err = run_cli(capsys, *args)
    assert rc == 2
    assert message in err and err.count("\n") == 1 and not out


# --- the runbook's remedy entries --------------------------------------------------------------


def render_remedy(remedy_id: str, facts: dict[str, Any]) -> tuple[dict[str, str], str]:
    from runbook import templating
    from runbook.spec import load_file, resolve

    runbook = load_file(resolve("nccl-init-failure"))
    ctx = {**runbook.vars, "vars": dict(runbook.vars), "facts": facts}
    remedy = runbook.remedy(remedy_id)
    params = {k: templating.render_text(v, ctx) for k, v in remedy.params.items()}
    return params, " ".join(templating.render_text(remedy.summary, ctx).split())


@pytest.mark.parametrize("remedy_id", ["memory-limit", "reduce-loader-memory"])
def test_the_runbooks_memory_remedies_carry_the_measured_processes(remedy_id: str) -> None:
    """Rendered over the capture's facts, the params give from_params the estimate that
    from_facts makes of the facts themselves; the summary says the numbers."""
    facts = {**capture_facts("named"), "kube": node_facts()}
    params, summary = render_remedy(remedy_id, facts)
    procmem = facts["procmem"]
    assert params["ranks"] == "2" and params["workers_per_rank"] == "2"
    assert params["per_rank_anon_bytes"] == str(procmem["per_rank"]["anon_bytes"]["max"])
    assert params["per_worker_anon_bytes"] == str(procmem["per_worker"]["own_anon_bytes"]["max"])
    assert params["shmem_bytes"] == str(16 * MiB)
    assert params["node_allocatable_bytes"] == str(2063868540 * 1024)
    from_params = estimate.from_params(params)
    from_facts = estimate.from_facts(facts)
    assert from_params.peak_bytes == from_facts.peak_bytes
    assert from_params.limit_bytes == from_facts.limit_bytes
    assert "2 rank(s) of up to 59.8 MiB anon, 4 loader worker(s) of up to" in summary


@pytest.mark.parametrize("remedy_id", ["memory-limit", "reduce-loader-memory"])
def test_the_memory_remedies_render_with_nothing_measured(remedy_id: str) -> None:
    not_collected = {"collected": False, "present": None}
    for facts in ({}, {"cgroup": not_collected, "procmem": {}, "kube": {"node": {}}}):
        params, summary = render_remedy(remedy_id, facts)
        assert {k: v for k, v in params.items() if k != "headroom"} == dict.fromkeys(
            [k for k in params if k != "headroom"], ""
        )
        assert "unknown" in summary
        with pytest.raises(EstimateError, match="nothing to estimate from"):
            estimate.from_params(params)
