#!/usr/bin/python
"""Ansible module of the evidence_collect role: run a runbook's probes on the node and write
the evidence bundle (nccl-runbook's DESIGN §4, format 1) into a directory, plus a .tar.gz of it.

Pure standard library (it runs on the node, where nccl-runbook is not installed). It writes
what `runbook collect` writes for the same probes: each file, its `.rc` (exit status, or
`timeout`) and a non-empty `.err`; a multi-file probe (a name with `*`, output in `tail -v`
format) split into its files; `bundle.yaml` last, so a half-written bundle never looks whole.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: evidence_bundle
short_description: Run a runbook's probes and write an nccl-runbook evidence bundle.
description:
  - Runs each probe (a shell command) on the node with its own timeout, a few at a time, each
    in its own process group (a timed-out command's children are stopped too), and writes the
    outputs as an evidence bundle directory plus a C(.tar.gz) of it.
  - Read-only on the node apart from its output directory. Reports no change.
options:
  probes:
    description: The probes, as C(runbook collect-plan) renders them.
    type: list
    elements: dict
    required: true
  parent:
    description:
      - Directory on the node in which a private work directory is made for C(bundle/) and
        C(bundle.tar.gz) (default, the system's temporary directory). The caller removes the
        work directory (RV(workdir)) once it has fetched the archive; on a failure the module
        removes it itself.
    type: path
  meta:
    description: Extra C(bundle.yaml) fields (pod, namespace, cgroup_dir).
    type: dict
    default: {}
  node:
    description: The node's name when C(hostname) cannot tell it.
    type: str
    default: ""
  parallel:
    description: Probes run at once.
    type: int
    default: 8
author: nccl-runbook maintainers
"""

RETURN = r"""
workdir:
  description: The private work directory on the node (remove it after the fetch).
  type: str
  returned: success
bundle:
  description: The bundle directory on the node.
  type: str
  returned: success
archive:
  description: The bundle as a .tar.gz on the node.
  type: str
  returned: success
node:
  description: The node's name, as recorded in bundle.yaml.
  type: str
  returned: success
failed_probes:
  description: Probes that produced no evidence, with why (timed out, command not found).
  type: dict
  returned: success
"""

import datetime
import json
import os
import re
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
HEADER = re.compile(r"^==> (.+) <==$")


def _kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)


def run_probe(probe):
    name, command = str(probe["name"]), str(probe["command"])
    timeout = float(probe.get("timeout") or 30.0)
    start = time.monotonic()
    result = {"name": name, "stdout": "", "stderr": "", "exited": None, "timed_out": False,
              "error": None, "truncated": False}
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True,
        )
    except OSError as exc:
        result["error"] = "could not start: %s" % exc
        result["duration"] = time.monotonic() - start
        return result
    try:
        out, err = proc.communicate(timeout=timeout)
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


def split_multi(result):
    """A multi-file probe's `tail -v` output as one (name, text) per file, named
    DIR/BASENAME after the probe's directory (`app/*.log` + `==> /x/rank-3.log <==`)."""
    directory = dirname(result["name"])
    files = []
    for line in result["stdout"].splitlines(True):
        match = HEADER.match(line.rstrip("\n"))
        if match:
            base = basename(match.group(1).strip()) or "unnamed"
            files.append((join(directory, base) if directory else base, []))
        elif files:
            files[-1][1].append(line)
        elif line.strip():
            files.append((result["name"].replace("*", "output"), [line]))
    out = []
    for name, lines in files:
        text = "".join(lines)
        if text.endswith("\n\n"):
            text = text[:-1]
        if safe_name(name):
            out.append((name, text))
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
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg="check mode: nothing collected")
    probes, seen = [], set()
    for probe in module.params["probes"]:
        if "name" not in probe or "command" not in probe:
            module.fail_json(msg="each probe needs a name and a command: %r" % (probe,))
        if not safe_name(str(probe["name"]).replace("*", "x")):
            module.fail_json(msg="unsafe probe name %r" % (probe["name"],))
        if probe["name"] not in seen:
            seen.add(probe["name"])
            probes.append(probe)
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

    def run(probe):
        result = run_probe(probe)
        with lock:
            results[result["name"]] = result

    with ThreadPoolExecutor(max_workers=max(1, module.params["parallel"])) as pool:
        list(pool.map(run, probes))
    failed = {}
    for probe in probes:
        result = results[probe["name"]]
        why = failure(result)
        if "*" in result["name"]:
            pieces = split_multi(result)
            for name, text in pieces:
                write_file(root, name, text, "", 0, False, None)
            if not pieces:
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
    module.exit_json(changed=False, workdir=workdir, bundle=root, archive=archive, node=node,
                     failed_probes=failed, files=len(os.listdir(root)))


if __name__ == "__main__":
    main()
