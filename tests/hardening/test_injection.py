"""No templated value can run a command: every value that reaches a command template arrives at
the remote shell as exactly one word, on a real SSH test host.

Each hostile value carries `$(touch /tmp/PWNED-…)`, backticks, `;`, `&&`, `|`, a newline,
quotes, a backslash, a glob and an option (`--help`); each names its own marker file, so a
marker that appears says which path let it through. The paths, each end to end through the CLI:

* `--var` (`runbook run --target ssh://…`), including `--var pod=` / `namespace=` in the
  `kubectl get pod` command (checked on the host by a `kubectl` shim that records its argv);
* an inventory's `runbook_vars` (`runbook sweep -i`), and hostile `ansible_user` and
  `ansible_host`, which never reach a shell at all (an SSH user name sshd refuses; an address
  refused before any lookup);
* the variables of a `--hosts-from-file` line;
* values read from evidence and used by a later stage's command: the process name of a kernel
  OOM-kill line, a pod's name and UID from `pod.json` (the UID becomes cgroup paths), the node's
  hostname;
* `kubectl://NAMESPACE/POD` targets: names that are not Kubernetes names are refused before
  kubectl runs; a valid target runs each probe as one `sh -c` argument (a local kubectl shim
  records the argv and runs it) with the same one-word values;
* a `--var` that is not UTF-8: its bytes arrive, as one word.

The runbook (runbooks/inject.yaml) prints each value with `printf '[%s]\\n'`: one `[…]` per shell
word, so "one word" is exactly `[value]`. (tests/integration/test_ssh_run.py already checks one
hostile `--var` over SSH; this covers the other paths.)
"""

from __future__ import annotations

import glob
import json
import secrets
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook.transports.kube_exec import BOOTSTRAP
from tests.hosts.harness import HostNetwork, TestHost
from tests.integration.conftest import cli_env

pytestmark = pytest.mark.ssh

RUNBOOK = Path(__file__).parent / "runbooks" / "inject.yaml"
TOKEN = secrets.token_hex(4)


def marker(where: str) -> str:
    return f"/tmp/PWNED-{TOKEN}-{where}"


def hostile(where: str, *, one_line: bool = False) -> str:
    m = marker(where)
    value = (
        f"$(touch {m}) `touch {m}`; touch {m} && touch {m} | touch {m}"
        + ("" if one_line else f"\ntouch {m}\n")
        + " '\"\\ * ~ --help"
    )
    return value


def markers_left() -> list[str]:
    """Markers anywhere they could land: /tmp (also as the systemd cgroup path spells it,
    `-` as `_`) and root's home, the cwd of a login on the test hosts."""
    found = glob.glob(f"/tmp/PWNED?{TOKEN}*") + glob.glob(f"/root/PWNED?{TOKEN}*")
    return sorted(found)


@pytest.fixture(autouse=True)
def _nothing_ran() -> Any:
    assert not markers_left()
    yield
    assert not markers_left(), "a hostile value was executed"


NODE = hostile("node", one_line=True)
COMM = f"`touch {marker('comm')}`; touch {marker('comm')} && echo '\"\\"  # no `)`: ends it
POD_NAME = hostile("podname")
POD_UID = f"7c1d3a52-$(touch {marker('uid')})"
POD_JSON = json.dumps({
    "kind": "Pod",
    "metadata": {"name": POD_NAME, "namespace": "ml", "uid": POD_UID},
    "spec": {"containers": [{"name": "trainer"}]},
    "status": {"qosClass": "Burstable", "phase": "Failed"},
})  # fmt: skip
DMESG = (
    "[Wed Mar  4 10:11:57 2026] python3 invoked oom-killer: gfp_mask=0x100cca"
    "(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0\n"
    f"[Wed Mar  4 10:11:57 2026] Out of memory: Killed process 4821 ({COMM}) total-vm:1000kB,"
    " anon-rss:900kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:100kB oom_score_adj:0\n"
)
KUBECTL = """#!/usr/bin/python3
# test shim: records its argv (one JSON list a line); `get pod` prints a recorded pod object;
# `exec … /bin/sh -c CMD` (a kubectl:// target; nsenter into PID 1 is refused here) runs CMD
import json, subprocess, sys
with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1:2] == ["exec"]:
    sys.exit(subprocess.run(["/bin/sh", "-c", sys.argv[-1]]).returncode)
print({pod!r})
"""


