"""Sanitized evidence: a bundle, a verdict or a report with every identifier replaced by a
stable placeholder, as in a publishable incident record.

    gpu-node-07 → <NODE_1>    trainer-0 → <POD_1>    ml-train → <NAMESPACE_1>
    3f9c2d1e-8b7a-… (and its systemd form 3f9c2d1e_8b7a_…) → <POD_UID_1>
    GPU-01e2d3c4-… → <GPU_UUID_1>    00000000:18:00.0, 0000:18:00.0, 18:00.0 → <BUS_ID_1>
    10.20.3.17 → <IP_1>    9a8b7c6d…(64 hex) → <CONTAINER_ID_1>    registry/…:tag → <IMAGE_1>

Identifiers are learned from the bundle itself (`Sanitizer.observe`: bundle.yaml, pod.json,
node.json, hostname.txt, nvidia-smi, the hosts of NCCL lines and journal lines) and found by
shape (IPv4/IPv6, UUIDs, GPU/MIG UUIDs, PCI bus IDs, MAC addresses, 64-hex container IDs,
e-mail addresses, /home/USER). One `Sanitizer` serves a whole bundle and its verdict: the same
original always gets the same placeholder, numbered in the order first seen, and the variants of
one identifier (a UUID with `-` or `_` or none, in either case, a bus ID with an 8- or 4-digit
domain or none, a name in any case and with `_` for `-` or the other way round, a name glued to
a word by `_` as in `gpu-node-07_rank0`) share one. Credentials are redacted first
(runbook.redact).

A name too short or too common to replace everywhere (namespace `ml`, `dev`: `/dev/shm` must
survive) is replaced only where it is named as such: `namespace: dev`, `"namespace": "dev"`,
`dev/ddp-0`. Placeholders keep the evidence parseable, so a sanitized bundle analyses to the
same verdict (tests/hardening/test_sanitize.py holds it to that). In file names the placeholder
loses its angle brackets (`nccl/nccl.NODE_1.48201.log`).

Pure: no I/O. The mapping (placeholder → originals) is kept apart from what is sanitized;
`mapping()` returns it for a caller that was asked to write it somewhere else.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from runbook.redact import redact

#: a placeholder as this module writes it (never learned, never replaced again)
PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")

#: namespaces that identify nothing (every cluster has them): kept
WELL_KNOWN = {"default", "kube-system", "kube-public", "kube-node-lease"}
#: words that are also path components or vocabulary of the evidence: never replaced
#: everywhere, only where a field names them
COMMON = {
    "app", "cuda", "data", "dev", "gpu", "home", "host", "job", "local", "localhost", "main",
    "master", "ml", "nccl", "node", "none", "null", "nvidia", "pod", "proc", "prod", "root",
    "run", "shm", "sys", "test", "tmp", "train", "trainer", "true", "false", "unknown", "user",
    "var", "worker", "workspace",
}  # fmt: skip

_LITERAL_KINDS = ("NODE", "POD", "NAMESPACE", "JOB", "IMAGE", "ACCOUNT", "SERIAL", "PROVIDER_ID")

_HEX = "[0-9a-fA-F]"
_UUID_PLAIN = rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
_IPV6 = (
    rf"(?:{_HEX}{{1,4}}:){{7}}{_HEX}{{1,4}}"
    rf"|(?:{_HEX}{{1,4}}:){{0,6}}{_HEX}{{0,4}}::(?:{_HEX}{{1,4}}:){{0,6}}{_HEX}{{0,4}}"
)
#: by shape, in priority order (at one position the first alternative that matches wins)
_SHAPES = (
    rf"(?P<mig>(?<![>0-9A-Za-z])MIG-(?:GPU-{_UUID_PLAIN}/\d+/\d+|{_UUID_PLAIN}))",
    rf"(?P<gpu>(?<![>0-9A-Za-z])GPU-{_UUID_PLAIN})(?!<[A-Z])(?![>0-9A-Za-z])",
    rf"(?P<uuid>(?:(?<![>0-9A-Za-z])|(?<=pod))"
    rf"{_HEX}{{8}}(?P<sep>[-_]){_HEX}{{4}}(?P=sep){_HEX}{{4}}(?P=sep){_HEX}{{4}}(?P=sep){_HEX}{{12}})"
    r"(?!<[A-Z])(?![>0-9A-Za-z])",
    rf"(?P<hex64>(?<![>0-9A-Za-z])(?:sha256:)?{_HEX}{{64}})(?!<[A-Z])(?![>0-9A-Za-z])",
    rf"(?P<ipoib>(?<![>0-9A-Za-z:])(?:{_HEX}{{2}}:){{19}}{_HEX}{{2}})(?!<[A-Z])(?![>0-9A-Za-z:])",
    rf"(?P<mac>(?<![>0-9A-Za-z:-])(?:{_HEX}{{2}}:){{5}}{_HEX}{{2}}"
    rf"|(?<![>0-9A-Za-z:-])(?:{_HEX}{{2}}-){{5}}{_HEX}{{2}})(?!<[A-Z])(?![>0-9A-Za-z:-])",
    rf"(?P<bus>(?<![>0-9A-Za-z:.])(?:{_HEX}{{8}}|{_HEX}{{4}}):{_HEX}{{2}}:{_HEX}{{2}}\.[0-7]"
    rf"|(?:(?<=PCI:)|(?<=Xid \())"
    rf"{_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}(?!<[A-Z])(?![>0-9A-Za-z:.]))(?!<[A-Z])(?![>0-9A-Za-z])",
    r"(?P<ipv4>(?<![>0-9A-Za-z.])(?:\d{1,3}\.){3}\d{1,3})(?!<[A-Z])(?![>0-9A-Za-z]|\.\d)",
    rf"(?P<ipv6>(?<![>0-9A-Za-z:.])(?:{_IPV6}))(?!<[A-Z])(?![>0-9A-Za-z:])",
    r"(?P<email>(?<![>A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
    r"\.[A-Za-z]{2,})(?!<[A-Z])(?![>A-Za-z0-9-])",
    r"(?<=/home/)(?P<home>[A-Za-z0-9._-]+)|(?<=/Users/)(?P<users>[A-Za-z0-9._-]+)",
)
_KIND_OF_GROUP = {
    "mig": "MIG_UUID", "gpu": "GPU_UUID", "hex64": "CONTAINER_ID", "ipoib": "MAC", "mac": "MAC",
    "bus": "BUS_ID", "ipv4": "IP", "ipv6": "IP", "email": "EMAIL", "home": "USER",
    "users": "USER",
}  # fmt: skip

#: a token cut short by `...` (clip(), Jinja's truncate) or `…`
_CUT = re.compile(r"(?<![A-Za-z0-9_.:/@-])[A-Za-z0-9_.:/@-]{6,}?(?=\.\.\.|…)")
#: a field that names a node, pod, namespace or job: its value is replaced however short
_KEYED = (
    r"(?P<pre>(?<![A-Za-z0-9_])[\"']?(?:namespace|ns|pod|pod_?name|podName|node|node_?name|"
    r"nodeName|hostname|job|job[_-]name|serviceAccountName|serviceAccount)[\"']?"
    r"[ \t]*[:=][ \t]*[\"']?|(?<![A-Za-z0-9_-])(?:-n|--namespace)(?:=|[ \t]+))"
)

_KEYED_KEYS = {
    "namespace", "ns", "pod", "pod_name", "podname", "node", "node_name", "nodename",
    "hostname", "job", "job-name", "job_name", "serviceaccountname", "serviceaccount",
}  # fmt: skip

_JOB_LABELS = (
    "job-name", "batch.kubernetes.io/job-name", "training.kubeflow.org/job-name",
    "training.kubeflow.org/job_name", "job_name", "volcano.sh/job-name",
    "jobset.sigs.k8s.io/jobset-name", "leaderworkerset.sigs.k8s.io/name",
)  # fmt: skip
_NCCL_HOST = re.compile(r"^([^\s:<>]+):\d+:\d+ \[", re.MULTILINE)
#: the host field of a journalctl line (short, short-precise, short-iso, short-full)
_SYSLOG_HOST = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|\d{4}-\d\d-\d\dT[\d:.]+(?:[+-]\d{2}:?\d{2}|Z)?"
    r"|[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \w+)"
    r" ([^\s\[\]]+) [^\s\[]+(?:\[\d+\])?:",
    re.MULTILINE,
)
_BUS_ANY = re.compile(
    rf"(?<![0-9A-Za-z:.])(?:{_HEX}{{8}}|{_HEX}{{4}}):{_HEX}{{2}}:{_HEX}{{2}}\.[0-7](?![0-9A-Za-z])"
    rf"|(?:(?<=PCI:)|(?<=Xid \()){_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}(?![0-9A-Za-z:.])"
)
_HEX64 = re.compile(rf"(?<![0-9A-Za-z:]){_HEX}{{64}}(?![0-9A-Za-z])")
_UUID_ANY = re.compile(
    rf"(?<![0-9A-Za-z]){_HEX}{{8}}([-_]){_HEX}{{4}}\1{_HEX}{{4}}\1{_HEX}{{4}}\1{_HEX}{{12}}"
    r"(?![0-9A-Za-z])"
)
_SERIAL = re.compile(r"^\s*Serial Number\s*:\s*(\S+)\s*$", re.MULTILINE)
_LSPCI_SLOT = re.compile(rf"^(?:{_HEX}{{4}}:)?({_HEX}{{2}}:{_HEX}{{2}}\.[0-7]) ", re.MULTILINE)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _distinctive(value: str) -> bool:
    """Safe to replace wherever it occurs as a whole token: not a common word, and long enough
    or with a digit or separator in it."""
    low = value.lower()
    if low in COMMON:
        return False
    return len(value) >= 4 or any(c.isdigit() or c in "-._" for c in value)


def _bus_key(text: str) -> str:
    """`00000000:1B:00.0`, `0000:1b:00.0`, `1b:00.0` and Xid's `0000:1b:00` are one device."""
    parts = text.lower().split(":")
    if len(parts) == 2:  # bus:dev.fn, domain 0
        parts = ["0", *parts]
    domain, bus, rest = parts[-3], parts[-2], parts[-1]
    dev, _, fn = rest.partition(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn or '0', 16)}"


