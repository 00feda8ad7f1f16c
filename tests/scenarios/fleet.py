"""Nodes as they are in the field, and the on-call engineer's own machine, for the on-call path
scenarios (tests/scenarios/test_oncall_path.py).

A *node* is a test host of :mod:`tests.hosts.harness` (its own network namespace, address,
hostname and sshd) listening on a non-default port (:data:`PORT`), dressed as a GPU node after
an NCCL init failure whose cause is in the RDMA path:

* the healthy 8-GPU profile of :mod:`tests.scenarios.shims` (``nvidia-smi``, ``lspci``, a
  ``dcgmi`` that answers healthy), but ``rdma link show`` lists no device and there is no
  ``ibdev2netdev``;
* a quiet kernel log (a ``dmesg`` shim: the machine's own log holds other tests' OOM kills);
* a ``kubectl`` that answers ``kubectl get node NAME -o json`` with a recorded Node object
  labelled for RDMA (no API server can run here; the labels are what a real GPU Operator sets);
* the training ranks' logs (``ncclCommInitRank failed: unhandled cuda error``) and one NCCL
  ``NCCL_DEBUG=INFO`` log (``NCCL_IB_HCA set to mlx5`` then ``NET/IB : No device found``) in
  directories of their own, passed to the run as ``--var app_log_dir`` / ``nccl_log_dir``;
* the A/B remedy's ``all_reduce_perf`` (:mod:`tests.tools.collective`: IB fails at
  ``ibv_reg_mr``, Socket completes), which logs every call on the node.

:func:`dress` takes what the node *lacks* (:data:`LACKABLE`): no ``node.json`` (a ``kubectl``
that reaches no cluster), no ``nvidia-smi``, no ``dcgmi``, no ``all_reduce_perf``, no NCCL logs,
or no ``kubectl`` at all (the machine's own kubectl hidden in the node's private mount
namespace by an overlay whiteout: ``kubectl: not found``, exit 127, as on a Slurm node).

Around the nodes: :func:`install_scontrol` (a Slurm login node's ``scontrol``, Slurm's own
format), :func:`install_kubectl_double` (a ``kubectl`` for the controller that execs into
node-agent pods by running the command on the node over SSH: the recorded double of the
Kubernetes API for ``kubectl://`` targets), and :class:`OncallHome` (a ``$HOME`` with
``.ssh/config``, ``known_hosts`` and keys, the way an on-call engineer's machine has them, and the
environment the CLI runs in).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.hosts.harness import STANDARD_PATH, HostNetwork, TestHost
from tests.scenarios import shims
from tests.scenarios.shims import Output
from tests.tools import collective
from tests.tools.ansible_env import ansible_dirs

#: every node's sshd listens here, as a fleet behind a port policy does
PORT = 24510
#: what a node may lack (see :func:`dress`)
LACKABLE = frozenset({"node.json", "kubectl", "nvidia-smi", "dcgmi", "all_reduce_perf",
                      "nccl-logs"})  # fmt: skip
NOW = dt.datetime.now()  # the hosts share this machine's clock
APP_ERROR_AT = NOW - dt.timedelta(minutes=9)
DCGM_SAMPLES = Path(__file__).resolve().parents[1] / "unit" / "parsers" / "samples" / "dcgm"


def _kernel_stamp(at: dt.datetime) -> str:
    """A `dmesg -T` stamp: `[Wed Dec  2 11:33:35 2026]`."""
    return at.strftime("[%a %b ") + f"{at.day:2d}" + at.strftime(" %H:%M:%S %Y]")


def quiet_kernel_log() -> Output:
    boot = _kernel_stamp(NOW - dt.timedelta(hours=3))
    return Output(
        f"{boot} Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)\n"
        f"{boot} nvidia: loading out-of-tree module taints kernel.\n"
        f"{boot} NVRM: loading NVIDIA UNIX x86_64 Kernel Module  575.57.08\n"
    )


def rank_log(rank: int) -> str:
    t = APP_ERROR_AT.strftime("%Y-%m-%dT%H:%M:%S")
    return (
        f"{t}.100Z [rank{rank}] INFO init_process_group(nccl)\n"
        f"{t}.900Z [rank{rank}] ERROR UnknownError: ncclCommInitRank failed: unhandled cuda "
        "error (run with NCCL_DEBUG=INFO for details)\n"
    )


_KUBECTL_NODE = """#!/bin/sh
# test shim: a recorded `kubectl get node NAME -o json` (no API server can run here)
case "$*" in
  "get node "*" -o json") cat {node_json} ;;
  *) echo "error: the server doesn't have a resource type for: $*" >&2; exit 1 ;;
