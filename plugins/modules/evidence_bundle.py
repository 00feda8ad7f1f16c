#!/usr/bin/python
# Copyright: nccl-runbook maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""nccl_runbook.fleet.evidence_bundle: run a runbook's probes on the node and write the evidence
bundle (nccl-runbook's DESIGN §4, format 1) into a directory, plus a .tar.gz of it.

Pure standard library (it runs on the node, where nccl-runbook is not installed). It writes
what `runbook collect` writes for the same probes: each file, its `.rc` (exit status, or
`timeout`) and a non-empty `.err`; a multi-file probe (a name with `*`, its files framed by a
token made for the run and given as the first line of the probe's input, never in a command
line) split into its files, a file it did not read (a link, a FIFO) kept as its `.err` alone;
`bundle.yaml` last, so a half-written bundle never looks whole.
One module run per host: a task per probe would cost Ansible's ~0.2 s per task and host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: evidence_bundle
short_description: Run a runbook's read-only probes and write an nccl-runbook evidence bundle
description:
  - Runs each probe (a shell command, as C(runbook collect-plan) renders it) on the node with
    its own timeout, a few at a time, each in its own process group (a timed-out command's
    children are stopped too), and writes the outputs as an evidence bundle directory (format
    1, what C(runbook collect) writes) plus a C(.tar.gz) of it, in a private work directory.
  - Read-only on the node apart from that work directory, which the caller removes after
    fetching the archive (the module removes it itself when collecting fails). Reports no
    change.
  - In check mode the probes are validated and listed (RV(probes)), and nothing runs on the
    node.
version_added: 0.1.0
author: nccl-runbook maintainers
requirements:
  - Python 3.7 or later on the node.
options:
  probes:
    description:
      - The probes, as C(runbook collect-plan) renders them (already shell-quoted; pass them
        as C(!unsafe) so Ansible does not template them again).
      - Each is a mapping with C(name) (the bundle file, relative; a C(*) marks a multi-file
        probe, which reads a frame token made for the run from the first line of its input and
        frames each file with it, as C(runbook collect-plan) renders it), C(command) (run with
        C(/bin/sh -c)) and an optional C(timeout) in seconds (default 30).
      - A probe named like an earlier one is run once.
    type: list
    elements: dict
    required: true
  parent:
    description:
      - Directory on the node in which a private work directory is made for C(bundle/) and
        C(bundle.tar.gz) (default, the system's temporary directory).
    type: path
  meta:
    description: Extra C(bundle.yaml) fields (pod, namespace, cgroup_dir).
    type: dict
    default: {}
  node:
    description: The node's name when the C(hostname.txt) probe cannot tell it.
    type: str
    default: ""
  parallel:
    description: Probes run at once.
    type: int
    default: 8
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Validates and lists the probes; runs none.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - The P(nccl_runbook.fleet.evidence_collect#role) role runs this module, fetches the archive
    and removes the work directory; C(runbook analyze-dir) then analyses the fetched bundles.
"""

EXAMPLES = r"""
- name: Write the evidence bundle of the probes in plan.yml (runbook collect-plan -o plan.yml).
  nccl_runbook.fleet.evidence_bundle:
    probes: "{{ evidence_collect_probes }}"
    meta:
      pod: trainer-0
      namespace: ml
    node: "{{ inventory_hostname }}"
  register: bundle

- name: Fetch the archive to the controller.
  ansible.builtin.fetch:
    src: "{{ bundle.archive }}"
    dest: "bundles/{{ inventory_hostname }}.tar.gz"
    flat: true

- name: Remove the work directory from the node.
  ansible.builtin.file:
    path: "{{ bundle.workdir }}"
    state: absent

- name: Check a plan without running it (check mode runs no probe).
  nccl_runbook.fleet.evidence_bundle:
    probes:
      - name: hostname.txt
        command: hostname
      - name: dmesg.txt
        command: dmesg -T
        timeout: 60
  check_mode: true
  register: plan
"""

RETURN = r"""
workdir:
  description: The private work directory on the node (remove it after the fetch).
  type: str
  returned: success, not in check mode
  sample: /tmp/runbook-evidence-k3j2x9a1
bundle:
  description: The bundle directory on the node.
  type: str
  returned: success, not in check mode
  sample: /tmp/runbook-evidence-k3j2x9a1/bundle
archive:
  description: The bundle as a .tar.gz on the node.
  type: str
  returned: success, not in check mode
  sample: /tmp/runbook-evidence-k3j2x9a1/bundle.tar.gz
archive_size:
  description: Size of RV(archive) in bytes.
  type: int
  returned: success, not in check mode
  sample: 48213
bundle_size:
  description: Bytes of every file in RV(bundle), added up.
  type: int
  returned: success, not in check mode
  sample: 391270
files:
  description: How many files RV(bundle) holds (outputs, C(.rc), C(.err), C(bundle.yaml)).
  type: int
  returned: success, not in check mode
  sample: 61
node:
  description: The node's name, as recorded in bundle.yaml.
  type: str
  returned: success, not in check mode
  sample: gpu-node-07
failed_probes:
  description: Probes that produced no evidence, with why (timed out, command not found).
  type: dict
  returned: success, not in check mode
  sample: {"nvidia-smi-q.txt": "command not found"}
probes:
  description: The names of the probes run (in check mode, that would be run), duplicates dropped.
  type: list
  elements: str
  returned: success
  sample: ["hostname.txt", "dmesg.txt", "app/*.log"]
"""

import binascii
import datetime
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from posixpath import basename, dirname, join

from ansible.module_utils.basic import AnsibleModule

MAX_CAPTURE_BYTES = 16 * 1024 * 1024
KILL_GRACE_S = 0.5
#: a multi-file probe's frame lines start with this, the run's token after it (nccl-runbook's
#: runbook/transports/framing.py, whose reasons below these are)
FRAME = "__RBK_FILE_"
SKIPPED = {
    "link": "a symbolic link (not followed)",
    "fifo": "a FIFO (not opened)",
    "socket": "a socket (not opened)",
    "device": "a device (not opened)",
    "directory": "a directory",
    "other": "not a regular file",
    "name": "its name holds a control character",
    "unreadable": "not readable",
}


def _kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)


def run_probe(probe, token):
    """One probe; a multi-file one is given `token` as the one line of its input."""
    name, command = str(probe["name"]), str(probe["command"])
    timeout = float(probe.get("timeout") or 30.0)
    start = time.monotonic()
    result = {"name": name, "stdout": "", "stderr": "", "exited": None, "timed_out": False,
              "error": None, "truncated": False}
    framed = "*" in name
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE if framed else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
    except OSError as exc:
        result["error"] = "could not start: %s" % exc
        result["duration"] = time.monotonic() - start
        return result
    try:
        out, err = proc.communicate(
            input=(token + "\n").encode("ascii") if framed else None, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        result["timed_out"] = True
    result["duration"] = time.monotonic() - start
    result["truncated"] = len(out) > MAX_CAPTURE_BYTES or len(err) > MAX_CAPTURE_BYTES
    result["stdout"] = out[:MAX_CAPTURE_BYTES].decode("utf-8", "replace")
    result["stderr"] = err[:MAX_CAPTURE_BYTES].decode("utf-8", "replace")
    if not result["timed_out"]:
        result["exited"] = proc.returncode
    return result


def failure(result):
    """Why a result is not evidence (as nccl-runbook's CommandResult.failure says it)."""
    if result["timed_out"]:
        return "timed out after %.1fs" % result["duration"]
    if result["error"]:
        return result["error"]
    if result["exited"] == 127:
        return "command not found"
    if result["exited"] == 126 or (
        result["exited"] not in (0, None) and "Permission denied" in result["stderr"]
    ):
        return "permission denied"
    return None


def safe_name(name):
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and ".." not in parts and "\\" not in name \
        and "\0" not in name


def _frames(stdout, token):
    """The frames of a multi-file probe's output, cut only on lines carrying `token`: a list
    of (kind, name, text, status or reason)."""
    needle = "\n" + FRAME + token + " "
    text = "\n" + stdout
    segments = []
    at = text.find(needle)
    while at >= 0:
        line_end = text.find("\n", at + len(needle))
        if line_end < 0:
            break
        following = text.find(needle, line_end)
        segments.append((text[at + len(needle):line_end],
                         text[line_end + 1:following if following >= 0 else len(text)]))
        at = following
    records, index = [], 0
    while index < len(segments):
        head, body = segments[index]
        index += 1
        kind, _, rest = head.partition(" ")
        if kind == "file" and rest:
            status = _end_status(segments[index][0]) if index < len(segments) else None
            records.append(("file", rest, body, status))
            if status is not None:
                index += 1
        elif kind == "skip" and " " in rest:
            reason, _, name = rest.partition(" ")
            records.append(("skip", name, "", reason))
    return records


def _end_status(head):
    kind, _, status = head.partition(" ")
    if kind != "end" or not status.lstrip("-").isdigit() or len(status) > 6:
        return None
    return int(status)


def split_multi(result, token):
    """A multi-file probe's framed output as one (name, text, status, skipped) per file, named
    DIR/NAME after the probe's directory (`app/*.log` + the frame of `rank-3.log`): a file
    read has its text and status (None: its end never came), one not read its reason."""
    directory, pattern = dirname(result["name"]), basename(result["name"])
    out, seen = [], set()
    for kind, base, text, detail in _frames(result["stdout"], token):
        name = join(directory, base) if directory else base
        if (not safe_name(name) or "/" in base or not fnmatch.fnmatchcase(base, pattern)
                or base.endswith((".rc", ".err")) or name in seen):
            continue
        seen.add(name)
        if kind == "skip":
            out.append((name, "", None, SKIPPED.get(detail, SKIPPED["other"])))
        else:
            out.append((name, text, detail, None))
    return out


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix="." + os.path.basename(path) + ".")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def write_file(root, name, stdout, stderr, exited, timed_out, why):
    path = os.path.join(root, *name.split("/"))
    _write(path, stdout.encode("utf-8", "replace"))
    rc = "timeout" if timed_out else ("" if exited is None else str(exited))
    _write(path + ".rc", (rc + "\n").encode())
    err = stderr
    if why and why not in err:
        err = err + ("\n" if err and not err.endswith("\n") else "") + "runbook: %s\n" % why
    if err:
        _write(path + ".err", err.encode("utf-8", "replace"))


def yaml_line(key, value):
    # JSON scalars are YAML scalars
    return "%s: %s\n" % (key, json.dumps(value))


def main():
    module = AnsibleModule(
        argument_spec={
            "probes": {"type": "list", "elements": "dict", "required": True},
            "parent": {"type": "path", "default": None},
            "meta": {"type": "dict", "default": {}},
            "node": {"type": "str", "default": ""},
            "parallel": {"type": "int", "default": 8},
        },
        supports_check_mode=True,
    )
    probes, seen = [], set()
    for probe in module.params["probes"]:
        if "name" not in probe or "command" not in probe:
            module.fail_json(msg="each probe needs a name and a command: %r" % (probe,))
        if not safe_name(str(probe["name"]).replace("*", "x")):
            module.fail_json(msg="unsafe probe name %r" % (probe["name"],))
        try:
            float(probe.get("timeout") or 30.0)
        except (TypeError, ValueError):
            module.fail_json(msg="probe %r: timeout %r is not a number of seconds"
                             % (probe["name"], probe["timeout"]))
        if probe["name"] not in seen:
            seen.add(probe["name"])
            probes.append(probe)
    names = [str(probe["name"]) for probe in probes]
    if module.check_mode:
        # the plan is checked above; running a probe is never a check
        module.exit_json(changed=False, probes=names,
                         msg="check mode: %d probe(s) would run, none ran" % len(names))
    try:
        workdir = tempfile.mkdtemp(prefix="runbook-evidence-", dir=module.params["parent"])
    except OSError as exc:
        module.fail_json(msg="cannot make a work directory: %s" % exc)
    try:
        collect(module, probes, workdir)
    except Exception as exc:  # leave nothing behind on the node
        shutil.rmtree(workdir, ignore_errors=True)
        module.fail_json(msg="collection failed: %s: %s" % (type(exc).__name__, exc))


def collect(module, probes, workdir):
    root = os.path.join(workdir, "bundle")
    os.makedirs(root)
    lock = threading.Lock()
    results = {}
    token = binascii.hexlify(os.urandom(16)).decode("ascii")  # this run's frame token

    def run(probe):
        result = run_probe(probe, token)
        with lock:
            results[result["name"]] = result

    with ThreadPoolExecutor(max_workers=max(1, module.params["parallel"])) as pool:
        list(pool.map(run, probes))
    failed = {}
    for probe in probes:
        result = results[probe["name"]]
        why = failure(result)
        if "*" in result["name"]:
            pieces = split_multi(result, token)
            for name, text, status, skipped in pieces:
                if skipped:  # not read: why, as the file's .err alone
                    _write(os.path.join(root, *(name + ".err").split("/")),
                           ("runbook: not read: %s\n" % skipped).encode("utf-8"))
                elif status is not None:
                    write_file(root, name, text, "", status, False, None)
                else:  # its end never came: cut where the probe was
                    write_file(root, name, text, "", 0 if result["truncated"] else
                               result["exited"], result["timed_out"], why)
            if not any(skipped is None for _, _, _, skipped in pieces):
                failed[result["name"]] = why or "no file matched"
            continue
        write_file(root, result["name"], result["stdout"], result["stderr"], result["exited"],
                   result["timed_out"], why)
        if why:
            failed[result["name"]] = why
    hostname = results.get("hostname.txt")
    node = module.params["node"] or "unknown"
    if hostname and failure(hostname) is None and hostname["exited"] == 0:
        lines = hostname["stdout"].strip().splitlines()
        node = lines[0][:253] if lines else node
    meta = dict(module.params["meta"] or {})
    text = yaml_line("format", 1) + yaml_line("node", node)
    text += yaml_line("collected_at", datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"))
    for key in ("pod", "namespace"):
        if meta.get(key) not in (None, ""):
            text += yaml_line(key, str(meta.pop(key)))
        meta.pop(key, None)
    zone = results.get("timezone.txt")
    if zone and failure(zone) is None and zone["exited"] == 0 and zone["stdout"].strip():
        meta["utc_offset"] = zone["stdout"].strip()
    for key, value in meta.items():
        if value not in (None, ""):
            text += yaml_line(str(key), value)
    _write(os.path.join(root, "bundle.yaml"), text.encode("utf-8"))
    archive = os.path.join(workdir, "bundle.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="bundle")
    sizes = [os.path.getsize(os.path.join(top, name))
             for top, _dirs, names in os.walk(root) for name in names]
    module.exit_json(changed=False, workdir=workdir, bundle=root, archive=archive, node=node,
                     failed_probes=failed, files=len(sizes), bundle_size=sum(sizes),
                     archive_size=os.path.getsize(archive),
                     probes=[str(probe["name"]) for probe in probes])


if __name__ == "__main__":
    main()
