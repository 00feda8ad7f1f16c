"""Pure parsers of Slurm's own text: `scontrol [-d] show job [-o]`, `sacct -P`, hostlists.

`scontrol show job` prints one record per job: `Key=Value` pairs, several to a line, lines
indented by three spaces (all on one line with `-o`), records separated by a blank line.
A value runs to the next ` Key=` (a word of letters, digits, `_`, `:` or `/` after a space),
so `TRES=cpu=8,mem=64G` and `JobName=my job` keep their `=` and spaces. With `-d`, and once
the job has resources, `JOB_GRES=` and one line per group of nodes with the same allocation
follow: `Nodes=gpu-[01-02] CPU_IDs=0-63 Mem=512000 GRES=gpu:h100:8(IDX:0-7)` (Slurm 19.05+;
18.08 printed `GRES_IDX=gpu(IDX:0-3)`, 19.05 `GRES=gpu(IDX:0-3)`, later `gpu:[TYPE:]N(IDX:…)`,
several types comma-separated). `ExitCode=N:S` is the exit status and the terminating signal.
Times are the controller's local time without a zone; `Unknown`, `None`, `N/A` mean none.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/]*)=")
_NUMBER = re.compile(r"[0-9]{1,9}")
#: more names than any Slurm cluster has nodes: a hostlist or range that expands to more is
#: not a real one (`gpu-[0-99999999]`), and is kept as written instead of filling memory
MAX_HOSTS = 100_000
_GPU_IDX = re.compile(r"\bgpu(?::[\w.-]+)*\(IDX:([^)]*)\)")
_NONE = frozenset({"", "(null)", "None", "Unknown", "N/A", "n/a"})
_ALLOC_KEYS = ("CPU_IDs", "Mem", "GRES", "GRES_IDX")


@dataclass(frozen=True)
class SlurmAllocation:
    """One `Nodes=… CPU_IDs=… Mem=… GRES=…` line of `scontrol -d show job`."""

    nodes: str
    hosts: tuple[str, ...]
    cpu_ids: str | None = None
    mem: str | None = None
    gres: str | None = None
    #: GPU indices on each of these nodes (from `(IDX:…)`)
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmJob:
    """One job record; `fields` holds every Key=Value of it (the first of a repeated key)."""

    fields: dict[str, str] = field(default_factory=dict)
    allocations: tuple[SlurmAllocation, ...] = ()

    def get(self, key: str) -> str | None:
        """A field's value, None when absent or one of Slurm's spellings of nothing."""
        value = self.fields.get(key)
        return None if value is None or value in _NONE else value

    @property
    def job_id(self) -> str:
        return self.fields.get("JobId", "")

    @property
    def ref(self) -> str:
        """How a user names this record: `ID`, `ARRAYID_TASK` or `HETID+OFFSET`."""
        if self.get("ArrayJobId") and self.get("ArrayTaskId"):
            return f"{self.fields['ArrayJobId']}_{self.fields['ArrayTaskId']}"
        if self.get("HetJobId") and self.get("HetJobOffset"):
            return f"{self.fields['HetJobId']}+{self.fields['HetJobOffset']}"
        return self.job_id

    @property
    def state(self) -> str | None:
        # sacct's `CANCELLED by 1000`: the state is the first word
        value = self.get("JobState")
        return value.split()[0] if value else None

    @property
    def exit(self) -> tuple[int | None, int | None]:
        """(exit status, signal) of `ExitCode=N:S`."""
        code, _, signal = (self.get("ExitCode") or "").partition(":")
        return _int(code), _int(signal)

    @property
    def node_list(self) -> str | None:
        return self.get("NodeList")

    def gpus_on(self, host: str) -> tuple[str, ...]:
        for alloc in self.allocations:
            if host in alloc.hosts:
                return alloc.gpus
        return ()


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def pairs(line: str) -> Iterator[tuple[str, str]]:
    """The `Key=Value` pairs of one line of scontrol output, in order."""
    keys = list(_KEY.finditer(line))
    for i, match in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(line)
        yield match.group(1), line[match.end() : end].strip()


def _numeric_range(part: str) -> tuple[int, int, int] | None:
    """`01-03` → (1, 3, zero-padded width 2); None when `part` is not N-M."""
    low, dash, high = part.partition("-")
    if not (dash and _NUMBER.fullmatch(low) and _NUMBER.fullmatch(high)):
        return None
    return int(low), int(high), len(low) if low.startswith("0") else 0


def _range_size(text: str) -> int:
    """How many items `expand_ranges(text)` gives, without making them."""
    size = 0
    for part in text.split(","):
        numbers = _numeric_range(part.strip())
        size += max(0, numbers[1] - numbers[0] + 1) if numbers else 1
    return size


def expand_ranges(text: str) -> list[str]:
    """`0-3,6` → 0 1 2 3 6, keeping zero padding (`01-03` → 01 02 03); `N/A` → nothing. Text
    that would give more than MAX_HOSTS numbers is kept as written (one item)."""
    if _range_size(text) > MAX_HOSTS:
        return [text]
    out: list[str] = []
    for part in text.split(","):
        part = part.strip()
        numbers = _numeric_range(part)
        if numbers:
            low, high, width = numbers
            out += [str(n).zfill(width) for n in range(low, high + 1)]
        elif part and part not in _NONE:
            out.append(part)
    return out


def _split_top(text: str) -> list[str]:
    """Split a hostlist at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist syntax: `gpu-[01-03,07],login1`, `r[1-2]n[01-02]` → host names. An item
    that would expand to more than MAX_HOSTS names in all is kept as written."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        expanded = _expand_item(item, MAX_HOSTS - len(hosts))
        hosts += [item] if expanded is None else expanded
    return hosts