esac
"""

_KUBECTL_NO_CLUSTER = """#!/bin/sh
# test shim: kubectl installed on a node that belongs to no cluster (no kubeconfig)
echo "The connection to the server localhost:8080 was refused - did you specify the right \
host or port?" >&2
exit 1
"""


def _dcgmi_script() -> str:
    q = shlex.quote
    return "\n".join([
        "#!/bin/sh",
        "# test shim: replays real-format dcgmi output (no GPU or DCGM host engine here)",
        'case "$*" in',
        f"  'discovery -l') cat {q(str(DCGM_SAMPLES / 'discovery-a100-8gpu-3x.txt'))} ;;",
        f"  'health -c') cat {q(str(DCGM_SAMPLES / 'health-tree-healthy.txt'))} ;;",
        '  *) echo "dcgmi: shim has no output for: $*" >&2; exit 2 ;;',
        "esac",
        "",
    ])  # fmt: skip


@dataclass(frozen=True)
class NodeFiles:
    """Where a dressed node's evidence is, and how to read what ran on it."""

    host: TestHost
    lacks: frozenset[str]
    app_log_dir: Path
    nccl_log_dir: Path
    nccl_tests_dir: Path

    @property
    def variables(self) -> dict[str, str]:
        """The run's `--var`s an on-call engineer gives for this node's logs."""
        return {"app_log_dir": str(self.app_log_dir), "nccl_log_dir": str(self.nccl_log_dir),
                "nccl_tests_dir": str(self.nccl_tests_dir)}  # fmt: skip

    def collective_calls(self) -> list[dict[str, object]]:
        """Each ``all_reduce_perf`` run on this node so far (argv and NCCL_* environment)."""
        return collective.calls(self.host)


def dress(host: TestHost, lacks: Iterable[str] = (), *, workdir: Path) -> NodeFiles:
    """Make `host` the node described in the module docstring, less what `lacks` names."""
    lacks = frozenset(lacks)
    unknown = lacks - LACKABLE
    if unknown:
        raise ValueError(f"a node cannot lack {sorted(unknown)}")
    changes: dict[str, Output | None] = {
        "rdma-link": Output(""), "ibdev2netdev": None, "all_reduce_perf": None,
        "dmesg": quiet_kernel_log(),
    }  # fmt: skip
    outputs = shims.profile("healthy-8gpu", **changes)
    if "nvidia-smi" in lacks:
        outputs = {k: v for k, v in outputs.items() if not k.startswith("nvidia-smi")}
    shims.install(host, outputs)
    if "dcgmi" not in lacks:
        host.write_shim("dcgmi", _dcgmi_script())
    if "all_reduce_perf" not in lacks:
        collective.install_ab_all_reduce_perf(host)
    if "kubectl" in lacks:
        hide_command(host, "kubectl")
    elif "node.json" in lacks:
        host.write_shim("kubectl", _KUBECTL_NO_CLUSTER)
    else:
        node = json.loads((shims.DATA / "rdma-label-node.json").read_text())
        node["metadata"]["name"] = host.name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = host.name
        node_json = Path(host.dir) / "node.json"
        node_json.write_text(json.dumps(node))
        host.write_shim("kubectl", _KUBECTL_NODE.format(node_json=shlex.quote(str(node_json))))
    base = workdir / host.name
    app, nccl, tests = base / "training", base / "nccl", base / "nccl-tests"
    for path in (app, nccl, tests):
        path.mkdir(parents=True)
    for rank in range(2):
        (app / f"rank-{rank}.log").write_text(rank_log(rank))
    if "nccl-logs" not in lacks:
        template = (shims.DATA / "nccl-logs" / "ib-no-device.log").read_text()
        (nccl / f"nccl.{host.name}.4242.log").write_text(
            template.format(host=host.name, address=host.address)
        )
    return NodeFiles(host, lacks, app, nccl, tests)