def dress(shim: Any, argv_log: Path) -> None:
    """`dmesg`, `hostname` and `kubectl` shims (`shim(name, text)` writes one)."""
    shim("dmesg", f"#!/bin/sh\n# test shim: a kernel log\ncat <<'EOF'\n{DMESG}EOF\n")
    name = shlex.quote(NODE)
    shim("hostname", f"#!/bin/sh\n# test shim: a hostile name\nprintf '%s\\n' {name}\n")
    shim("kubectl", KUBECTL.format(log=str(argv_log), pod=POD_JSON))


def printed(stage: dict[str, Any], name: str) -> str:
    return str(stage["facts"]["text"][name]["stdout"])


def words(*values: str) -> str:
    return "".join(f"[{v}]\n" for v in values)


def check_evidence_values(use: dict[str, Any]) -> None:
    """The values a later stage read from evidence arrived as one word each."""
    assert printed(use, "node.txt") == words(NODE)
    assert printed(use, "comm.txt") == words(COMM)
    assert printed(use, "podname.txt") == words(POD_NAME)
    paths = printed(use, "cgroups.txt").splitlines()
    assert len(paths) == 4 and all(p.startswith("[/sys/fs/cgroup/") for p in paths), paths
    assert any(POD_UID in p for p in paths)


def kubectl_calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def host(ssh_host: Any, tmp_path: Path) -> TestHost:
    made: TestHost = ssh_host("inject")
    dress(made.write_shim, tmp_path / "kubectl-argv.jsonl")
    return made


def _cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        capture_output=True, text=True, env=env or cli_env(tmp_path), timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return proc


def _ssh_args(host: TestHost, network: HostNetwork) -> list[str]:
    key = str(network.client_key.private_path)
    return ["--known-hosts", str(network.known_hosts_path), "--identity", key,
            "--connect-timeout", "5"]  # fmt: skip