def _expand_item(item: str, limit: int) -> list[str] | None:
    """One hostlist item's names, or None when there would be more than `limit`."""
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    if _range_size(match.group(1)) > limit:
        return None
    names: list[str] = []
    for middle in expand_ranges(match.group(1)):
        more = _expand_item(f"{head}{middle}{tail}", limit - len(names))
        if more is None or len(names) + len(more) > limit:
            return None
        names += more
    return names


def gpu_indices(gres: str) -> tuple[str, ...]:
    """The GPU indices of a `GRES=` detail value: `gpu:h100:8(IDX:0-7)`, `gpu(IDX:0,2)`,
    `gpu:a:1(IDX:0),gpu:b:2(IDX:1-2)` → ('0', '1', …); other GRES (shard, mps) are not GPUs."""
    out: list[str] = []
    for match in _GPU_IDX.finditer(gres):
        out += [i for i in expand_ranges(match.group(1)) if i not in out]
    return tuple(out)


def _record(lines: Sequence[str]) -> SlurmJob:
    fields: dict[str, str] = {}
    allocations: list[dict[str, str]] = []
    for line in lines:
        for key, value in pairs(line):
            if key == "Nodes":
                allocations.append({"Nodes": value})
            elif key in _ALLOC_KEYS and allocations and key not in allocations[-1]:
                allocations[-1][key] = value
            else:
                fields.setdefault(key, value)
    allocs = []
    for alloc in allocations:
        gres = alloc.get("GRES") or alloc.get("GRES_IDX") or ""
        allocs.append(
            SlurmAllocation(
                nodes=alloc["Nodes"],
                hosts=tuple(expand_hostlist(alloc["Nodes"])),
                cpu_ids=alloc.get("CPU_IDs") or None,
                mem=alloc.get("Mem") or None,
                gres=gres or None,
                gpus=gpu_indices(gres),
            )
        )
    return SlurmJob(fields, tuple(allocs))


def parse_scontrol_jobs(text: str) -> list[SlurmJob]:
    """Every record of `scontrol [-d] show job [-o] …` output (a line starting `JobId=` opens
    one), in the order printed."""
    records: list[list[str]] = []
    for line in text.splitlines():
        if line.strip().startswith("JobId="):
            records.append([])
        if records and line.strip():
            records[-1].append(line)
    return [_record(r) for r in records]


#: what `sacct -P -X -n -o SACCT_FIELDS` prints, named as scontrol names them
SACCT_FIELDS: Mapping[str, str] = {
    "JobID": "JobId",
    "JobName": "JobName",
    "State": "JobState",
    "ExitCode": "ExitCode",
    "Start": "StartTime",
    "End": "EndTime",
    "NodeList": "NodeList",
    "NNodes": "NumNodes",
    "Partition": "Partition",
    "User": "UserId",
}


def parse_sacct(text: str) -> list[SlurmJob]:
    """`sacct -P -X -n -o JobID,JobName,…` (the fields of SACCT_FIELDS, in that order), one
    record per line, as scontrol records (`1234_7` becomes ArrayJobId/ArrayTaskId)."""
    names = list(SACCT_FIELDS.values())
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = line.split("|")
        # a job name may itself hold `|`: the fields after it are counted from the end
        if len(values) > len(names):
            extra = len(values) - len(names)
            values = [values[0], "|".join(values[1 : 2 + extra]), *values[2 + extra :]]
        fields = dict(zip(names, (v.strip() for v in values), strict=False))
        job_id = fields.get("JobId", "")
        array, sep, task = job_id.partition("_")
        if sep:
            fields.update(ArrayJobId=array, ArrayTaskId=task)
        jobs.append(SlurmJob(fields))
    return jobs
