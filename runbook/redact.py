"""Secrets are never written: the one redactor every write point calls.

`redact(text)` replaces what looks like a credential with `<REDACTED>` and keeps everything
around it (the variable's name, the header, the quotes), so a redacted log still reads and still
parses. It is pure, never raises on any string, and is idempotent (`redact(redact(t)) ==
redact(t)`): redacting twice — a bundle replayed into a run directory — changes nothing more.

What it catches, by shape or by name:

- PEM private keys (`-----BEGIN … PRIVATE KEY-----` … `-----END …-----`, also inside JSON
  strings with `\\n` escapes, also cut off before their END line): the body goes;
- a key's body without its BEGIN line (a log read from its last N lines, the BEGIN line just
  outside them): three or more lines in a row of 64 (PEM) or 70 (OpenSSH) base64 characters
  and the short line that ends them, the body lines right before a private key's END line,
  and an OpenSSH key's body from its first line (`b3BlbnNzaC1rZXktdjE`, "openssh-key-v1");
- `NAME=value`, `NAME: value`, `"NAME": "value"`, `--name value` where NAME ends in a
  credential word (`HF_TOKEN`, `WANDB_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `password`,
  `client_secret`, `PGPASSWORD`, `MYSQL_PWD`, …), and Kubernetes env entries
  `{"name": "DB_PASSWORD", "value": "…"}`;
- `Authorization: Bearer|Basic …`, a bare `Bearer …`, and `user:password@` in URLs;
- token shapes: Hugging Face `hf_…`, GitHub `ghp_…`/`github_pat_…`, GitLab `glpat-…`, Slack
  `xox?-…` and webhook URLs, AWS access key ids `AKIA…`/`ASIA…`, Google `AIza…`, OpenAI-style
  `sk-…`, and JSON Web Tokens (a Kubernetes service-account token).

Names that are configuration, not credentials (`NCCL_IB_HCA=mlx5_0`, `PWD=/workspace`,
`max_tokens=4096`), are kept. `redact_data` applies the same to every string (and key) of
JSON-shaped data; a mapping key that names a credential has its whole value redacted.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

REDACTED = "<REDACTED>"

# A name that ends in one of these words (after `_`, `-`, `.` or at its start) is a credential.
_CRED_WORDS = (
    r"password|passwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key|"
    r"secret[_-]?key|private[_-]?key|client[_-]?secret|credentials?|auth[_-]?token|"
    r"session[_-]?key|signing[_-]?key|encryption[_-]?key|webhook[_-]?url|sas[_-]?token|"
    r"connection[_-]?string"
)
_NAME = (
    rf"(?:[A-Za-z0-9]+[_.-])*(?:{_CRED_WORDS})"
    r"|[A-Za-z0-9]+(?:[_.-][A-Za-z0-9]+)*_(?:KEY|PASS|PWD)"
    # client tools' own names run the words together: PGPASSWORD, MYSQLPASSWORD, PGPASSFILE is
    # a path (not matched), MYSQL_PWD above
    r"|[A-Za-z0-9]+(?:password|passwd)"
)
_NAME_RE = re.compile(rf"^(?:{_NAME})$", re.IGNORECASE)
#: names that match the shape but hold no secret
_NOT_SECRET = {"pwd", "oldpwd", "token_type", "tokenizer", "sort_key", "hash_key", "key"}

#: a value: a quoted string (JSON escapes kept), one cut off at the line's end, or a bare word
_VALUE = r"(?:\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[\"'][^\n]*|[^\s\"',;&)}\]]+)"
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")

_ASSIGN = re.compile(
    rf"(?<![A-Za-z0-9_])(?P<name>{_NAME})(?P<q>[\"']?)(?P<sep>[ \t]*[=:][ \t]*)"
    rf"(?P<value>{_VALUE})",
    re.IGNORECASE,
)
_FLAG = re.compile(
    rf"(?P<pre>(?<![A-Za-z0-9_-])--?(?:{_NAME})(?:=|[ \t]+))(?P<value>{_VALUE})", re.IGNORECASE
)
_KUBE_ENV = re.compile(
    rf"(?P<pre>\"name\"\s*:\s*\"(?:{_NAME})\"\s*,\s*\"value\"\s*:\s*)"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*\")",
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(
    r"(?P<pre>(?<![A-Za-z0-9_-])(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
    r"(?:(?:Bearer|Basic|Token|Digest|Negotiate|Bot)[ \t]+)?)(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<pre>(?<![A-Za-z0-9_])Bearer[ \t]+)(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)")
_URL_CREDS = re.compile(
    r"(?P<pre>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"'<>]+:)(?P<value>[^\s/@\"'<>]+)(?P<post>@)"
)
_KEY_LINE = r"-----{} (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
_BEGIN, _END = re.compile(_KEY_LINE.format("BEGIN")), re.compile(_KEY_LINE.format("END"))
#: a key on one line: flattened, or inside a JSON string with `\n` escapes, whole or cut off
_PEM = re.compile(
    rf"(?P<begin>{_KEY_LINE.format('BEGIN')})"
    rf"(?:(?P<body>[A-Za-z0-9+/= \t\\:,.-]*?)(?P<end>{_KEY_LINE.format('END')})"
    r"|(?P<cut>(?:(?:\\[rn])+[ \t]*(?:[A-Za-z0-9+/=]+|(?:Proc-Type|DEK-Info|Comment):[^\n\\\"]*)"
    r"(?=[ \t]*(?:\\[rn]|[\"']|$)))*))",
    re.MULTILINE,
)
#: the last word of a line of a key's body (after whatever prefix a logger put before it)
_BODY_TAIL = re.compile(r"(?<![A-Za-z0-9+/=<])([A-Za-z0-9+/=]+|<REDACTED>)([ \t]*\r?\n?)$")
_PEM_HEADER = re.compile(r"((?:Proc-Type|DEK-Info|Comment):[ \t]*)(\S.*?)([ \t]*\r?\n?)$")
#: base64's alphabet as b"A", every other byte as b" ": a run of 62 b"A" in a text so
#: translated is where a key's body line may be (found at bytes.find's speed: a regular
#: expression's character class costs ten times more on a 4 MiB log)
_B64_RUNS = bytes(
    ord("A") if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "+/") else ord(" ")
    for c in range(256)
)
_B64_RUN = b"A" * 62
_HEX = frozenset("0123456789abcdefABCDEF")
#: the start of every OpenSSH private key's body ("openssh-key-v1\0" in base64)
_OPENSSH_BODY = "b3BlbnNzaC1rZXktdjE"
#: lines of a key's body in a row that make a headless block one
_BODY_RUN = 3
_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"hf_[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|xapp-\d-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}"
    r"|AIza[0-9A-Za-z_-]{35}"
    r"|sk-(?:(?:proj|live|test|ant|svcacct)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{32,})"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r")(?![A-Za-z0-9_])"
)
_SLACK_HOOK = re.compile(r"(?P<pre>hooks\.slack\.com/services/)(?P<value>[A-Za-z0-9/_-]+)")


def is_secret_name(name: str) -> bool:
    """Whether a variable or key called `name` holds a credential (`HF_TOKEN`: yes,
    `NCCL_IB_HCA`, `PWD`: no)."""
    if len(name) > _CACHED_CHARS:
        return _secret_name(name)
    return _secret_name_short(name)  # the same few hundred keys, over and over


def _secret_name(name: str) -> bool:
    return name.lower() not in _NOT_SECRET and bool(_NAME_RE.match(name))


_secret_name_short = functools.lru_cache(maxsize=8192)(_secret_name)


def _is_placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER.fullmatch(value.strip("\"'")))


def _quoted(value: str) -> str:
    """`<REDACTED>` in the quotes the value came in (a JSON string stays a JSON string)."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0] + REDACTED + value[0]
    return REDACTED


