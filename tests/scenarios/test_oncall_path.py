"""The on-call path end to end: one incident followed through every command an on-call engineer
types, on nodes configured the way real nodes are, each step's output asserted.

The nodes (tests/scenarios/fleet.py) are real sshd test hosts on port 24510 whose hostname is
`vm` (a cloud image's default: a node is known by the name typed, never by its hostname), after
an NCCL init failure whose cause is in the RDMA path (labelled for RDMA, no device, NCCL told to
use mlx5): the runbook proposes the NCCL_IB_DISABLE A/B, a playbook that runs on the node. The
engineer's machine is a temporary $HOME with ~/.ssh/config (aliases), known_hosts and keys; the
CLI is the installed `.venv/bin/runbook`, typed as a user types it (no --ssh-config), on a
pseudo-terminal where it prompts. What the engineer types is tests/scenarios/oncall.py's
`follow`: run (^C at the prompt) → approvals list/show/preview → resume (approve, or skip and
approve from the queue) → approvals approve → verify as printed → report → runs → the same run
for a script (--format json) → approvals deny.

Scenarios (one node each):

* ``alias-port``: `Host gpu-node-01` with HostName, Port 24510, User root, IdentityFile;
* ``proxyjump``: `gpu-node-02` behind `ProxyJump bastion-01` (both aliases); the node takes
  root logins from the bastion only;
* ``home-not-passwd``: `gpu-node-03` with no IdentityFile: the default key and known_hosts are
  in $HOME/.ssh, and the passwd home has none (OpenSSH's `ssh` reads the passwd home's);
* ``slurm``: `gpu-node-04`, no kubectl at all, found through the job: ``--job slurm:4242
  --slurm-via ssh://login-01`` (scontrol on the login node prints Slurm's own format);
* ``kubectl-agent``: ``kubectl://kube-system/node-agent-gpu-node-05``. No Kubernetes API server
  can run here: `kubectl` on the controller is a recorded double that execs into the node-agent
  pod by running the command on the node over SSH (`nsenter --target 1 … -- CMD` in the node's
  namespaces, anything else in the agent's container: the node's tools are not in its image);
* ``kubectl-path``: ``kubectl://kube-system/node-agent-gpu-node-11 --kubectl ~/tools/kubectl``:
  the cluster's kubectl is a double at a path off PATH; the `kubectl` on PATH (the other
  double) knows no such pod, so anything that runs it for this node fails (the A/B's
  playbook goes through Ansible's kubectl connection, which takes no path of its own);
* ``no-node-json``, ``no-nvidia-smi``, ``no-dcgmi``: aliases of nodes lacking those;
* ``no-all-reduce-perf``: typed as ``ssh://root@ADDRESS:24510 --identity … --known-hosts …``;
  the A/B cannot measure anything there;
* ``no-nccl-logs``: typed as ``ssh://root@ADDRESS:24510 --identity …``; no NCCL log on the node.

Each scenario is followed once (module-scoped, lazily, the first test that needs it); the tests
read its transcript. Where today's code does not behave as the on-call path needs, the test is
``xfail(strict=True)`` naming the defect (KNOWN below): the mark comes off with the fix.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.hosts.fixtures import HostFactory
from tests.hosts.harness import HostNetwork, TestHost
from tests.scenarios import fleet
from tests.scenarios.oncall import (
    Scenario,
    Transcript,
    follow,
    leaks,
    parse_commands,
    printed_commands,
)

pytestmark = [pytest.mark.live, pytest.mark.ssh, pytest.mark.ansible]

HOSTNAME = "vm"
#: scenarios followed at once (CI has 2 cores; a scenario spends most of its time waiting)
FOLLOWERS = 2
JOB = "4242"

SCENARIOS = [
    Scenario(
        "alias-port",
        "~/.ssh/config alias, Port 24510, IdentityFile",
        "gpu-node-01",
        target="ssh://gpu-node-01",
        name="gpu-node-01",
    ),
    Scenario(
        "proxyjump",
        "alias behind ProxyJump bastion-01 (an alias too)",
        "gpu-node-02",
        target="ssh://gpu-node-02",
        name="gpu-node-02",
        jump="bastion-01",
        decide="queue",
    ),
    Scenario(
        "home-not-passwd",
        "alias, default key and known_hosts in $HOME/.ssh only",
        "gpu-node-03",
        target="ssh://gpu-node-03",
        name="gpu-node-03",
    ),
    Scenario(
        "slurm",
        "Slurm node without kubectl, via --job slurm:4242 on login-01",
        "gpu-node-04",
        name="gpu-node-04",
        lacks=frozenset({"kubectl"}),
        job=(f"slurm:{JOB}", "ssh://login-01"),
        decide="queue",
    ),
    Scenario(
        "kubectl-agent",
        "kubectl://kube-system/node-agent-gpu-node-05 (API double)",
        "gpu-node-05",
        target="kubectl://kube-system/node-agent-gpu-node-05",
        name="gpu-node-05",
    ),
    Scenario(
        "kubectl-path",
        "kubectl://kube-system/node-agent-gpu-node-11 --kubectl ~/tools/kubectl (off PATH)",
        "gpu-node-11",
        target="kubectl://kube-system/node-agent-gpu-node-11",
        name="gpu-node-11",
        extra=("--kubectl", "{home}/tools/kubectl"),
        decide="queue",  # approved with `runbook approvals approve`, from the queue
    ),
    Scenario(
        "no-node-json",
        "alias; kubectl reaches no cluster: no node.json",
        "gpu-node-06",
        target="ssh://gpu-node-06",
        name="gpu-node-06",
        lacks=frozenset({"node.json"}),
    ),
    Scenario(
        "no-nvidia-smi",
        "alias; no nvidia-smi",
        "gpu-node-07",
        target="ssh://gpu-node-07",
        name="gpu-node-07",
        lacks=frozenset({"nvidia-smi"}),
        decide="queue",
    ),
    Scenario(
        "no-dcgmi",
        "alias; no dcgmi",
        "gpu-node-08",
        target="ssh://gpu-node-08",
        name="gpu-node-08",
        lacks=frozenset({"dcgmi"}),
    ),
    Scenario(
        "no-all-reduce-perf",
        "root@ADDRESS:24510 typed, --identity --known-hosts; no all_reduce_perf",
        "gpu-node-09",
        target="ssh://root@{address}:{port}",
        name="{address}:{port}",
        lacks=frozenset({"all_reduce_perf"}),
        decide="queue",
        extra=(
            "--identity",
            "{home}/.ssh/fleet/gpu_ed25519",
            "--known-hosts",
            "{home}/.ssh/known_hosts",
        ),
    ),
    Scenario(
        "no-nccl-logs",
        "root@ADDRESS:24510 typed, --identity; no NCCL logs",
        "gpu-node-10",
        target="ssh://root@{address}:{port}",
        name="{address}:{port}",
        lacks=frozenset({"nccl-logs"}),
        extra=("--identity", "{home}/.ssh/id_ed25519"),
        proposes=False,
    ),
]
BY_ID = {s.id: s for s in SCENARIOS}
ALL = [s.id for s in SCENARIOS]
#: a walk of one node that ends at the A/B's approval prompt
PROMPTED = [s.id for s in SCENARIOS if s.proposes and not s.is_job]
#: a proposal in the queue to show, preview, approve, verify and deny
QUEUED = [s.id for s in SCENARIOS if s.proposes]
#: where the A/B can measure (the node has all_reduce_perf)
MEASURES = [i for i in QUEUED if "all_reduce_perf" not in BY_ID[i].lacks]

#: (check, scenario) -> why it fails on today's code (the defect); checks are the test names'
#: short keys below. A check missing here is expected to pass.
KNOWN: dict[tuple[str, str], str] = {}


def case(check: str, ids: list[str]) -> list[Any]:
    """`ids` as parameters of `check`, each marked xfail(strict) where KNOWN says it fails."""
    return [
        pytest.param(i, marks=pytest.mark.xfail(strict=True, reason=KNOWN[(check, i)]))
        if (check, i) in KNOWN
        else i
        for i in ids
    ]


# --------------------------------------------------------------------------------------------
# the field: nodes, the bastion, the login node, the on-call engineer's home


@dataclass
class Field:
    network: HostNetwork
    home: fleet.OncallHome
    work: Path
    hosts: dict[str, TestHost]
    nodes: dict[str, fleet.NodeFiles]
    #: the calls of the kubectl on PATH, and of the one at ~/tools/kubectl (kubectl-path)
    kubectl_calls: Path
    path_kubectl_calls: Path
    transcripts: dict[str, Future[Transcript]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(FOLLOWERS))

    def __repr__(self) -> str:
        return f"Field({len(self.hosts)} hosts, {sorted(self.transcripts)})"

    def scenario(self, sid: str) -> Scenario:
        """The scenario with its runtime values filled in (the typed address, $HOME)."""
        s = BY_ID[sid]
        host = self.hosts[s.node]

        def fill(text: str) -> str:
            return text.format(address=host.address, port=host.port, home=self.home.home)

        return replace(
            s, target=fill(s.target), name=fill(s.name), extra=tuple(fill(a) for a in s.extra)
        )

    def address(self, sid: str) -> str:
        host = self.hosts[BY_ID[sid].node]
        return f"root@{host.address}:{host.port}"

    def start(self, sids: list[str]) -> None:
        """Follow these scenarios in the background, FOLLOWERS at a time (each is mostly
        waiting on SSH and Ansible's processes), in this order."""
        for sid in sids:
            if sid not in self.transcripts:
                self.transcripts[sid] = self.pool.submit(self._timed, sid)

    def transcript(self, sid: str) -> Transcript:
        self.start([sid])
        try:
            return self.transcripts[sid].result()
        except Exception as exc:  # every test of the scenario reports it
            raise AssertionError(f"following scenario {sid} failed: {exc!r}") from exc

    def _timed(self, sid: str) -> Transcript:
        started = time.monotonic()
        t = self._follow(sid)
        self.timings[sid] = time.monotonic() - started
        keep = os.environ.get("RBK_ONCALL_TRANSCRIPTS")  # a dir: each transcript as text
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            (Path(keep) / f"{sid}.txt").write_text(
                t.everything() + f"\n### (followed in {self.timings[sid]:.1f} s)\n"
            )
        return t

    def _follow(self, sid: str) -> Transcript:
        s = self.scenario(sid)
        state = self.work / "state" / sid
        state.mkdir(parents=True)
        node = self.nodes[s.node]
        return follow(
            s,
            env=self.home.environment(state),
            workdir=self.work,
            variables=node.variables,
            node_calls=node.collective_calls,
        )


def _set_hostname(host: TestHost, name: str) -> None:
    """The node's own hostname (its UTS namespace, which every SSH session shares)."""
    assert host.sshd_pid is not None
    subprocess.run(
        ["nsenter", "--target", str(host.sshd_pid), "--uts", "--", "hostname", name],
        check=True,
        capture_output=True,
        timeout=10,
    )


@pytest.fixture(scope="module")
def field_(
    scenario_hosts: HostFactory,
    host_network: HostNetwork,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Field]:
    work = tmp_path_factory.mktemp("oncall")
    names = ["bastion-01", "login-01", *(s.node for s in SCENARIOS if s.id != "proxyjump")]
    hosts = {h.name: h for h in scenario_hosts.many(names, port=fleet.PORT)}
    bastion = hosts["bastion-01"]
    hosts["gpu-node-02"] = scenario_hosts(
        "gpu-node-02", port=fleet.PORT, extra_sshd_config=f"AllowUsers root@{bastion.address}"
    )
    nodes = {}
    for s in SCENARIOS:
        host = hosts[s.node]
        if not s.target.startswith("kubectl://"):  # a Kubernetes node's hostname is its name
            _set_hostname(host, HOSTNAME)
        nodes[s.node] = fleet.dress(host, s.lacks, workdir=work / "nodes")
    fleet.install_scontrol(hosts["login-01"], JOB, "gpu-node-04")
    home = fleet.OncallHome(work / "oncall", host_network)
    key = str(home.fleet_key)
    for name in (
        "bastion-01",
        "login-01",
        "gpu-node-01",
        "gpu-node-04",
        "gpu-node-06",
        "gpu-node-07",
        "gpu-node-08",
    ):
        home.add(fleet.SshAlias(name, hosts[name], identity=key))
    home.add(fleet.SshAlias("gpu-node-02", hosts["gpu-node-02"], identity=key, jump="bastion-01"))
    home.add(fleet.SshAlias("gpu-node-03", hosts["gpu-node-03"]))  # the default keys
    home.trust(hosts.values())
    calls = fleet.install_kubectl_double(
        home.bin, host_network, {"kube-system/node-agent-gpu-node-05": hosts["gpu-node-05"]}
    )
    # kubectl-path's cluster: its kubectl only, not on PATH
    path_calls = fleet.install_kubectl_double(
        home.home / "tools", host_network,
        {"kube-system/node-agent-gpu-node-11": hosts["gpu-node-11"]},
    )  # fmt: skip
    here = Field(host_network, home, work, hosts, nodes, calls, path_calls)
    here.start(_selected(request))
    try:
        yield here
    finally:
        here.pool.shutdown(wait=True, cancel_futures=True)


def _selected(request: pytest.FixtureRequest) -> list[str]:
    """The scenarios this session's selected tests read, in SCENARIOS order (all of them for
    the test that reads every transcript)."""
    wanted: set[str] = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "sid" in params:
            wanted.add(params["sid"])
        elif getattr(item, "originalname", "").startswith("test_every_command"):
            wanted.update(ALL)
    return [s.id for s in SCENARIOS if s.id in wanted]


def transcript(field_: Field, sid: str) -> Transcript:
    return field_.transcript(sid)


def runs_on(field_: Field, sid: str) -> re.Pattern[str]:
    """The line the approver must see: `runs on: NAME = USER@HOST:PORT[ via JUMP]` (a
    node-agent pod: `runs on: … node-agent-…`)."""
    s = field_.scenario(sid)
    if s.target.startswith("kubectl://"):
        return re.compile(rf"^\s*runs on: .*node-agent-{re.escape(s.node)}", re.M)
    address = re.escape(field_.address(sid))
    jump = ""
    if s.jump:
        bastion = field_.hosts[s.jump]
        jump = rf" via (?:\S*@)?(?:{re.escape(s.jump)}|{re.escape(bastion.address)})\S*"
    return re.compile(rf"^\s*runs on: {re.escape(s.name)} = {address}{jump}\s*$", re.M)


# --------------------------------------------------------------------------------------------
# the premises


def test_the_on_call_home_is_not_the_passwd_home_and_the_passwd_home_knows_no_node(
    field_: Field,
) -> None:
    """The home-not-passwd scenario's premise: $HOME is the temporary home, the passwd entry
    says otherwise, and the passwd home's ssh config (if any) names none of the nodes."""
    passwd_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert passwd_home != field_.home.home
    config = passwd_home / ".ssh" / "config"
    text = config.read_text() if config.exists() else ""
    assert not re.search(r"gpu-node-0\d|bastion-01|login-01", text), config


def test_the_kubectl_on_the_controller_is_the_double_and_the_node_lacks_its_tools(
    field_: Field,
) -> None:
    """The kubectl-agent scenario's premise: `kubectl` on the CLI's PATH is the double, and the
    slurm node has no kubectl at all (`command -v` fails in a session on it)."""
    env = field_.home.environment(field_.work / "premise-state")
    found = subprocess.run(
        ["sh", "-c", "command -v kubectl"], env=env, capture_output=True, text=True, check=False
    )
    assert found.stdout.strip() == str(field_.home.bin / "kubectl")
    node = field_.hosts["gpu-node-04"]
    probe = subprocess.run(
        field_.network.ssh_argv(node, "command -v kubectl || echo no-kubectl-here"),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert probe.stdout.strip() == "no-kubectl-here", probe


# --------------------------------------------------------------------------------------------
# run: the walk, then the prompt


@pytest.mark.parametrize("sid", case("walk", PROMPTED))
def test_the_guided_run_names_the_node_as_typed_and_stops_at_the_approval_prompt(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    s, run = t.scenario, t.step("run")
    assert f"Verdict for {s.name}:" in run.out, run.show()
    assert f"Verdict for {HOSTNAME}:" not in run.out, run.show()
    prompts = [p for p in run.prompts if p.kind == "nccl-ib-disable-ab"]
    assert len(prompts) == 1, run.show()
    prompt = prompts[0]
    assert prompt.node == s.name, prompt.shown
    # ^C at the prompt: the run stops resumable, and says how to resume
    assert run.rc == 130, run.show()
    assert t.run_dir and Path(t.run_dir).is_dir(), run.show()
    assert f"runbook resume {t.run_dir}" in run.out, run.show()


@pytest.mark.parametrize("sid", case("why-not-run", PROMPTED))
def test_a_probe_that_could_not_run_without_an_input_says_which_input(
    field_: Field, sid: str
) -> None:
    """No pod and no cgroup were typed: the walk shows why pod.json and the cgroup's files
    were not collected, never "command not found" (which sent on-call looking for kubectl)."""
    run = transcript(field_, sid).step("run")
    lines = run.out.splitlines()
    pod = [line for line in lines if "→ pod.json" in line]
    assert pod and all("not run: no pod given (--var pod=NAME)" in line for line in pod), pod
    cgroup = [line for line in lines if "→ cgroup/memory.*" in line or "→ procmem/*" in line]
    assert len(cgroup) == 2 and all("not run: no cgroup given (--cgroup DIR" in x for x in cgroup)
    assert "command not found" not in "\n".join(pod + cgroup)


@pytest.mark.parametrize("sid", case("job", ["slurm"]))
def test_a_slurm_job_is_found_on_its_login_node_and_its_node_walked_without_kubectl(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    run = t.step("run")
    assert run.rc == 0, run.show()
    assert "gpu-node-04" in run.out and f"slurm:{JOB}" in run.out, run.show()
    assert not run.prompts, "a job's proposals are queued, never prompted"
    assert t.proposal, f"no A/B proposal queued: {t.errors}\n{run.show()}"


def _kubectl_calls(path: Path) -> list[list[str]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("sid", case("agent", ["kubectl-agent", "kubectl-path"]))
def test_a_node_agent_target_is_walked_through_kubectl_exec_and_nsenter(
    field_: Field, sid: str
) -> None:
    """The walk reached the node's namespaces: each probe went through `kubectl exec` into
    the agent pod, wrapped in `nsenter --target 1` (the double logs every argv it got), by
    the kubectl the engineer named (`--kubectl`), else the one on PATH."""
    t = transcript(field_, sid)
    assert f"Verdict for {t.scenario.name}:" in t.step("run").out, t.step("run").show()
    pod = f"node-agent-{t.scenario.node}"
    named = sid == "kubectl-path"
    calls = _kubectl_calls(field_.path_kubectl_calls if named else field_.kubectl_calls)
    walked = [
        c
        for c in calls
        if "nsenter" in c
        and c[c.index("nsenter") + 1 : c.index("nsenter") + 3] == ["--target", "1"]
        and pod in c
    ]
    assert walked, calls[:5]
    assert all("kube-system" in c for c in walked)


@pytest.mark.parametrize("sid", case("kubectl-named", ["kubectl-path"]))
def test_every_command_for_a_node_reached_with_kubectl_path_runs_that_kubectl(
    field_: Field, sid: str
) -> None:
    """The walk, the check-mode preview and the approved A/B (Ansible's kubectl connection,
    which takes no path: the plan puts the named kubectl first on its PATH) all exec through
    ~/tools/kubectl; the kubectl on PATH is never asked for this node's pod."""
    t = transcript(field_, sid)
    pod = f"node-agent-{t.scenario.node}"
    assert not [c for c in _kubectl_calls(field_.kubectl_calls) if pod in c]
    assert [c for c in _kubectl_calls(field_.path_kubectl_calls) if pod in c]
    # the approved A/B's two runs of all_reduce_perf happened on the node (through the PATH
    # double they could not: it knows no such pod)
    ran = [c.get("env", {}).get("NCCL_IB_DISABLE") for c in t.ab_calls]
    assert ran == [None, "1"], t.everything()[-3000:]


@pytest.mark.parametrize("sid", case("advice", ["no-nccl-logs"]))
def test_a_node_without_nccl_logs_is_inconclusive_asks_for_them_and_queues_nothing(
    field_: Field, sid: str
) -> None:
    """Without NCCL's own log nothing shows IB failing: no cause is named, no change proposed,
    and the walk says what to collect; `approvals list` and `resume` have nothing to do."""
    t = transcript(field_, sid)
    s, run = t.scenario, t.step("run")
    assert run.rc == 0 and not run.prompts, run.show()
    assert f"Verdict for {s.name}: inconclusive" in run.out, run.show()
    advice = [line for line in run.out.splitlines() if "collect next:" in line]
    assert advice and "NCCL logs" in advice[0], run.show()
    assert t.proposal is None and "no proposals" in t.step("approvals list").out
    resume = t.step("resume")
    assert resume.rc == 0 and "nothing to do" in resume.out, resume.show()


@pytest.mark.parametrize("sid", case("prompt", PROMPTED))
def test_the_prompt_shows_where_the_change_runs_and_offers_approve_after_its_check_passed(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    run = t.step("run")
    prompts = [p for p in run.prompts if p.kind == "nccl-ib-disable-ab"]
    assert prompts, run.show()
    prompt = prompts[0]
    assert runs_on(field_, sid).search(prompt.shown), prompt.shown
    assert "the check run failed" not in prompt.shown, prompt.shown
    assert prompt.offered == ("approve", "deny", "skip"), prompt.shown


# --------------------------------------------------------------------------------------------
# the queue


@pytest.mark.parametrize("sid", case("show", QUEUED))
def test_approvals_list_and_show_name_the_node_as_typed_and_the_address_it_resolves_to(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    s = t.scenario
    listed, shown = t.step("approvals list"), t.step("approvals show")
    assert listed.rc == 0 and shown.rc == 0, listed.show() + shown.show()
    assert t.proposal, t.errors
    row = next((line for line in listed.stdout.splitlines() if t.proposal in line), "")
    assert f"  {s.name}  " in row, listed.show()
    assert shown.stdout.startswith(f"{t.proposal}  nccl-ib-disable-ab on {s.name}  "), shown.show()
    assert runs_on(field_, sid).search(shown.stdout), shown.show()


@pytest.mark.parametrize("sid", case("preview", QUEUED))
def test_approvals_preview_reaches_the_node_the_diagnosis_reached(field_: Field, sid: str) -> None:
    preview = transcript(field_, sid).step("approvals preview")
    assert preview.rc == 0, preview.show()
    for failure in ("unreachable", "Could not resolve", "Permission denied", "failed "):
        assert failure not in preview.out, preview.show()


# --------------------------------------------------------------------------------------------
# the approval and the playbook on the node


def _approving_step(t: Transcript) -> str:
    return "resume" if t.scenario.decide == "prompt" else "approvals approve"


@pytest.mark.parametrize("sid", case("ab", MEASURES))
def test_the_approved_ab_runs_twice_on_the_node_and_reports_what_it_measured(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    step = t.step(_approving_step(t))
    assert step.rc == 0, step.show()
    assert "IB init/transport fails and Socket succeeds" in step.out, step.show()
    ran = [c.get("env", {}).get("NCCL_IB_DISABLE") for c in t.ab_calls]
    assert ran == [None, "1"], f"all_reduce_perf on the node: {t.ab_calls}\n{step.show()}"
    state = t.proposal_state()
    assert state and state["state"] == "succeeded", state


@pytest.mark.parametrize("sid", case("ab-not-run", ["no-all-reduce-perf"]))
def test_an_ab_on_a_node_without_all_reduce_perf_could_not_measure_and_is_no_success(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    step = t.step("approvals approve")
    assert "could not measure: all_reduce_perf not found on " in step.out, step.show()
    assert "both fail" not in step.out, step.show()
    assert step.rc not in (0, None), step.show()
    state = t.proposal_state()
    assert state and state["state"] != "succeeded", state
    # nothing was applied: no recovery check is offered, here or at the prompt before
    for name in ("approvals approve", "resume"):
        out = t.step(name).out
        assert "check that the fix held" not in out and "recovery check now" not in out, out


@pytest.mark.parametrize("sid", case("ab-name", QUEUED))
def test_the_ab_result_names_the_node_as_typed(field_: Field, sid: str) -> None:
    """`A/B on NAME` and any `… not found on NAME`: the name typed (an alias, or host:port),
    never the hostname, nor the address without the port that was typed."""
    t = transcript(field_, sid)
    s, step = t.scenario, t.step(_approving_step(t))
    heads = re.findall(r"^A/B on (\S+)$", step.out, re.M)
    assert heads == [s.name], step.show()
    for where in re.findall(r"not found on (\S+)", step.out):
        assert where == s.name, step.show()


@pytest.mark.parametrize("sid", case("twice", [i for i in PROMPTED if BY_ID[i].decide == "prompt"]))
def test_a_proposal_approved_at_the_prompt_is_never_run_again_from_the_queue(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    again = t.step("approvals approve")
    assert again.rc == 1 and "never run twice" in again.out, again.show()
    assert len(t.ab_calls) == 2, t.ab_calls


@pytest.mark.parametrize("sid", case("diagnostic", ["alias-port"]))
def test_an_ab_that_changes_nothing_offers_no_check_that_a_fix_held(
    field_: Field, sid: str
) -> None:
    """The A/B is diagnostic only (nothing is left set on the node): there is no fix whose
    holding could be checked, so none is offered."""
    t = transcript(field_, sid)
    step = t.step(_approving_step(t))
    assert not step.offers, step.show()
    assert "check that the fix held" not in step.out, step.show()


# --------------------------------------------------------------------------------------------
# verify, report, resume, runs


@pytest.mark.parametrize("sid", case("verify", QUEUED))
def test_verify_never_says_a_fix_held_where_nothing_was_fixed(field_: Field, sid: str) -> None:
    """The A/B changes nothing on the node: `verify` either refuses in one line (no fix to
    verify) or checks the node, named as typed, and finds the fault still there (where it
    could not measure, it says so); never `verified`."""
    t = transcript(field_, sid)
    s, verify = t.scenario, t.step("verify")
    assert verify.rc == 1, verify.show()
    assert "verification: verified" not in verify.out, verify.show()
    if not verify.stdout.strip():
        # refused: one line that names the proposal and says why (the A/B fixed nothing)
        (line,) = verify.stderr.strip().splitlines()
        assert t.proposal and t.proposal in line and ("no fix" in line or "not" in line), (
            verify.show()
        )
    elif "all_reduce_perf" in s.lacks:
        assert "all_reduce_perf" in verify.out and "not found" in verify.out, verify.show()
    else:
        assert f"collective test on {s.name}: rdma-misconfigured" in verify.out, verify.show()
        assert "failed-verification" in verify.out, verify.show()


@pytest.mark.parametrize("sid", case("report", ALL))
def test_the_report_names_the_node_as_typed(field_: Field, sid: str) -> None:
    t = transcript(field_, sid)
    s, report = t.scenario, t.step("report")
    assert report.rc == 0, report.show()
    if s.is_job:
        assert s.name in report.stdout, report.show()
    else:
        assert report.stdout.startswith(f"# {s.name}: "), report.show()
    assert f"# {HOSTNAME}:" not in report.stdout, report.show()


@pytest.mark.parametrize("sid", case("resume", PROMPTED))
def test_resume_after_the_interrupted_prompt_asks_only_that_proposal_again(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    resume = t.step("resume")
    assert resume.rc == 0, resume.show()
    assert [p.kind for p in resume.prompts] == ["nccl-ib-disable-ab"], resume.show()
    assert resume.prompts[0].proposal == t.proposal, resume.show()
    assert "━━ 1/9" not in resume.out, "the finished walk was walked again"


@pytest.mark.parametrize("sid", case("job-resume", ["slurm"]))
def test_resume_of_a_job_run_directory_refuses_in_one_line(field_: Field, sid: str) -> None:
    t = transcript(field_, sid)
    resume = t.step("resume")
    assert resume.rc == 2, resume.show()
    assert len(resume.out.strip().splitlines()) == 1, resume.show()


@pytest.mark.parametrize("sid", case("runs", ALL))
def test_runs_and_output_directories_are_named_after_the_node_as_typed(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    s, runs = t.scenario, t.step("runs")
    assert runs.rc == 0, runs.show()
    rows = [line for line in runs.stdout.splitlines() if "nccl-init-failure" in line]
    # a node's run names its node; a job's run names the job and its nodes
    named = f" on {s.name}" if s.is_job else f"  {s.name}  "
    assert rows and all(named in row for row in rows), runs.show()
    if s.proposes:
        assert t.remedy_dirs, "no remedy output directory"
    assert all(
        d.startswith(s.name.replace(":", "_")) or d.startswith(s.name) for d in t.remedy_dirs
    ), t.remedy_dirs


@pytest.mark.parametrize("sid", case("json", QUEUED))
def test_run_for_a_script_carries_its_run_dir_and_a_denial_is_recorded_with_its_reason(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    again = t.step("run --format json")
    assert again.rc == 0, again.show()
    assert t.run_json is not None, again.show()
    run_dir = t.run_json.get("run_dir")
    assert run_dir and Path(run_dir).is_dir() and run_dir != t.run_dir, t.run_json.keys()
    deny = t.step("approvals deny")
    assert deny.rc == 0, deny.show()
    denied = [p for p in t.queue if p.get("state") == "denied"]
    assert [p.get("reason") for p in denied] == ["not while the job is rescheduled"], t.queue


# --------------------------------------------------------------------------------------------
# every output of every step


@pytest.mark.parametrize("sid", case("clean", ALL))
def test_no_output_of_the_on_call_path_holds_template_text_or_a_traceback(
    field_: Field, sid: str
) -> None:
    t = transcript(field_, sid)
    found = {name: leaks(step.out) for name, step in t.steps.items()}
    found = {name: lines for name, lines in found.items() if lines}
    assert not found, found


def test_every_command_the_on_call_path_prints_parses_with_the_clis_own_parser(
    field_: Field,
) -> None:
    """Next steps, `resume with`, `check that the fix held`, `queued: runbook approvals show
    ID / approve ID`, and each flag given as advice (`collect next: …; --cgroup DIR`, `give
    --cgroup DIR`) for the command that printed it: every one must parse."""
    printed = []
    for s in SCENARIOS:
        try:
            printed += printed_commands(field_.transcript(s.id))
        except AssertionError:
            continue  # that scenario's own tests report it
    assert printed, "no command printed at all"
    env = field_.home.environment(field_.work / "parse-state")
    results = parse_commands([p.argv for p in printed], env)
    bad: dict[str, str] = {}
    for p, result in zip(printed, results, strict=True):
        if not result["ok"]:
            bad.setdefault(
                " ".join(p.argv), f"{result['error']} — from {p.scenario}/{p.step}: {p.line[:200]}"
            )
    assert not bad, "\n".join(f"runbook {cmd}: {why}" for cmd, why in bad.items())


def test_the_collector_finds_each_kind_of_printed_command_and_the_parser_refuses_a_bad_one(
    field_: Field,
) -> None:
    """The machinery of the test above, on a transcript made up here: a full command after a
    colon, the `/ approve ID` shorthand, advice flags for the command that printed them; prose
    that only mentions the runbook is no command; an unknown flag fails to parse."""
    from tests.scenarios.oncall import Step

    t = Transcript(BY_ID["alias-port"])
    t.steps["run"] = Step(
        "run",
        ["runbook", "run", "nccl-init-failure", "--target", "ssh://gpu-node-01"],
        130,
        "  queued: runbook approvals show p1234567 / approve p1234567\n"
        "interrupted; resume with: runbook resume /tmp/x\n"
        "  proposal collect-more (no change): collect next: the pod object (--var pod=NAME); "
        "the pod's cgroup (--frobnicate DIR)\n"
        "re-run the runbook for a fresh proposal\n",
    )
    printed = printed_commands(t)
    argvs = [p.argv for p in printed]
    assert argvs == [
        ("approvals", "show", "p1234567"),
        ("approvals", "approve", "p1234567"),
        ("resume", "/tmp/x"),
        ("run", "nccl-init-failure", "--target", "ssh://NODE", "--var", "pod=NAME"),
        ("run", "nccl-init-failure", "--target", "ssh://NODE", "--frobnicate", "DIR"),
    ], argvs
    env = field_.home.environment(field_.work / "parse-state")
    results = parse_commands(argvs, env)
    assert [r["ok"] for r in results] == [True, True, True, True, False], results
    assert "No such option '--frobnicate'" in results[-1]["error"]


def test_run_takes_the_pod_namespace_and_cgroup_flags_as_collect_does(field_: Field) -> None:
    """One flag name per concept: what `collect` takes to name the failed job on the node,
    `run` takes too (the walk's advice names them)."""
    env = field_.home.environment(field_.work / "parse-state")
    flags = ("--pod", "trainer-0", "--namespace", "ml", "--cgroup", "DIR")
    argvs = [
        ("run", "nccl-init-failure", "--target", "ssh://gpu-node-01", *flags),
        ("collect", "--target", "ssh://gpu-node-01", "-o", "bundle", *flags),
    ]
    results = parse_commands(argvs, env)
    assert all(r["ok"] for r in results), results