def hide_command(host: TestHost, command: str) -> None:
    """`command` absent on the node: each directory of the node's PATH holding it is overlaid,
    in the host's private mount namespace only, with a whiteout of that name (the machine's own
    file is untouched and every other file of the directory still there). The overlays go with
    the host's namespace."""
    pid = host.sshd_pid
    if pid is None:
        raise RuntimeError(f"{host.name}: sshd is not running")
    dirs = [d for d in STANDARD_PATH.split(":") if os.path.lexists(os.path.join(d, command))]
    scratch = Path(host.dir) / "hidden"
    scratch.mkdir(exist_ok=True)
    steps = [f"mount -t tmpfs -o size=1m,mode=700 rbk-hidden {shlex.quote(str(scratch))}"]
    for index, directory in enumerate(dirs):
        upper, work = scratch / f"u{index}", scratch / f"w{index}"
        steps += [
            f"mkdir {shlex.quote(str(upper))} {shlex.quote(str(work))}",
            f"mknod {shlex.quote(str(upper / command))} c 0 0",
            "mount -t overlay rbk-hide -o "
            + shlex.quote(f"lowerdir={directory},upperdir={upper},workdir={work}")
            + f" {directory}",
        ]
    argv = ["nsenter", "--target", str(pid), "--mount", "--", "sh", "-ec", "; ".join(steps)]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


SCONTROL = """#!/bin/sh
# test shim: a Slurm controller's answers for job {job} only, in scontrol's own format
case "$*" in
  "-d show job {job}") cat <<'JOB'
JobId={job} JobName=llm-pretrain
   UserId=alice(1001) GroupId=ml(1001) MCS_label=N/A
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=1:0
   RunTime=00:01:12 TimeLimit=04:00:00 TimeMin=N/A
   StartTime={start} EndTime={end} Deadline=N/A
   Partition=gpu AllocNode:Sid=login-01:2201
   NodeList={node}
   BatchHost={node}
   NumNodes=1 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:*
   JOB_GRES=gpu:8
     Nodes={node} CPU_IDs=0-15 Mem=65536 GRES=gpu:8(IDX:0-7)
   Command=/home/alice/run.sh
JOB
  ;;
  "show hostnames {node}") echo {node} ;;
  *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
esac
"""


def install_scontrol(login: TestHost, job: str, node: str) -> None:
    """`scontrol` on a Slurm login node, knowing one failed job that ran on `node`."""
    start = (APP_ERROR_AT - dt.timedelta(minutes=1)).replace(microsecond=0)
    login.write_shim(
        "scontrol",
        SCONTROL.format(
            job=job,
            node=node,
            start=start.isoformat(),
            end=(start + dt.timedelta(minutes=2)).isoformat(),
        ),
    )