def _assign(match: re.Match[str]) -> str:
    value = match.group("value")
    if match.group("name").lower() in _NOT_SECRET or not value.strip("\"'"):
        return match.group(0)
    if _is_placeholder(value):
        return match.group(0)
    head = match.group(0)[: match.start("value") - match.start(0)]
    return head + _quoted(value)


def _pre_value(match: re.Match[str]) -> str:
    value = match.group("value")
    if _is_placeholder(value):
        return match.group(0)
    post = match.groupdict().get("post") or ""
    return match.group("pre") + _quoted(value) + post


def _pem(match: re.Match[str]) -> str:
    body, end = match.group("body"), match.group("end")
    if end is None:
        body = match.group("cut") or ""
    # inside a JSON string the lines are `\n` escapes: a raw newline would break the JSON
    newline = "\\n" if "\\n" in body else ("\n" if "\n" in body else " ")
    out = match.group("begin")
    if body.strip():
        out += newline + REDACTED
    if end is not None:
        out += (newline if body.strip() else body) + end
    return out


def _key_lines(text: str) -> str:
    """A private key over several lines, each line maybe behind a logger's prefix (`host:pid:tid
    [0] NCCL INFO `, a journal stamp): each body line's key text becomes `<REDACTED>`. A key
    cut off before its END line ends at the first line that is not key text (a short last
    line counts only right before END)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    in_key = False
    for index, line in enumerate(lines):
        if in_key:
            if _END.search(line):
                in_key = False
            else:
                tail = _BODY_TAIL.search(line)
                header = _PEM_HEADER.search(line)
                ends_next = index + 1 < len(lines) and bool(_END.search(lines[index + 1]))
                if tail and (len(tail.group(1)) >= 16 or tail.group(1) == REDACTED or ends_next):
                    out.append(line[: tail.start(1)] + REDACTED + tail.group(2))
                    continue
                if header:
                    out.append(line[: header.start(2)] + REDACTED + header.group(3))
                    continue
                in_key = False
        begins = list(_BEGIN.finditer(line))
        if begins and not _END.search(line, begins[-1].end()):
            in_key = True
        out.append(line)
    return "".join(out)


def _body_word(line: str) -> str | None:
    """The base64 word a line of a key's body ends in (not one already redacted)."""
    tail = _BODY_TAIL.search(line)
    if tail is None or tail.group(1) == REDACTED:
        return None
    return tail.group(1)


