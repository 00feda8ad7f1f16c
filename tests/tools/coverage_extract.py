"""Extract every error text the stack under a training job can print, from its own source, into
the checked-in lists under runbook/data/coverage/ (the coverage table's input: see
docs/coverage.md and tests/unit/test_coverage.py, which read only those lists, offline).

    cd runbook/data/coverage
    python ../../../tests/tools/coverage_extract.py nccl GIT_DIR            > nccl.yaml
    python ../../../tests/tools/coverage_extract.py pytorch REL=TARBALL ... > pytorch.yaml
    python ../../../tests/tools/coverage_extract.py cuda REL=WHEEL ...      > cuda.yaml

The inputs of the checked-in lists: NCCL's repository (github.com/NVIDIA/nccl, its tags);
`apt-get source --download-only pytorch=1.13.1+dfsg-4` and `pytorch=2.6.0+dfsg-7` (Debian's
copies of the upstream release tarballs, the pytorch_*.orig.tar.xz files); `pip download
--no-deps nvidia-cuda-runtime-cu11==11.8.89` and `nvidia-cuda-runtime-cu12==12.9.79`. Each
list records the commits, tarballs and wheels (with their sha256) it was made from.

The kernel formats (runbook/data/coverage/kernel.yaml) are written by hand: they are the lines
the kernel parser reads, each with the kernel source file that prints it.

Sources and what is taken from each (deterministic: the same input gives the same bytes):

nccl     NCCL's public repository (a git directory), at the release tags in NCCL_RELEASES; every
         file under src/ (.cc .cu .c .cpp .h .cuh .hpp). Taken: the format string (first
         argument) of every `WARN(...)` call, the macros' included (CUDACHECK's `Cuda failure
         '%s'`; a macro parameter pasted into the text is written `{name}`, a `PRIu64`-style
         macro as its conversion); the return-code traces that NCCL's check macros print at INFO
         level (`INFO(...)` in src/include/checks.h: `%s:%d -> %d`); and the texts
         `ncclGetErrorString` returns. A WARN whose format is no literal is listed as
         `<dynamic: EXPR>`.
pytorch  c10d's sources of a PyTorch release (its source tarball, read in place), the files
         in PYTORCH_FILES. Taken: the message of every TORCH_CHECK / TORCH_CHECK_WITH
         / C10_THROW_ERROR / C10D_THROW_ERROR / `throw std::…_error(…)`, every `LOG(ERROR)` /
         `LOG(FATAL)` line, and the messages built with `c10::str(…)` or `std::string X = "…"
         + …` into a variable whose name says error/msg. String literals are kept; whatever is
         computed between them is written `{}`. A site with no literal is skipped (it prints
         only a computed value).
cuda     the CUDA runtime library (libcudart.so from the PyPI wheels nvidia-cuda-runtime-cu11
         11.8.89 and nvidia-cuda-runtime-cu12 12.9.79): for every code 0-1099 it names,
         cudaGetErrorName and the text cudaGetErrorString returns, asked of the library itself
         through ctypes (a lookup in its own table: no driver or GPU needed).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

#: the NCCL releases covered: the newest tag of each release line users still run
NCCL_RELEASES = (
    "v2.4.8-1", "v2.8.4-1", "v2.12.12-1", "v2.18.6-1", "v2.21.5-1", "v2.23.4-1", "v2.30.7-1",
)  # fmt: skip
NCCL_EXTENSIONS = (".cc", ".cu", ".c", ".cpp", ".h", ".cuh", ".hpp")
#: c10d's files that hold the NCCL process group's and its store's messages
PYTORCH_FILES = (
    "ProcessGroupNCCL.cpp", "ProcessGroupNCCL.hpp", "NCCLUtils.cpp", "NCCLUtils.hpp",
    "TCPStore.cpp", "TCPStoreBackend.cpp", "TCPStoreLibUvBackend.cpp", "socket.cpp",
    "Utils.hpp", "Utils.cpp", "ProcessGroup.cpp", "Backend.cpp", "Work.cpp",
)  # fmt: skip
#: inttypes.h macros: the conversion they spell
PRI = {f"PRI{c}{n}": f"l{c}" for c in "diuxX" for n in ("8", "16", "32", "64", "PTR", "MAX")}

_TOKEN = re.compile(
    r"""(?P<ws>\s+|\\\n)
    |(?P<comment>//[^\n]*|/\*.*?\*/)
    |(?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^(\s]{0,16})\((?P<rawbody>.*?)\)(?P=delim)")
    |(?P<str>(?:u8|u|U|L)?"(?P<body>(?:[^"\\\n]|\\.)*)")
    |(?P<chr>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*')
    |(?P<ident>[A-Za-z_]\w*)
    |(?P<num>\.?\d(?:[\w.]|[eEpP][+-])*)
    |(?P<punct><<|>>|->|::|&&|\|\||[-+*/%=!<>&|^]=|.)""",
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'", "r": "\r", "0": ""}


@dataclass(frozen=True)
class Tok:
    kind: str  # str | ident | num | punct | chr
    text: str  # a literal's decoded text, or the token itself


def _decode(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), body)


def tokens(source: str) -> list[Tok]:
    """C/C++ tokens, comments and whitespace dropped, string literals decoded."""
    out: list[Tok] = []
    for m in _TOKEN.finditer(source):
        kind = m.lastgroup
        if kind in ("ws", "comment"):
            continue
        if kind == "raw":
            out.append(Tok("str", m.group("rawbody")))
        elif kind == "str":
            out.append(Tok("str", _decode(m.group("body"))))
        elif kind in ("delim", "rawbody", "body"):  # pragma: no cover (inner groups)
            continue
        else:
            out.append(Tok(kind or "punct", m.group(0)))
    return out


def args_at(toks: list[Tok], open_at: int) -> tuple[list[list[Tok]], int]:
    """The top-level arguments of the call whose `(` is toks[open_at], and the index of its
    `)`."""
    depth, args, cur = 0, [], []
    i = open_at
    while i < len(toks):
        t = toks[i]
        if t.kind == "punct" and t.text in "([{":
            depth += 1
            if depth > 1:
                cur.append(t)
        elif t.kind == "punct" and t.text in ")]}":
            depth -= 1
            if depth == 0:
                args.append(cur)
                return args, i
            cur.append(t)
        elif t.kind == "punct" and t.text == "," and depth == 1:
            args.append(cur)
            cur = []
        else:
            cur.append(t)
        i += 1
    return args, i


def format_of(arg: list[Tok]) -> str | None:
    """A printf format argument as text: literals concatenated, `PRIu64` as `lu`, a macro
    parameter (`#name` or `name` between literals) as `{name}`; None when it holds no literal."""
    if not any(t.kind == "str" for t in arg):
        return None
    parts: list[str] = []
    i = 0
    while i < len(arg):
        t = arg[i]
        if t.kind == "str":
            parts.append(t.text)
        elif t.kind == "ident":
            parts.append(PRI.get(t.text, "{" + t.text + "}"))
        elif t.kind == "punct" and t.text == "#" and i + 1 < len(arg):
            parts.append("{" + arg[i + 1].text + "}")
            i += 1
        i += 1
    return clean("".join(parts))


def clean(text: str) -> str:
    """One line: surrounding newlines and blanks dropped, inner newlines written `\\n`."""
    return text.strip().replace("\r", "").replace("\n", "\\n")


def message_of(toks: list[Tok]) -> str | None:
    """A message built from pieces (`c10::str(…)`, `<<`, `+`): its literals in order, `{}` for
    what is computed between or around them; None when it holds no literal."""
    if not any(t.kind == "str" for t in toks):
        return None
    parts: list[str] = []
    computed = False
    for t in toks:
        if t.kind == "str":
            if computed and parts:
                parts.append("{}")
            elif computed and not parts:
                parts.append("{}")
            parts.append(t.text)
            computed = False
        elif t.kind in ("ident", "num", "chr") and t.text not in _GLUE:
            computed = True
    if computed:
        parts.append("{}")
    return clean("".join(parts))


#: names that only glue a message together (not a value of it)
_GLUE = {"c10", "str", "std", "string", "to_string_view", "LOG", "ERROR", "FATAL", "C10_LOG_API"}


# ---- NCCL -------------------------------------------------------------------------------------
def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, *args], check=True, capture_output=True, text=True,
        errors="replace",
    ).stdout  # fmt: skip


def nccl_file(path: str, source: str) -> Iterator[tuple[str, str]]:
    """(kind, text) of every message one NCCL source file prints."""
    toks = tokens(source)
    for i, t in enumerate(toks):
        if t.kind != "ident" or i + 1 >= len(toks) or toks[i + 1].text != "(":
            continue
        if t.text == "WARN":
            if i >= 2 and toks[i - 1].text == "define" and toks[i - 2].text == "#":
                continue  # the macro's own definition
            args, _ = args_at(toks, i + 1)
            text = format_of(args[0]) if args else None
            if text is None:
                expr = " ".join(x.text for x in (args[0] if args else []))[:80]
                text = f"<dynamic: {expr}>"
            yield "warn", text
        elif t.text in ("INFO", "INFO_LOC") and path.endswith("include/checks.h"):
            args, _ = args_at(toks, i + 1)
            if len(args) >= 2 and (text := format_of(args[1])) is not None:
                yield "trace", text
        elif t.text == "ncclGetErrorString" and (i == 0 or toks[i - 1].text != "return"):
            _, close = args_at(toks, i + 1)
            if close + 1 < len(toks) and toks[close + 1].text == "{":
                _, end = args_at(toks, close + 1)
                for x in toks[close + 1 : end]:
                    if x.kind == "str":
                        yield "error-string", clean(x.text)


def nccl(git_dir: str, releases: Iterable[str] = NCCL_RELEASES) -> dict[str, object]:
    found: dict[tuple[str, str], dict[str, set[str]]] = {}
    commits: dict[str, str] = {}
    for tag in releases:
        commits[tag] = _git(git_dir, "rev-parse", f"{tag}^{{commit}}").strip()
        paths = _git(git_dir, "ls-tree", "-r", "--name-only", tag, "--", "src").splitlines()
        for path in sorted(p for p in paths if p.endswith(NCCL_EXTENSIONS)):
            source = _git(git_dir, "show", f"{tag}:{path}")
            for kind, text in nccl_file(path, source):
                entry = found.setdefault((kind, text), {"releases": set(), "files": set()})
                entry["releases"].add(tag)
                entry["files"].add(path)
    return _document(
        "nccl",
        "https://github.com/NVIDIA/nccl (release tags; every file under src/)",
        [{"release": tag, "commit": commits[tag]} for tag in releases],
        found,
        list(releases),
    )


# ---- PyTorch c10d ---------------------------------------------------------------------------
_CHECKS = {
    "TORCH_CHECK": 1, "TORCH_CHECK_WITH": 2, "TORCH_CHECK_VALUE": 1,
    "TORCH_CHECK_NOT_IMPLEMENTED": 1, "C10_THROW_ERROR": 1, "C10D_THROW_ERROR": 1,
    "C10D_CHECK_WITH": 2,
}  # fmt: skip
_NAMED = re.compile(r"(?i)(?:msg|err|error|exit|reason)")


#: the C++ error class a check raises without naming one
_RAISES = {"TORCH_CHECK": "Error", "TORCH_CHECK_VALUE": "ValueError",
           "TORCH_CHECK_NOT_IMPLEMENTED": "NotImplementedError"}  # fmt: skip


def pytorch_file(source: str) -> Iterator[tuple[str, str, str | None]]:
    """(kind, text, the C++ error class raised, when the site names one) of every message."""
    toks = tokens(source)
    for i, t in enumerate(toks):
        nxt = toks[i + 1].text if i + 1 < len(toks) else ""
        if t.kind == "ident" and t.text in _CHECKS and nxt == "(":
            if i >= 2 and toks[i - 1].text == "define" and toks[i - 2].text == "#":
                continue
            args, _ = args_at(toks, i + 1)
            rest = [x for a in args[_CHECKS[t.text] :] for x in a]
            raises = _RAISES.get(t.text) or (args[0][-1].text if args and args[0] else None)
            if (text := message_of(rest)) is not None:
                yield "check" if t.text.startswith("TORCH") else "throw", text, raises
        elif t.text == "throw" and nxt == "std" and i + 4 < len(toks) and toks[i + 4].text == "(":
            if toks[i + 3].text.endswith(("_error", "_argument")):
                args, _ = args_at(toks, i + 4)
                if (text := message_of([x for a in args for x in a])) is not None:
                    yield "throw", text, toks[i + 3].text
        elif t.text == "LOG" and nxt == "(" and i + 3 < len(toks):
            level = toks[i + 2].text
            if level in ("ERROR", "FATAL") and toks[i + 3].text == ")":
                j = i + 4
                while j < len(toks) and toks[j].text != ";":
                    j += 1
                if (text := message_of(toks[i + 4 : j])) is not None:
                    yield "log-error", text, None
        elif t.kind == "ident" and _NAMED.search(t.text) and nxt == "=" and i + 2 < len(toks):
            # `auto exceptionMsg = c10::str(…);`, `std::string err = "NCCL error in: " + …;`
            j = i + 2
            while j < len(toks) and toks[j].text not in (";", "{"):
                j += 1
            value = toks[i + 2 : j]
            if value and (
                value[0].kind == "str" or [x.text for x in value[:3]] == ["c10", "::", "str"]
            ):
                if (text := message_of(value)) is not None and len(text) > 12:
                    yield "message", text, None


def c10d_sources(tarball: Path) -> Iterator[tuple[str, str]]:
    """(file name, text) of the PYTORCH_FILES in a source tarball's c10d directory."""
    with tarfile.open(tarball) as tar:
        for member in tar:
            head, _, name = member.name.rpartition("/")
            if head.endswith("torch/csrc/distributed/c10d") and name in PYTORCH_FILES:
                data = tar.extractfile(member)
                if data is not None:
                    yield name, data.read().decode(errors="replace")


def pytorch(tarballs: list[tuple[str, Path]]) -> dict[str, object]:
    found: dict[tuple[str, str, str | None], dict[str, set[str]]] = {}
    for release, tarball in tarballs:
        for name, source in sorted(c10d_sources(tarball)):
            for kind, text, raises in pytorch_file(source):
                key = (kind, text, raises)
                entry = found.setdefault(key, {"releases": set(), "files": set()})
                entry["releases"].add(release)
                entry["files"].add(f"torch/csrc/distributed/c10d/{name}")
    return _document(
        "pytorch",
        "PyTorch's c10d sources (torch/csrc/distributed/c10d) of each release, read from "
        "the upstream source tarball as Debian's pytorch source package ships it",
        [{"release": r, "tarball": t.name, "sha256": _sha256(t)} for r, t in tarballs],
        found,
        [r for r, _ in tarballs],
    )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- CUDA runtime ---------------------------------------------------------------------------
#: cudaError_t codes asked for (the runtime's table ends below 1000; 999 is cudaErrorUnknown)
CUDA_CODES = range(0, 1100)


def cuda_strings(lib: Path) -> list[tuple[str, str]]:
    """(name, text) of every code libcudart names: cudaGetErrorName and cudaGetErrorString
    asked directly (a table lookup inside the library: no driver or GPU is needed)."""
    import ctypes

    cudart = ctypes.CDLL(str(lib))
    cudart.cudaGetErrorName.restype = ctypes.c_char_p
    cudart.cudaGetErrorString.restype = ctypes.c_char_p
    out = []
    for code in CUDA_CODES:
        name = cudart.cudaGetErrorName(code)
        if name and name != b"unrecognized error code":
            out.append((name.decode(), cudart.cudaGetErrorString(code).decode()))
    return out


def cuda(wheels: list[tuple[str, Path]]) -> dict[str, object]:
    found: dict[tuple[str, str], dict[str, set[str]]] = {}
    for release, wheel in wheels:
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
            member = next(n for n in sorted(zf.namelist()) if re.search(r"/libcudart\.so\.\d+", n))
            lib = Path(zf.extract(member, tmp))
            pairs = cuda_strings(lib)
        for name, msg in pairs:
            entry = found.setdefault(("error-string", msg), {"releases": set(), "files": set()})
            entry["releases"].add(release)
            entry["files"].add(name)
    return _document(
        "cuda",
        "the CUDA runtime's error texts: cudaGetErrorString (and cudaGetErrorName, in `files`) "
        "of libcudart.so from PyPI's nvidia-cuda-runtime-cu11 / -cu12 wheels, asked for every "
        "code they name",
        [{"release": r, "wheel": w.name, "sha256": _sha256(w)} for r, w in wheels],
        found,
        [r for r, _ in wheels],
    )


# ---- output ---------------------------------------------------------------------------------
def _document(
    source: str,
    origin: str,
    releases: list[dict[str, str]],
    found: Mapping[Any, dict[str, set[str]]],
    order: list[str],
) -> dict[str, object]:
    rank = {r: i for i, r in enumerate(order)}
    strings = []
    for key, v in sorted(found.items(), key=lambda kv: tuple(x or "" for x in kv[0])):
        kind, text, *raises = key
        one: dict[str, object] = {"kind": kind, "text": text}
        if raises and raises[0]:
            one["raises"] = raises[0]
        one["releases"] = sorted(v["releases"], key=rank.__getitem__)
        one["files"] = sorted(v["files"])
        strings.append(one)
    return {"source": source, "origin": origin, "releases": releases, "strings": strings}


def dump(doc: dict[str, object]) -> str:
    head = (
        "# Generated by tests/tools/coverage_extract.py (see its docstring): do not edit.\n"
        "# Each string: its kind, the text (format conversions as printed in the source), the\n"
        "# releases that print it and the files it is in.\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="source", required=True)
    n = sub.add_parser("nccl")
    n.add_argument("git_dir")
    p = sub.add_parser("pytorch")
    p.add_argument("tarballs", nargs="+", help="RELEASE=PATH to a PyTorch source tarball")
    c = sub.add_parser("cuda")
    c.add_argument("wheels", nargs="+", help="RELEASE=PATH to an nvidia-cuda-runtime wheel")
    ns = ap.parse_args(argv)

    def pairs(items: list[str]) -> list[tuple[str, Path]]:
        out = []
        for item in items:
            release, sep, where = item.partition("=")
            if not sep:
                raise SystemExit(f"{item}: expected RELEASE=PATH")
            out.append((release, Path(where)))
        return out

    if ns.source == "nccl":
        doc = nccl(ns.git_dir)
    elif ns.source == "pytorch":
        doc = pytorch(pairs(ns.tarballs))
    else:
        doc = cuda(pairs(ns.wheels))
    sys.stdout.write(dump(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