_KUBECTL_DOUBLE = '''#!{python}
"""Test double of `kubectl exec` into node-agent pods (no Kubernetes API server can run here).

Each pod of {pods} stands for a privileged node-agent pod on one test host. `exec … -- nsenter
--target 1 … -- CMD` runs CMD on that host over SSH, in the node's namespaces (the test host's
own); `exec … -- CMD` without nsenter runs CMD in the agent's container: the same host with
the agent image's PATH only (the node's own tools, such as all_reduce_perf or nvidia-smi, are
on the node, not in the image). The image's `nsenter` (a double too: the test hosts may not
enter PID 1) runs what follows its `--` with the node's PATH, as entering the node's mount
namespace would. Every call is logged, one JSON argv per line, to {calls}.
Anything but `exec`, or an unknown pod, fails as kubectl does."""
import json, os, shlex, signal, subprocess, sys

args = sys.argv[1:]
with open({calls!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
if "exec" not in args or "--" not in args:
    print("error: this kubectl double serves only `kubectl exec … -- COMMAND`", file=sys.stderr)
    sys.exit(1)
at = args.index("exec")
dash = args.index("--", at)
before, options, command = args[:at], args[at + 1:dash], args[dash + 1:]
namespace, pod, stdin = "default", None, False
flags = before + options
i = 0
while i < len(flags):
    flag = flags[i]
    if flag in ("-n", "--namespace"):
        namespace, i = flags[i + 1], i + 2
        continue
    if flag.startswith("--namespace="):
        namespace = flag.split("=", 1)[1]
    elif flag in ("-i", "--stdin"):
        stdin = True
    elif flag in ("-c", "--container", "--context", "--kubeconfig", "--server", "--token"):
        i += 2
        continue
    elif not flag.startswith("-") and i >= len(before):
        pod = pod or flag
    i += 1
pods = json.load(open({pods!r}))
node = pods.get(f"{{namespace}}/{{pod}}")
if node is None:
    print(f'Error from server (NotFound): pods "{{pod}}" not found', file=sys.stderr)
    sys.exit(1)
if command[:1] == ["nsenter"] and "--" in command:
    remote = shlex.join(command[command.index("--") + 1:])
else:
    remote = (f"env -i PATH={image_path} HOME=/root RBK_NODE_PATH={{node['path']}} "
              + shlex.join(command))
argv = ["ssh", "-F", "/dev/null", "-i", node["key"], "-o", "IdentitiesOnly=yes",
        "-o", "UserKnownHostsFile=" + node["known_hosts"], "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
        "-p", str(node["port"]), "--", "root@" + node["address"], remote]
child = subprocess.Popen(argv, stdin=None if stdin else subprocess.DEVNULL)
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, lambda s, f: child.send_signal(s))
rc = child.wait()
if rc != 0:
    print(f"command terminated with exit code {{rc}}", file=sys.stderr)
sys.exit(rc)
'''


def install_kubectl_double(
    directory: Path, network: HostNetwork, pods: Mapping[str, TestHost]
) -> Path:
    """`kubectl` in `directory` (put it first on the controller's PATH: the CLI and the
    Ansible it starts both find it there); `pods` maps ``NAMESPACE/POD`` to the node it runs on.
    Returns the file each call is logged to."""
    directory.mkdir(parents=True, exist_ok=True)
    table = directory / "pods.json"
    table.write_text(json.dumps({
        ref: {"address": host.address, "port": host.port,
              "key": str(network.client_key.private_path),
              "known_hosts": str(network.known_hosts_path), "path": host.session_path}
        for ref, host in pods.items()
    }))  # fmt: skip
    # the agent image's nsenter: into the node = the node's tools on PATH (see the docstring)
    image_bin = directory / "agent-image-bin"
    image_bin.mkdir(exist_ok=True)
    (image_bin / "nsenter").write_text(
        "#!/bin/sh\n# test double of nsenter in the node-agent image: the node's PATH, then CMD\n"
        'while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done\n'
        '[ "$#" -gt 0 ] && shift\n'
        'PATH="$RBK_NODE_PATH"; export PATH\n'
        'exec "$@"\n'
    )
    (image_bin / "nsenter").chmod(0o755)
    calls = directory / "kubectl.calls"
    script = directory / "kubectl"
    script.write_text(
        _KUBECTL_DOUBLE.format(
            python=sys.executable, pods=str(table), calls=str(calls),
            image_path=f"{image_bin}:{STANDARD_PATH}",
        )
    )
    script.chmod(0o755)
    return calls