def _full_body(line: str) -> bool:
    """A full line of a key's body: 64 (PEM) or 70 (OpenSSH) base64 characters, padding
    included, both cases of letters (a digest in hex, an identifier, is not one)."""
    word = _body_word(line)
    if word is None or len(word) not in (64, 70):
        return False
    bare = word.rstrip("=")
    return (
        len(word) - len(bare) <= 2
        and "=" not in bare
        and not _HEX.issuperset(bare)
        and bare != bare.lower()
        and bare != bare.upper()
    )


def _may_hold_key_body(text: str) -> bool:
    """Whether `text` has a run of 62 base64 characters (a cheap test before any line is
    looked at)."""
    return text.encode("utf-8", "surrogatepass").translate(_B64_RUNS).find(_B64_RUN) >= 0


def _headless_keys(text: str) -> str:
    """A key's body whose BEGIN line is not in `text` (see the module docstring): each of its
    lines' key text becomes `<REDACTED>`."""
    lines = text.splitlines(keepends=True)
    secret = [False] * len(lines)
    ends = [bool(_END.search(line)) for line in lines] if "PRIVATE KEY" in text else None

    def is_end(index: int) -> bool:
        return ends is not None and 0 <= index < len(lines) and ends[index]

    index = 0
    while index < len(lines):
        if not _full_body(lines[index]):
            index += 1
            continue
        run_end = index
        while run_end < len(lines) and _full_body(lines[run_end]):
            run_end += 1
        # the short line that ends a body: before an END line, or padded, or as long a prefix
        last = run_end
        word = _body_word(lines[last]) if last < len(lines) else None
        if word is not None and len(word) < 70:
            bare = lines[last].strip() == word  # nothing but the word on its line
            if bare or word.endswith("=") or is_end(last + 1):
                last += 1
        first_word = _body_word(lines[index]) or ""
        if (
            run_end - index >= _BODY_RUN
            or first_word.startswith(_OPENSSH_BODY)
            or is_end(last)
            or is_end(run_end)
        ):
            for covered in range(index, last):
                secret[covered] = True
        index = max(last, index + 1)
    if ends is not None:
        # a body too short for a run, right before its END line: its last line may be short
        for end, is_end_line in enumerate(ends):
            if not is_end_line or _BEGIN.search(lines[end]):
                continue
            before = end - 1
            if before >= 0 and _body_word(lines[before]) and not _full_body(lines[before]):
                secret[before] = True  # the body's short last line
                before -= 1
            while before >= 0 and _full_body(lines[before]):
                secret[before] = True
                before -= 1
    if not any(secret):
        return text
    out = []
    for line, hidden in zip(lines, secret, strict=True):
        tail = _BODY_TAIL.search(line) if hidden else None
        out.append(line[: tail.start(1)] + REDACTED + tail.group(2) if tail else line)
    return "".join(out)


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str]
    #: lower-case words one of which a match must contain (a cheap test before the regex)
    hints: tuple[str, ...]
    #: the pattern never crosses a line end: run it only over the lines holding a hint
    per_line: bool = True


