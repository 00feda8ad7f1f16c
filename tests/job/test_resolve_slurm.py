"""`--job slurm:JOBID`: the record and its hosts → JobSpec (pure), then the resolver running
real commands: `scontrol`/`sacct` shims (recorded samples, tests/job/slurm/) on this machine's
PATH through the local transport, and on an SSH test host (a login node) through the real SSH
transport."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from runbook.errors import JobError
from runbook.job.resolve import resolve_job
from runbook.job.resolve_slurm import (
    job_spec_from_slurm,
    local_runner,
    resolve_slurm_job,
    select_record,
)
from runbook.job.slurm_parse import parse_scontrol_jobs
from runbook.sweep.inventory import HostEntry, entries_from_inventory
from runbook.targets import TargetOptions

SAMPLES = Path(__file__).with_name("slurm")


def record(name: str) -> Any:
    (job,) = parse_scontrol_jobs((SAMPLES / name).read_text())
    return job


def scontrol_shim(jobs: dict[str, str], hostnames: dict[str, str]) -> str:
    """A `scontrol` that prints recorded samples: `-d show job ID` → the sample file named in
    `jobs`, `show hostnames LIST` → the hosts in `hostnames`; any other job is unknown, as
    to a controller that has forgotten it."""
    cases = [f'"-d show job {i}") cat {shlex.quote(str(SAMPLES / f))} ;;' for i, f in jobs.items()]
    cases += [
        f'"show hostnames {expr}") printf {shlex.quote(hosts)} ;;'
        for expr, hosts in hostnames.items()
    ]
    return (
        "#!/bin/sh\n"
        'case "$*" in\n'
        + "\n".join(f"  {c}" for c in cases)
        + '\n  *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;\nesac\n'
    )


def sacct_shim(lines: dict[str, str]) -> str:
    """A `sacct` answering `-X -n -P -j ID -o …` with the recorded line for ID."""
    cases = [f'*"-j {i} "*) printf {shlex.quote(line)} ;;' for i, line in lines.items()]
    return '#!/bin/sh\ncase "$* " in\n' + "\n".join(cases) + "\n  *) exit 0 ;;\nesac\n"


HOSTNAMES = {"gpu-[07-08]": "gpu-07\ngpu-08\n", "gpu-[11-12]": "gpu-11\ngpu-12\n"}


def test_each_host_is_a_node_with_its_gpus_and_the_job_facts_are_kept() -> None:
    spec = job_spec_from_slurm(
        record("scontrol-23.02-failed-d.txt"), ["gpu-07", "gpu-08"], ssh_user="root"
    )
    assert spec.ref == "slurm:48213"
    assert [(n.name, n.entry.target, n.ranks) for n in spec.nodes] == [
        ("gpu-07", "ssh://root@gpu-07:22", (None,)),
        ("gpu-08", "ssh://root@gpu-08:22", (None,)),
    ]
    assert spec.nodes[0].entry.variables == {"slurm_job_id": "48213", "nodes": 2}
    # scontrol does not say which task ran where: one rank-less entry per node, its GPUs known
    assert [(r.rank, r.node, r.gpus[-1], r.phase) for r in spec.ranks] == [
        (None, "gpu-07", "7", "FAILED"),
        (None, "gpu-08", "7", "FAILED"),
    ]
    details = spec.details
    assert (details["state"], details["reason"], details["exit_code"], details["signal"]) == (
        "FAILED",
        "NonZeroExitCode",
        1,
        0,
    )
    assert (details["start_time"], details["end_time"], details["batch_host"]) == (
        "2025-03-11T09:00:01",
        "2025-03-11T09:41:37",
        "gpu-07",
    )
    assert (details["num_tasks"], details["source"]) == ("16", "scontrol")


def test_inventory_entries_reach_slurm_hosts_through_their_bastion() -> None:
    inventory = entries_from_inventory(
        {
            "_meta": {
                "hostvars": {
                    "gpu-07": {
                        "ansible_host": "10.0.7.7",
                        "ansible_port": 2222,
                        "ansible_user": "ops",
                        "ansible_ssh_common_args": "-o ProxyJump=ops@bastion.example:22",
                        "runbook_vars": {"app_log_dir": "/scratch/logs", "nodes": 99},
                    },
                    "gpu-08.cluster.example": {"ansible_host": "10.0.7.8"},
                }
            },
            "h100": {"hosts": ["gpu-07", "gpu-08.cluster.example"]},
        },
        default_user="root",
    )
    spec = job_spec_from_slurm(
        record("scontrol-23.02-failed-d.txt"), ["gpu-07", "gpu-08"], inventory=inventory
    )
    first, second = (n.entry for n in spec.nodes)
    assert (first.target, first.jump, first.groups) == (
        "ssh://ops@10.0.7.7:2222",
        "ops@bastion.example:22",
        ("h100",),
    )
    # the inventory's variables stay; the job's facts win over them
    assert first.variables == {"app_log_dir": "/scratch/logs", "nodes": 2, "slurm_job_id": "48213"}
    # a short Slurm name finds the inventory's FQDN entry
    assert (second.name, second.target) == ("gpu-08", "ssh://root@10.0.7.8:22")


def test_the_failed_node_of_a_node_fail_is_marked() -> None:
    spec = job_spec_from_slurm(
        record("scontrol-22.05-array-nodefail-d.txt"), ["gpu-11", "gpu-12"], ssh_user="root"
    )
    assert spec.ref == "slurm:7000_3"
    assert [(r.node, r.reason) for r in spec.ranks] == [("gpu-11", None), ("gpu-12", "FailedNode")]
    assert spec.details["failed_node"] == "gpu-12"


def test_an_array_named_by_its_bare_id_asks_for_one_element() -> None:
    jobs = parse_scontrol_jobs((SAMPLES / "scontrol-22.05-array-all.txt").read_text())
    with pytest.raises(JobError) as err:
        select_record(jobs, "7000")
    assert err.value.one_line() == (
        "slurm:7000 is 2 jobs (7000_4-9, 7000_3): name one, e.g. slurm:7000_4-9"
    )
    assert select_record(jobs, "7000_3").job_id == "7003"


@pytest.fixture
def shim_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on this process's PATH, for `scontrol` and `sacct` shims."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return bin_dir


def install(bin_dir: Path, name: str, text: str) -> None:
    (bin_dir / name).write_text(text)
    (bin_dir / name).chmod(0o755)


def test_scontrol_here_resolves_the_job_and_expands_its_nodelist(shim_path: Path) -> None:
    install(
        shim_path, "scontrol", scontrol_shim({"48213": "scontrol-23.02-failed-d.txt"}, HOSTNAMES)
    )
    spec = resolve_slurm_job("48213", runner=local_runner(), ssh_user="root")
    assert [n.name for n in spec.nodes] == ["gpu-07", "gpu-08"]
    assert spec.ranks[0].gpus == tuple(str(i) for i in range(8))


def test_a_job_the_controller_forgot_is_read_from_accounting(shim_path: Path) -> None:
    install(shim_path, "scontrol", scontrol_shim({}, HOSTNAMES))
    install(
        shim_path, "sacct", sacct_shim({"48213": (SAMPLES / "sacct-23.02-failed.txt").read_text()})
    )
    spec = resolve_slurm_job("48213", ssh_user="root")
    assert [n.name for n in spec.nodes] == ["gpu-07", "gpu-08"]
    assert (spec.details["source"], spec.details["state"], spec.details["exit_code"]) == (
        "sacct",
        "FAILED",
        1,
    )
    # accounting keeps no GPU indices
    assert spec.ranks[0].gpus == ()


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ("48290", "slurm:48290 is PENDING and ran on no node (Reason=Resources)"),
        ("7000", "slurm:7000 is 2 jobs (7000_4-9, 7000_3): name one, e.g. slurm:7000_4-9"),
        ("55555", "slurm:55555: neither scontrol nor sacct knows it"),
        ("12;reboot", "slurm:12;reboot: a Slurm job id is digits, ID_TASK or ID+OFFSET"),
    ],
)
def test_a_job_that_did_not_run_anywhere_is_one_line(
    shim_path: Path, job: str, message: str
) -> None:
    jobs = {"48290": "scontrol-22.05-pending.txt", "7000": "scontrol-22.05-array-all.txt"}
    install(shim_path, "scontrol", scontrol_shim(jobs, HOSTNAMES))
    install(shim_path, "sacct", sacct_shim({}))
    with pytest.raises(JobError) as err:
        resolve_slurm_job(job)
    assert err.value.one_line() == message


def test_a_machine_without_slurm_says_so(shim_path: Path) -> None:
    with pytest.raises(JobError) as err:
        resolve_slurm_job("48213")
    assert err.value.one_line() == "scontrol -d show job 48213: command not found"


def test_scontrol_runs_on_a_login_node_over_ssh(
    ssh_host: Any, known_hosts: Path, client_key: Any
) -> None:
    """The login node is a real sshd in a network namespace (tests/hosts); its `scontrol` and
    `sacct` are shims printing recorded samples."""
    login = ssh_host("login")
    login.write_shim(
        "scontrol",
        scontrol_shim(
            {
                "48213": "scontrol-23.02-failed-d.txt",
                "7000_3": "scontrol-22.05-array-nodefail-d.txt",
            },
            HOSTNAMES,
        ),
    )
    login.write_shim(
        "sacct",
        sacct_shim(
            {
                "39001": "39001|warmup|TIMEOUT|0:0|2025-03-10T21:00:00|2025-03-10T23:00:09|"
                "gpu-[11-12]|2|h100|alice\n"
            }
        ),
    )
    inventory = [HostEntry("gpu-07", "ssh://ops@10.0.7.7:2222", jump="ops@bastion:22")]
    options = TargetOptions(identities=(client_key.private_path,), known_hosts=known_hosts)
    via = f"ssh://root@{login.address}:{login.port}"

    spec = resolve_job(
        "slurm:48213", slurm_via=via, target_options=options, inventory=inventory, ssh_user="sre"
    )
    assert [(n.name, n.entry.target, n.entry.jump) for n in spec.nodes] == [
        ("gpu-07", "ssh://ops@10.0.7.7:2222", "ops@bastion:22"),
        ("gpu-08", "ssh://sre@gpu-08:22", None),
    ]
    assert spec.details["exit_code"] == 1

    element = resolve_job("slurm:7000_3", slurm_via=via, target_options=options, ssh_user="sre")
    assert (element.ref, element.details["state"]) == ("slurm:7000_3", "NODE_FAIL")

    forgotten = resolve_job("slurm:39001", slurm_via=via, target_options=options, ssh_user="sre")
    assert (forgotten.details["source"], forgotten.details["state"]) == ("sacct", "TIMEOUT")
    assert [n.name for n in forgotten.nodes] == ["gpu-11", "gpu-12"]