@dataclass
class SshAlias:
    """One `Host` block of the on-call engineer's ~/.ssh/config."""

    name: str
    host: TestHost
    #: IdentityFile as written in the file (None: the default keys in ~/.ssh)
    identity: str | None = None
    jump: str | None = None

    def block(self) -> str:
        lines = [f"Host {self.name}", f"    HostName {self.host.address}",
                 f"    Port {self.host.port}", "    User root"]  # fmt: skip
        if self.identity:
            lines.append(f"    IdentityFile {self.identity}")
        if self.jump:
            lines.append(f"    ProxyJump {self.jump}")
        return "\n".join(lines) + "\n"


@dataclass
class OncallHome:
    """The on-call engineer's machine: `$HOME` with ``.ssh/config`` (aliases), ``.ssh/
    known_hosts`` (every node's key under ``[address]:port``, as ssh records it), the fleet key
    both as ``~/.ssh/id_ed25519`` (a default key) and as ``~/.ssh/fleet/gpu_ed25519`` (named by
    an absolute IdentityFile). `$HOME` is a temporary directory, never the passwd home of the
    user running the tests (whose ~/.ssh is not touched)."""

    root: Path
    network: HostNetwork
    aliases: list[SshAlias] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.ssh_dir = self.home / ".ssh"
        (self.ssh_dir / "fleet").mkdir(parents=True)
        self.ssh_dir.chmod(0o700)
        for dest in (self.ssh_dir / "id_ed25519", self.fleet_key):
            shutil.copy(self.network.client_key.private_path, dest)
            dest.chmod(0o600)
            shutil.copy(self.network.client_key.public_path, dest.with_name(dest.name + ".pub"))
        self.known_hosts = self.ssh_dir / "known_hosts"
        self.config = self.ssh_dir / "config"
        self.bin = self.root / "bin"  # first on the CLI's PATH (the kubectl double)
        self.bin.mkdir()
        self.write()

    @property
    def fleet_key(self) -> Path:
        return self.ssh_dir / "fleet" / "gpu_ed25519"

    def add(self, alias: SshAlias) -> None:
        self.aliases.append(alias)
        self.write()

    def trust(self, hosts: Iterable[TestHost]) -> None:
        """Every host's key in ~/.ssh/known_hosts, as a first `ssh -o StrictHostKeyChecking=
        accept-new` would have recorded it."""
        lines = [h.host_key_line() + "\n" for h in hosts]
        self.known_hosts.write_text("".join(lines))

    def write(self) -> None:
        self.config.write_text("\n".join(a.block() for a in self.aliases))
        self.config.chmod(0o600)

    def environment(self, state_dir: Path) -> dict[str, str]:
        """What the CLI runs with: this HOME (so ~/.ssh/config is the file above, as for a user
        who typed nothing else), its own state, config and Ansible dirs, a wide terminal, no
        agent, no RUNBOOK_* setting of the test process but the template cache's directory."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RUNBOOK_", "SSH_", "ANSIBLE_", "KUBE"))}  # fmt: skip
        if "RUNBOOK_CACHE_DIR" in os.environ:
            env["RUNBOOK_CACHE_DIR"] = os.environ["RUNBOOK_CACHE_DIR"]
        env.update(
            HOME=str(self.home),
            PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
            RUNBOOK_STATE_DIR=str(state_dir),
            XDG_CONFIG_HOME=str(self.home / ".config"),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            COLUMNS="250",
            LINES="60",
            TERM="dumb",
            NO_COLOR="1",
            **ansible_dirs(state_dir.parent / f"{state_dir.name}-ansible"),
        )
        return env