def test_var_values_and_evidence_values_reach_the_shell_as_one_word(
    host: TestHost, host_network: HostNetwork, tmp_path: Path
) -> None:
    value, pod, namespace = hostile("var"), hostile("pod"), hostile("namespace")
    run = _cli(
        tmp_path, "run", str(RUNBOOK), "--target", f"ssh://root@{host.address}:{host.port}",
        *_ssh_args(host, host_network), "--format", "json", "--no-input",
        "--var", f"value={value}", "--var", f"pod={pod}", "--var", f"namespace={namespace}",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    stages = {s["id"]: s for s in json.loads(run.stdout)["stages"]}
    use = stages["use"]
    assert use["status"] == "ok" and not use.get("errors"), use
    assert printed(use, "value.txt") == words(value)
    assert printed(use, "pod.txt") == words(pod, namespace)
    check_evidence_values(use)
    # on the host, kubectl got the pod and the namespace as one argument each, after `--`
    assert kubectl_calls(tmp_path / "kubectl-argv.jsonl") == [
        ["get", "pod", "-n", namespace, "-o", "json", "--", pod]
    ]
    assert host.exec(["sh", "-c", f"ls /tmp/PWNED?{TOKEN}* 2>/dev/null"]).stdout == ""


def test_inventory_values_reach_the_shell_as_one_word_or_never_reach_it(
    host: TestHost, host_network: HostNetwork, tmp_path: Path
) -> None:
    """`runbook_vars` of an inventory are values like --var; `ansible_user` is an SSH user
    name (sshd refuses it; no shell runs); `ansible_host` is refused before any lookup."""
    value, pod = hostile("inventory-var"), hostile("inventory-pod")
    user = f"x;touch${{IFS}}PWNED-{TOKEN}-user&&`id`"  # no space, `/`, `:` or `@`: a user name
    common = {
        "ansible_user": "root",
        "ansible_ssh_private_key_file": str(host_network.client_key.private_path),
        "ansible_ssh_common_args": f"-o UserKnownHostsFile={host_network.known_hosts_path}",
    }
    inventory = {"all": {"vars": common, "hosts": {
        "vars-host": {"ansible_host": host.address,
                      "runbook_vars": {"value": value, "pod": pod, "namespace": "ml"}},
        "user-host": {"ansible_host": host.address, "ansible_user": user},
        "addr-host": {"ansible_host": f"$(touch {marker('address')})"},
    }}}  # fmt: skip
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    report = tmp_path / "report"
    sweep = _cli(tmp_path, "sweep", str(RUNBOOK), "-i", str(path), "--report", str(report),
                 "--format", "json", "--keep-bundles", "--connect-timeout", "5")  # fmt: skip
    assert sweep.returncode in (0, 1, 3), sweep.stderr
    hosts = {h["host"]: h for h in json.loads(sweep.stdout)["hosts"]}
    swept = hosts["vars-host"]
    assert swept["status"] in ("healthy", "finding"), swept
    stages = {s["id"]: s for s in swept["verdict"]["stages"]}
    assert printed(stages["use"], "value.txt") == words(value)
    assert printed(stages["use"], "pod.txt") == words(pod, "ml")
    check_evidence_values(stages["use"])
    bundle = report / "hosts" / "vars-host" / "bundle"
    assert (bundle / "value.txt").read_text() == words(value)

    assert hosts["user-host"]["status"] == "refused", hosts["user-host"]
    log = host.sshd_log_tail(200)
    assert f"Invalid user {user} from" in log, log  # the whole value, as one user name
    assert hosts["addr-host"]["status"] == "error", hosts["addr-host"]
    assert "ansible_host '$(touch" in hosts["addr-host"]["error"]
    assert "is not a host name" in hosts["addr-host"]["error"]
    assert [c[:3] for c in kubectl_calls(tmp_path / "kubectl-argv.jsonl")] == [["get", "pod", "-n"]]


def test_hosts_file_variables_reach_the_shell_as_one_word(
    host: TestHost, host_network: HostNetwork, tmp_path: Path
) -> None:
    value, pod = hostile("hosts-file", one_line=True), hostile("hosts-pod", one_line=True)
    hosts_file = tmp_path / "job.hosts"
    hosts_file.write_text(
        "# a job's node, its variables shell-quoted as the format allows\n"
        f"ssh://root@{host.address}:{host.port} node=n1 value={shlex.quote(value)} "
        f"pod={shlex.quote(pod)} namespace=ml\n"
    )
    run_dir = tmp_path / "job"
    run = _cli(tmp_path, "run", str(RUNBOOK), "--hosts-from-file", str(hosts_file),
               *_ssh_args(host, host_network), "--run-dir", str(run_dir), "--no-input",
               "--format", "json")  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    (value_file,) = run_dir.glob("nodes/*/bundle/value.txt")
    assert value_file.read_text() == words(value)
    assert (value_file.parent / "pod.txt").read_text() == words(pod, "ml")
    assert (value_file.parent / "comm.txt").read_text() == words(COMM)
    assert kubectl_calls(tmp_path / "kubectl-argv.jsonl") == [
        ["get", "pod", "-n", "ml", "-o", "json", "--", pod]
    ]


@pytest.mark.parametrize(
    "target",
    [f"kubectl://ml/$(touch {marker('target')})", "kubectl://ml/--kubeconfig=/tmp/x",
     "kubectl://--server=http:x/agent", "kubectl://ml/a;b", "kubectl://ml/`id`", "kubectl://ML/a"],
)  # fmt: skip
def test_a_kubectl_target_that_is_not_a_kubernetes_name_is_refused_before_kubectl_runs(
    target: str, tmp_path: Path
) -> None:
    shims = tmp_path / "bin"
    shims.mkdir()
    log = tmp_path / "kubectl-argv.jsonl"
    kubectl = shims / "kubectl"
    kubectl.write_text(KUBECTL.format(log=str(log), pod=POD_JSON))
    kubectl.chmod(0o755)
    run = _cli(tmp_path, "run", str(RUNBOOK), "--target", target, "--kubectl", str(kubectl),
               "--no-input")  # fmt: skip
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("runbook: "), run.stderr
    assert "Kubernetes" in lines[0] or "NAMESPACE/POD" in lines[0], run.stderr
    assert not log.exists()


def test_a_kubectl_target_runs_each_probe_as_one_argument_with_one_word_values(
    tmp_path: Path,
) -> None:
    """Through `kubectl exec -n NS POD -- nsenter … -- /bin/sh -c CMD`: the local shim records
    the argv and runs CMD (with the same shims first on PATH), as the agent pod's shell would."""
    shims = tmp_path / "bin"
    shims.mkdir()
    log = tmp_path / "kubectl-argv.jsonl"

    def shim(name: str, text: str) -> None:
        (shims / name).write_text(text)
        (shims / name).chmod(0o755)

    dress(shim, log)
    env = {**cli_env(tmp_path), "PATH": f"{shims}:{cli_env(tmp_path)['PATH']}"}
    value, pod = hostile("kubectl-var"), hostile("kubectl-pod")
    run = _cli(tmp_path, "run", str(RUNBOOK), "--target", "kubectl://kube-system/agent-1",
               "--format", "json", "--no-input", "--var", f"value={value}",
               "--var", f"pod={pod}", env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    use = {s["id"]: s for s in json.loads(run.stdout)["stages"]}["use"]
    assert printed(use, "value.txt") == words(value)
    assert printed(use, "pod.txt") == words(pod, "ml")
    check_evidence_values(use)
    calls = kubectl_calls(log)
    execs = [c for c in calls if c[0] == "exec"]
    # the probes come on the exec's input (transports/kube_exec.py): its argv is the bootstrap
    assert execs and all(
        c[:6] == ["exec", "-i", "-n", "kube-system", "agent-1", "--"] and c[6] == "nsenter"
        and c[-3:-1] == ["/bin/sh", "-c"] and c[-1] == BOOTSTRAP
        for c in execs
    ), execs  # fmt: skip
    assert ["get", "pod", "-n", "ml", "-o", "json", "--", pod] in calls


def test_a_value_that_is_not_utf8_arrives_as_its_bytes_in_one_word(
    host: TestHost, host_network: HostNetwork, tmp_path: Path
) -> None:
    """`--var` bytes that are not UTF-8 (Python keeps them as lone surrogates) reach the remote
    shell as those bytes, one word, as OpenSSH would send them."""
    raw = b"a\xff$(touch " + marker("bytes").encode() + b")\xfe b"
    proc = subprocess.run(
        [sys.executable.encode(), b"-m", b"runbook", b"run", str(RUNBOOK).encode(), b"--target",
         f"ssh://root@{host.address}:{host.port}".encode(),
         *(a.encode() for a in _ssh_args(host, host_network)), b"--no-input",
         b"--run-dir", str(tmp_path / "run").encode(), b"--var", b"value=" + raw],
        capture_output=True, env=cli_env(tmp_path), timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    # the bundle keeps text (invalid bytes replaced); the rc says the probe ran and succeeded
    bundle = tmp_path / "run" / "bundle"
    assert (bundle / "value.txt.rc").read_text().strip() == "0"
    as_decoded = raw.decode("utf-8", "replace").encode()
    assert (bundle / "value.txt").read_bytes() == b"[" + as_decoded + b"]\n"