_CRED_HINTS = ("pass", "pwd", "secret", "token", "key", "credential", "webhook", "connection")
_SHAPE_HINTS = (
    "hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "xapp-",
    "akia", "asia", "agpa", "aida", "aroa", "anpa", "aiza", "sk-", "eyj",
)  # fmt: skip
_RULES = (
    _Rule(_PEM, _pem, ("private key",)),
    _Rule(_SHAPES, lambda m: REDACTED, _SHAPE_HINTS),
    _Rule(_SLACK_HOOK, _pre_value, ("hooks.slack.com",)),
    _Rule(_AUTH_HEADER, _pre_value, ("authorization",)),
    _Rule(_BEARER, _pre_value, ("bearer",)),
    _Rule(_URL_CREDS, _pre_value, ("://",)),
    _Rule(_KUBE_ENV, _pre_value, ('"value"',), per_line=False),
    _Rule(_FLAG, _pre_value, _CRED_HINTS),
    _Rule(_ASSIGN, _assign, _CRED_HINTS),
)


def _hinted_lines(text: str, lower: str, hints: tuple[str, ...]) -> list[tuple[int, int]]:
    """The spans of the lines of `text` that hold a hint, merged, in order."""
    spans: list[tuple[int, int]] = []
    for hint in hints:
        pos = lower.find(hint)
        while pos != -1:
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            end = len(text) if end == -1 else end
            spans.append((start, end))
            pos = lower.find(hint, end)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _apply(rule: _Rule, text: str, lower: str | None) -> str:
    if lower is None:  # case folding changed the length: offsets would not line up
        return rule.pattern.sub(rule.replace, text)
    if not any(hint in lower for hint in rule.hints):
        return text
    if not rule.per_line:
        return rule.pattern.sub(rule.replace, text)
    out: list[str] = []
    done = 0
    for start, end in _hinted_lines(text, lower, rule.hints):
        out.append(text[done:start])
        out.append(rule.pattern.sub(rule.replace, text[start:end]))
        done = end
    out.append(text[done:])
    return "".join(out)


def _lower(text: str) -> str | None:
    lower = text.lower()
    return lower if len(lower) == len(text) else None