class Sanitizer:
    """Learns identifiers (`observe`), then replaces them (`text`, `data`, `path`)."""

    def __init__(self) -> None:
        self._placeholders: dict[str, str] = {}  # normalised key -> placeholder
        self._originals: dict[str, list[str]] = {}  # placeholder -> originals, as seen
        self._counts: dict[str, int] = {}
        self._literals: dict[str, str] = {}  # lower-case literal -> placeholder (everywhere)
        self._keyed: dict[str, str] = {}  # lower-case literal -> placeholder (keyed only)
        self._pod_uids: set[str] = set()
        self._short_bus: set[str] = set()  # bus IDs in every spelling seen or implied
        self._bus_forms: set[str] = set()
        self._hex64: set[str] = set()  # container IDs, to know them cut short
        self._uuids: set[str] = set()  # UUIDs seen (dashed, lower case): known undashed too
        self._pattern: re.Pattern[str] | None = None
        self._keyed_pattern: re.Pattern[str] | None = None

    # -- learning ---------------------------------------------------------------------------

    def _assign(self, kind: str, key: str, original: str) -> str:
        placeholder = self._placeholders.get(key)
        if placeholder is None:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            placeholder = f"<{kind}_{self._counts[kind]}>"
            self._placeholders[key] = placeholder
        seen = self._originals.setdefault(placeholder, [])
        if original not in seen:
            seen.append(original)
        return placeholder

    def learn(self, kind: str, value: Any) -> None:
        """Learn one identifier of `kind` (NODE, POD, NAMESPACE, JOB, IMAGE, ...)."""
        if not isinstance(value, str):
            return
        value = value.strip()
        if not value or PLACEHOLDER.search(value) or value.lower() in WELL_KNOWN:
            return
        if len(value) > 253 or any(c.isspace() for c in value):
            return
        low = value.lower()
        if low in self._literals or low in self._keyed:
            return
        placeholder = self._assign(kind, f"lit:{low}", value)
        (self._literals if _distinctive(value) else self._keyed)[low] = placeholder
        self._pattern = None
        for variant in (value.replace("-", "_"), value.replace("_", "-")):
            if variant != value:  # the same name as a shell variable or a file name has it
                self.learn_alias(variant, placeholder)
        if kind == "NODE" and "." in value and not value.replace(".", "").isdigit():
            # an FQDN's short name is the same node
            self.learn_alias(value.split(".", 1)[0], placeholder)
        if kind == "IMAGE":
            repo = re.split(r"@|:(?=[^/]*$)", value, maxsplit=1)[0]
            if repo != value:
                self.learn_alias(repo, placeholder)

    def learn_alias(self, value: str, placeholder: str) -> None:
        low = value.lower()
        if not value or low in self._literals or low in self._keyed or low in WELL_KNOWN:
            return
        (self._literals if _distinctive(value) else self._keyed)[low] = placeholder
        self._originals.setdefault(placeholder, []).append(value)
        self._pattern = None

    def observe(self, name: str, text: str) -> None:
        """Learn the identifiers a bundle file names, by the file's known layout."""
        base = name.rsplit("/", 1)[-1]
        try:
            if name == "bundle.yaml":
                self._observe_meta(yaml.safe_load(text))
            elif name in ("hostname.txt",):
                self.learn("NODE", text.strip().splitlines()[0] if text.strip() else "")
            elif name in ("pod.json", "node.json"):
                self._observe_kube(json.loads(text))
            elif base.startswith("nvidia-smi-q"):
                for serial in _SERIAL.findall(text):
                    if serial.upper() not in ("N/A", "[N/A]", "0"):
                        self.learn("SERIAL", serial)
            elif name == "lspci.txt":
                for slot in _LSPCI_SLOT.findall(text):
                    self._short_bus.add(slot.lower())
                    self._pattern = None
        except (ValueError, yaml.YAMLError, AttributeError, IndexError, TypeError, RecursionError):
            pass  # a file that is not what its name says teaches nothing
        if name.startswith("nccl/") or "NCCL" in text[:65536]:
            for host in dict.fromkeys(_NCCL_HOST.findall(text)):
                self.learn("NODE", host)
        if base.startswith("journal") or name.startswith("journal"):
            for host in dict.fromkeys(_SYSLOG_HOST.findall(text)):
                self.learn("NODE", host)
        self._prescan(text)
        for match in re.finditer(
            rf"(?:pod|podUID=\\?\"?|\"uid\":\s*\")({_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}"
            rf"[-_]{_HEX}{{4}}[-_]{_HEX}{{12}})",
            text,
        ):
            if name in ("pod.json", "node.json") and match.group(0).startswith('"uid"'):
                continue  # only a Pod's own uid (read above) is a pod UID
            self._pod_uids.add(match.group(1).lower().replace("_", "-"))
            self._learn_uuid(match.group(1))

    def _prescan(self, text: str) -> None:
        """Learn the spellings a later pass must know before it meets them: a bus ID's short
        forms (lspci's `18:00.0` may come before nvidia-smi's `00000000:18:00.0`) and full
        container IDs (to know them cut short)."""
        for match in _BUS_ANY.finditer(text):
            self._learn_bus(match.group(0))
        for match in _HEX64.finditer(text):
            if match.group(0).lower() not in self._hex64:
                self._hex64.add(match.group(0).lower())
                self._pattern = None
        for match in _UUID_ANY.finditer(text):
            self._learn_uuid(match.group(0))

    def _learn_uuid(self, value: str) -> None:
        key = value.lower().replace("_", "-")
        if key not in self._uuids:
            self._uuids.add(key)
            self._pattern = None

    def _observe_meta(self, meta: Any) -> None:
        if not isinstance(meta, Mapping):
            return
        self.learn("NODE", meta.get("node"))
        self.learn("POD", meta.get("pod"))
        self.learn("NAMESPACE", meta.get("namespace"))
        labels = meta.get("labels")
        if isinstance(labels, Mapping):
            self.learn("NODE", labels.get("kubernetes.io/hostname"))
        nodes = meta.get("nodes")
        if isinstance(nodes, str):
            for node in re.split(r"[\s,]+", nodes):
                if node and not node.isdigit():
                    self.learn("NODE", node)
        elif isinstance(nodes, list):
            for node in nodes:
                self.learn("NODE", node)

    def _observe_kube(self, doc: Any) -> None:
        if not isinstance(doc, Mapping):
            return
        if doc.get("kind") == "List" or isinstance(doc.get("items"), list):
            for item in doc.get("items") or []:
                self._observe_kube(item)
            return
        meta, spec, status = (
            _map(doc.get("metadata")),
            _map(doc.get("spec")),
            _map(doc.get("status")),
        )
        labels = _map(meta.get("labels"))
        if doc.get("kind") == "Node":
            self.learn("NODE", meta.get("name"))
            self.learn("NODE", labels.get("kubernetes.io/hostname"))
            for address in status.get("addresses") or []:
                if isinstance(address, Mapping) and address.get("type") in (
                    "Hostname", "InternalDNS", "ExternalDNS",
                ):  # fmt: skip
                    self.learn("NODE", address.get("address"))
            self.learn("PROVIDER_ID", spec.get("providerID"))
            info = _map(status.get("nodeInfo"))
            self.learn("SERIAL", info.get("machineID"))
            for image in status.get("images") or []:
                if isinstance(image, Mapping):
                    for ref in image.get("names") or []:
                        self.learn("IMAGE", ref)
            return
        self.learn("POD", meta.get("name"))
        self.learn("NAMESPACE", meta.get("namespace"))
        uid = meta.get("uid")
        if isinstance(uid, str):
            self._pod_uids.add(uid.lower().replace("_", "-"))
            if _UUID_ANY.fullmatch(uid):
                self._learn_uuid(uid)
        for key in _JOB_LABELS:
            self.learn("JOB", labels.get(key))
        for owner in meta.get("ownerReferences") or []:
            if isinstance(owner, Mapping):
                self.learn("JOB", owner.get("name"))
        self.learn("NODE", spec.get("nodeName"))
        self.learn("ACCOUNT", spec.get("serviceAccountName") or spec.get("serviceAccount"))
        for key in ("containers", "initContainers", "ephemeralContainers"):
            for container in spec.get(key) or []:
                if isinstance(container, Mapping):
                    self.learn("IMAGE", container.get("image"))
        for key in ("containerStatuses", "initContainerStatuses"):
            for container in status.get(key) or []:
                if isinstance(container, Mapping):
                    self.learn("IMAGE", container.get("image"))
                    self.learn("IMAGE", container.get("imageID"))

    # -- replacing --------------------------------------------------------------------------

    def _compiled(self) -> tuple[re.Pattern[str], re.Pattern[str] | None]:
        if self._pattern is None:
            alternatives = []
            if self._literals:
                longest = sorted(self._literals, key=len, reverse=True)
                words = "|".join(re.escape(w) for w in longest)
                alternatives.append(
                    # `_` glues a name to a word (`gpu-node-07_rank0`), `-` is part of one
                    rf"(?<![>A-Za-z0-9-])(?P<lit>(?i:{words}))(?!<[A-Z])(?![>A-Za-z0-9-])"
                )
            if self._short_bus:
                slots = "|".join(
                    re.escape(s) for s in sorted(self._short_bus, key=len, reverse=True)
                )
                alternatives.append(
                    rf"(?<![>0-9A-Za-z:.])(?P<shortbus>(?i:{slots}))(?!<[A-Z])(?![>0-9A-Za-z]|\.\d)"
                )
            if self._uuids:  # 32 hex digits: replaced when a UUID seen with dashes (_replace)
                alternatives.append(
                    rf"(?<![>0-9A-Za-z])(?P<uuid32>{_HEX}{{32}})(?!<[A-Z])(?![>0-9A-Za-z])"
                )
            if self._hex64:
                alternatives.append(
                    rf"(?P<hexpre>(?<![>0-9A-Za-z]){_HEX}{{12,63}})(?!<[A-Z])(?![>0-9A-Za-z])"
                )
            self._pattern = re.compile("|".join([*alternatives, *_SHAPES]))
            self._keyed_pattern = None
            if self._keyed:
                words = "|".join(re.escape(w) for w in sorted(self._keyed, key=len, reverse=True))
                pods = [w for w, p in self._literals.items() if p.startswith(("<POD_", "<JOB_"))]
                after = "|".join(re.escape(w) for w in sorted(pods, key=len, reverse=True))
                keyed = rf"{_KEYED}(?P<kw>(?i:{words}))(?![A-Za-z0-9_-])"
                if after:
                    keyed += rf"|(?<![A-Za-z0-9_./-])(?P<nsw>(?i:{words}))(?=/(?i:{after})\b)"
                self._keyed_pattern = re.compile(keyed)
        return self._pattern, self._keyed_pattern

    def _learn_bus(self, value: str) -> str:
        """The device's key; its other spellings (`18:00.0`, Xid's `0000:18:00`) become known
        forms of the same device."""
        key = _bus_key(value)
        if key not in self._bus_forms:
            self._bus_forms.add(key)
            domain, bus, rest = key.split(":")
            forms = {f"{int(domain, 16):08x}:{bus}:{rest}", key, f"{bus}:{rest}"}
            if rest.endswith(".0"):
                forms.add(f"{domain}:{bus}:{rest[:-2]}")
            self._short_bus |= forms
            self._pattern = None
        return key

    def _replace(self, match: re.Match[str]) -> str:
        group = match.lastgroup
        value = match.group(group) if group else match.group(0)
        if group == "lit":
            return self._literals[value.lower()]
        if group == "uuid32":  # a UUID seen with its dashes, written without them
            low = value.lower()
            key = "-".join((low[:8], low[8:12], low[12:16], low[16:20], low[20:]))
            if key not in self._uuids:
                return value  # 32 hex digits of something else (a digest, a trace id)
            kind = "POD_UID" if key in self._pod_uids else "UUID"
            return self._assign(kind, f"uuid:{key}", value)
        if group in ("bus", "shortbus"):
            return self._assign("BUS_ID", f"bus:{self._learn_bus(value)}", value)
        if group == "uuid" or match.group("uuid") is not None:
            value = match.group("uuid")
            key = value.lower().replace("_", "-")
            self._learn_uuid(value)
            kind = "POD_UID" if key in self._pod_uids else "UUID"
            return self._assign(kind, f"uuid:{key}", value)
        if group in ("mig", "gpu"):
            return self._assign(_KIND_OF_GROUP[group], f"{group}:{value.lower()}", value)
        if group == "hexpre":
            # a container ID cut short (`9a8b7c6d5e4f`, as `crictl ps` shows it)
            for full in self._hex64:
                if full.startswith(value.lower()):
                    return self._assign("CONTAINER_ID", f"hex:{full}", value)
            return value
        if group == "hex64":
            if value.lower().startswith("sha256:"):
                return self._assign("IMAGE_DIGEST", f"hex:{value[7:].lower()}", value)
            return self._assign("CONTAINER_ID", f"hex:{value.lower()}", value)
        if group in ("mac", "ipoib"):
            return self._assign("MAC", f"mac:{value.lower().replace('-', ':')}", value)
        if group in ("ipv4", "ipv6"):
            try:
                address = ipaddress.ip_address(value)
            except ValueError:
                return match.group(0)
            if address.is_loopback or address.is_unspecified or value.startswith("255."):
                return match.group(0)
            return self._assign("IP", f"ip:{address.compressed}", value)
        if group in ("email", "home", "users"):
            kind = _KIND_OF_GROUP[group]
            return self._assign(kind, f"{kind.lower()}:{value.lower()}", value)
        return match.group(0)

    def _replace_keyed(self, match: re.Match[str]) -> str:
        if match.group("kw") is not None:
            return match.group("pre") + self._keyed[match.group("kw").lower()]
        return self._keyed[match.group("nsw").lower()]

    def text(self, text: str) -> str:
        """`text` with credentials redacted and every identifier replaced."""
        if not text:
            return text
        text = redact(text)
        self._prescan(text)
        pattern, keyed = self._compiled()
        if keyed is not None:
            text = keyed.sub(self._replace_keyed, text)
        return pattern.sub(self._replace, text)

    def path(self, name: str) -> str:
        """A bundle-relative file name with identifiers replaced (placeholders without their
        angle brackets: `nccl/nccl.NODE_1.48201.log`)."""
        parts = [self.text(p) for p in name.split("/")]
        return "/".join(p if p not in ("", ".", "..") else "_" for p in parts)

    def _truncated(self, match: re.Match[str]) -> str:
        token = match.group(0)
        low = token.lower()
        starts = [0] + [i + 1 for i, c in enumerate(low) if not c.isalnum()]
        if low.startswith("pod"):
            starts.append(3)
        for start in sorted(set(starts)):
            part = low[start:]
            if len(part) < 6:
                break
            for placeholder, originals in self._originals.items():
                if any(o.lower().startswith(part) for o in originals):
                    return token[:start] + placeholder
        return token

    def _clean_cut(self, text: str) -> str:
        """An identifier cut short before `...` (a clipped log line in a verdict) is replaced
        too, so no prefix of it is left behind."""
        if "..." not in text and "…" not in text:
            return text
        return _CUT.sub(self._truncated, text)

    def data(self, value: Any, *, _key: str | None = None) -> Any:
        """JSON-shaped data (a verdict) with every string and key sanitized; a short name is
        replaced as the value of a field that names it (`{"namespace": "ml"}`)."""
        if isinstance(value, str):
            if _key is not None and value.lower() in self._keyed:
                if _key.lower().rsplit("/", 1)[-1] in _KEYED_KEYS:
                    return self._keyed[value.lower()]
            return self._clean_cut(self.text(value))
        if isinstance(value, Mapping):
            return {
                (self.text(k) if isinstance(k, str) else k): self.data(
                    v, _key=k if isinstance(k, str) else None
                )
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value

    def mapping(self) -> dict[str, list[str]]:
        """placeholder → the originals it stands for (never part of sanitized output)."""
        return {p: list(o) for p, o in self._originals.items()}


def observe_order(names: Iterable[str]) -> list[str]:
    """The order a bundle's files are read in, so placeholders are numbered the same way by
    every command: bundle.yaml, then the Kubernetes objects, then every other file by name."""
    first = {"bundle.yaml": 0, "hostname.txt": 1, "pod.json": 2, "node.json": 3}
    return sorted(names, key=lambda n: (first.get(n, 9), n))


def sanitize_files(files: Mapping[str, str]) -> tuple[Sanitizer, dict[str, str]]:
    """Learn a bundle's identifiers from all its files (`files`: bundle-relative name → text,
    `.rc`/`.err` included), then sanitize each in `observe_order`: the sanitizer (to apply
    to the verdict next) and the sanitized files under their sanitized names."""
    sanitizer = Sanitizer()
    order = observe_order(files)
    for name in order:
        sanitizer.observe(name, files[name])
    return sanitizer, {sanitizer.path(name): sanitizer.text(files[name]) for name in order}