def redact(text: str) -> str:
    """`text` with every credential replaced by `<REDACTED>`; pure, total, idempotent."""
    if not text:
        return text
    if len(text) <= _CACHED_CHARS:
        # verdicts repeat the same short strings (keys, sources, stage ids) thousands of times
        return _redact_short(text)
    return _redact(text)


#: strings up to this long are redacted once per process (redact is pure)
_CACHED_CHARS = 320


@functools.lru_cache(maxsize=8192)
def _redact_short(text: str) -> str:
    return _redact(text)


def _redact(text: str) -> str:
    if "PRIVATE KEY" in text:
        text = _key_lines(text)
    if "PRIVATE KEY" in text or _may_hold_key_body(text):
        text = _headless_keys(text)
    lower = _lower(text)
    for rule in _RULES:
        redacted = _apply(rule, text, lower)
        if redacted != text:
            text, lower = redacted, _lower(redacted)
    return text


def redact_data(value: Any, *, _key: str | None = None) -> Any:
    """JSON-shaped data (dicts, lists, strings) with every string redacted; the value under a
    key that names a credential (`{"password": "…"}`, a Kubernetes env entry `{"name":
    "HF_TOKEN", "value": "…"}`) is replaced whole. Other objects pass through unchanged."""
    # the plain JSON types by their exact type first: every file a run writes goes through
    # here, and the ABC checks below (Mapping) cost more than the redaction of a short string
    kind = type(value)
    if kind is str:
        return _redact_string(value, _key)
    if kind is dict:
        return _redact_mapping(value)
    if kind is list:
        return [redact_data(v) for v in value]
    if value is None or kind is bool:
        return value
    if kind is int or kind is float:
        return REDACTED if _key is not None and is_secret_name(_key) else value
    # subclasses and other mappings and sequences
    if isinstance(value, str):
        return _redact_string(value, _key)
    if isinstance(value, Mapping):
        return _redact_mapping(value)
    if isinstance(value, list | tuple):
        items = [redact_data(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if _key is not None and isinstance(value, int | float) and not isinstance(value, bool):
        return REDACTED if is_secret_name(_key) else value
    return value


def _redact_string(value: str, key: str | None) -> str:
    if key is not None and value and is_secret_name(key) and not _is_placeholder(value):
        return REDACTED
    return redact(value)


def _redact_mapping(value: Mapping[Any, Any]) -> dict[Any, Any]:
    env_name = value.get("name")
    secret_env = isinstance(env_name, str) and "value" in value and is_secret_name(env_name)
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if secret_env and key == "value" and item not in (None, ""):
            out[key] = REDACTED
            continue
        name = key if isinstance(key, str) else None
        out[redact(key) if name is not None else key] = redact_data(item, _key=name)
    return out


#: stream in blocks of about this many characters, cut at line ends outside a PEM block
BLOCK_CHARS = 4 * 1024 * 1024


def redact_lines(lines: Iterable[str]) -> Iterator[str]:
    """Redact a stream of lines (a file too large to hold) block by block; a private key block
    is never split across two blocks, nor a run of a key's body lines without its BEGIN."""
    block: list[str] = []
    size = 0
    in_key = False
    for line in lines:
        block.append(line)
        size += len(line)
        if "PRIVATE KEY" in line:
            in_key = "-----BEGIN" in line and "-----END" not in line[line.find("-----BEGIN") :]
        if size >= BLOCK_CHARS and not in_key and not _full_body(line):
            yield redact("".join(block))
            block, size = [], 0
        elif size >= 4 * BLOCK_CHARS:  # an unterminated key: stop holding lines back
            yield redact("".join(block))
            block, size, in_key = [], 0, False
    if block:
        yield redact("".join(block))


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's message and traceback text: never a secret
    in a log (STYLE §10), whatever a library put into an exception message."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is logging's problem, not ours
            return True
        record.msg, record.args = redact(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
