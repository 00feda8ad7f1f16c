"""The operator's configuration: where the approval queue lives, who may approve, the guards.

Read from `$RUNBOOK_CONFIG`, else `$XDG_CONFIG_HOME/nccl-runbook/config.yaml` (usually
`~/.config/nccl-runbook/config.yaml`); every key is optional::

    approvals:
      db: /var/lib/nccl-runbook/approvals.db   # default: <state dir>/approvals.db; or
                                               # postgresql://USER@HOST:PORT/DBNAME, one
                                               # queue for several machines (docs/desk.md)
      audit_log: /var/lib/nccl-runbook/audit.jsonl   # default: next to the db (PostgreSQL:
                                               # the chain is kept in the database)
      ttl: 24h                                 # a proposal older than this is refused
    approvers: [alice, bob]                    # who may approve or deny (OS user names);
                                               # empty or absent: anyone
    delegation:                                # with approvers: --as NAME counts only here
      oncall: [alice, bob]                     # OS user oncall may act as alice or bob
    two_person:
      kinds: [node-drain]                      # need an approver other than who queued them,
                                               # or two approvals (default: node-drain)
    drain:
      max_cordoned: 1                          # pool nodes that may already be cordoned
      max_fraction: 0.1                        # of the pool, this node included
      pool_selector: nvidia.com/gpu.present=true
    kubernetes:
      kubeconfig: ~/.kube/config
      context: prod-gpu
    metrics:
      textfile_dir: /var/lib/node_exporter/textfile_collector   # or $RUNBOOK_TEXTFILE_DIR,
                                               # or --textfile-dir DIR on the command
    notify:
      webhook_url: https://hooks.example.org/…  # or $RUNBOOK_WEBHOOK_URL; never logged whole
      format: json                             # json (generic) | slack; or $RUNBOOK_WEBHOOK_FORMAT
      signing_secret: …                        # or $RUNBOOK_WEBHOOK_SECRET: json signed (HMAC)
      slack: {webhook_url: …}                  # or $RUNBOOK_SLACK_WEBHOOK_URL
      teams: {webhook_url: …}                  # or $RUNBOOK_TEAMS_WEBHOOK_URL (a workflow's URL)
      pagerduty:
        routing_key: …                         # or $RUNBOOK_PAGERDUTY_ROUTING_KEY
        url: https://events.pagerduty.com/v2/enqueue
      expiry_window: 2h                        # notice when a pending proposal expires within
      timeout: 2s                              # one attempt's limit (3 attempts, 5 s in all)
    desk:
      base_url: https://runbook.example.org    # or $RUNBOOK_DESK_URL: notices link to its pages
      oidc: {issuer: …, client_id: …}          # `runbook desk serve`: sign-in, trusted proxies,
      allow: [{groups: [gpu-oncall], kinds: ['*']}]  # who may approve what, the two-person
                                               # rule (docs/desk.md; runbook/desk/settings.py)
    signatures:
      user_catalog: ~/signatures.yaml          # your own error signatures, the format of
                                               # runbook/data/signatures.yaml, tried before the
                                               # shipped ones (relative: to this file); or
                                               # --signatures FILE on analyze and run

The state dir is `$RUNBOOK_STATE_DIR`, else `$XDG_STATE_HOME/nccl-runbook`
(`~/.local/state/nccl-runbook`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from runbook.dburl import Location, PostgresURL, location
from runbook.errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, *, what: str = "duration") -> float:
    """`90`, `90s`, `15m`, `24h`, `7d` → seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    match = _DURATION.match(str(value))
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"{what} {value!r}: expected a positive number of s, m, h or d (e.g. 24h)")
    return float(match.group(1)) * _UNIT[match.group(2)]


def state_dir() -> Path:
    env = os.environ.get("RUNBOOK_STATE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "nccl-runbook"


def config_path() -> Path:
    env = os.environ.get("RUNBOOK_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nccl-runbook" / "config.yaml"


@dataclass(frozen=True)
class DrainGuard:
    max_cordoned: int = 1
    max_fraction: float = 0.1
    pool_selector: str = "nvidia.com/gpu.present=true"


WEBHOOK_FORMATS = ("json", "slack")
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"

#: settings given as flags (`--textfile-dir`): they win over the environment and the file, and
#: reach every `load` the command makes, the ones deep in a job run included
flag_settings: ContextVar[Mapping[str, str]] = ContextVar(
    "flag_settings", default=MappingProxyType({})
)


@dataclass(frozen=True)
class Channel:
    """One place notices go (runbook.paging): `name` keys its notices in the store, `service`
    says what it is sent as; `secret` is the generic webhook's HMAC key or PagerDuty's routing
    key, never shown."""

    name: str
    service: str
    url: str
    secret: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Notify:
    """Where and how notices of the approval queue are sent (runbook.notify)."""

    webhook_url: str | None = None
    format: str = "json"
    expiry_window: float = 2 * 3600.0
    timeout: float = 2.0
    #: the generic JSON's HMAC-SHA256 key (X-Runbook-Signature)
    signing_secret: str | None = field(default=None, repr=False)
    slack_url: str | None = None
    teams_url: str | None = None
    pagerduty_routing_key: str | None = field(default=None, repr=False)
    pagerduty_url: str = PAGERDUTY_EVENTS_URL
    #: the approval desk's base URL: every notice links to the proposal's page there
    desk_url: str | None = None

    @property
    def channels(self) -> tuple[Channel, ...]:
        """Every place set, the one `webhook_url` first (its notices keep their bare names)."""
        out = []
        if self.webhook_url:
            secret = self.signing_secret if self.format == "json" else None
            out.append(Channel("webhook", self.format, self.webhook_url, secret))
        if self.slack_url:
            out.append(Channel("slack", "slack", self.slack_url))
        if self.teams_url:
            out.append(Channel("teams", "teams", self.teams_url))
        if self.pagerduty_routing_key:
            out.append(
                Channel("pagerduty", "pagerduty", self.pagerduty_url, self.pagerduty_routing_key)
            )
        return tuple(out)

    @property
    def enabled(self) -> bool:
        return bool(self.channels)


@dataclass(frozen=True)
class Config:
    #: the approval store: a SQLite file, or a PostgreSQL server (runbook.dburl)
    db: Location
    audit_log: Path
    ttl: float = 24 * 3600.0
    approvers: tuple[str, ...] = ()
    #: OS user → the names it may approve or deny as (`--as NAME`) when approvers are set
    delegation: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    drain: DrainGuard = field(default_factory=DrainGuard)
    kubeconfig: str | None = None
    kube_context: str | None = None
    source: Path | None = None
    #: node_exporter's textfile collector directory: the queue's and the sweep's metrics
    textfile_dir: Path | None = None
    notify: Notify = field(default_factory=Notify)
    #: what a command that sends no notice only warns about (a bad notify section: such a
    #: command is not stopped by a setting it does not use)
    warnings: tuple[str, ...] = ()
    #: kinds that need a second person (runbook.remedies.two_person)
    two_person_kinds: tuple[str, ...] = ("node-drain",)
    #: the web desk's section as written (runbook.desk.settings validates it when serving)
    desk: Mapping[str, Any] = field(default_factory=dict)
    #: the user's signature catalog (signatures.user_catalog), merged before the shipped one
    user_catalog: Path | None = None

    @property
    def local_dir(self) -> Path:
        """Where this machine keeps the store's companions (the remedies' work files): next to
        a SQLite store, the state dir for a PostgreSQL one."""
        return self.db.parent if isinstance(self.db, Path) else state_dir()


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping")
    return value


def load(path: Path | None = None, *, db: str | None = None, notifies: bool = True) -> Config:
    """The configuration, with `db` (a `--db` flag) taking precedence over the file.
    `notifies` False: the command sends no notice, so a bad notify setting is a warning
    (Config.warnings) and notices are off, instead of a UsageError."""
    source = path or config_path()
    raw: dict[str, Any] = {}
    if source.exists():
        try:
            loaded = yaml.safe_load(source.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"config {source}: {' '.join(str(exc).split())}") from exc
        except RecursionError:  # the YAML composer recurses per level of nesting
            raise UsageError(f"config {source}: nested too deeply to be a configuration") from None
        raw = _mapping(loaded, f"config {source}")
    elif path is not None:
        raise UsageError(f"config {source}: no such file")
    approvals = _mapping(raw.get("approvals"), f"config {source}: approvals")
    db_path = location(str(db or approvals.get("db") or state_dir() / "approvals.db"))
    audit = approvals.get("audit_log")
    audit_path = (
        Path(os.path.expanduser(str(audit)))
        if audit
        else (state_dir() if isinstance(db_path, PostgresURL) else db_path.parent) / "audit.jsonl"
    )
    approvers = raw.get("approvers") or []
    if not isinstance(approvers, list) or not all(isinstance(a, str) for a in approvers):
        raise UsageError(f"config {source}: approvers: expected a list of user names")
    delegation_raw = _mapping(raw.get("delegation"), f"config {source}: delegation")
    delegation: dict[str, tuple[str, ...]] = {}
    for user, names in delegation_raw.items():
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UsageError(
                f"config {source}: delegation.{user}: expected a list of the names it may act as"
            )
        delegation[str(user)] = tuple(names)
    drain_raw = _mapping(raw.get("drain"), f"config {source}: drain")
    try:
        drain = DrainGuard(
            max_cordoned=int(drain_raw.get("max_cordoned", 1)),
            max_fraction=float(drain_raw.get("max_fraction", 0.1)),
            pool_selector=str(drain_raw.get("pool_selector", DrainGuard.pool_selector)),
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(f"config {source}: drain: {exc}") from exc
    if drain.max_cordoned < 0 or not 0 < drain.max_fraction <= 1:
        raise UsageError(
            f"config {source}: drain: max_cordoned must be >= 0 and max_fraction in (0, 1]"
        )
    two_person = _mapping(raw.get("two_person"), f"config {source}: two_person")
    two_person_kinds = two_person.get("kinds", ["node-drain"])
    if not isinstance(two_person_kinds, list) or not all(
        isinstance(k, str) for k in two_person_kinds
    ):
        raise UsageError(f"config {source}: two_person.kinds: expected a list of kinds")
    kube = _mapping(raw.get("kubernetes"), f"config {source}: kubernetes")
    metrics = _mapping(raw.get("metrics"), f"config {source}: metrics")
    textfile = (
        flag_settings.get().get("textfile_dir")
        or os.environ.get("RUNBOOK_TEXTFILE_DIR")
        or metrics.get("textfile_dir")
    )
    return Config(
        db=db_path,
        audit_log=audit_path,
        ttl=parse_duration(approvals.get("ttl", "24h"), what=f"config {source}: approvals.ttl"),
        approvers=tuple(approvers),
        delegation=delegation,
        drain=drain,
        kubeconfig=os.path.expanduser(str(kube["kubeconfig"])) if kube.get("kubeconfig") else None,
        kube_context=str(kube["context"]) if kube.get("context") else None,
        source=source if source.exists() else None,
        textfile_dir=Path(os.path.expanduser(str(textfile))) if textfile else None,
        two_person_kinds=tuple(two_person_kinds),
        **_notify_or_warning(raw, source, notifies=notifies),
        desk=_mapping(raw.get("desk"), f"config {source}: desk"),
        user_catalog=_user_catalog(raw, source),
    )


def _user_catalog(raw: Mapping[str, Any], source: Path) -> Path | None:
    """`signatures.user_catalog`: a path, `~` expanded, relative to the config file's
    directory; None when unset."""
    section = _mapping(raw.get("signatures"), f"config {source}: signatures")
    value = section.get("user_catalog")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise UsageError(f"config {source}: signatures.user_catalog: expected a file path")
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else source.parent / path


def user_catalog(path: Path | None = None) -> Path | None:
    """`signatures.user_catalog` of the configuration file (`path`, else the default one),
    read alone: a command that needs only this setting is not stopped by another."""
    source = path or config_path()
    if not source.exists():
        if path is not None:
            raise UsageError(f"config {source}: no such file")
        return None
    try:
        loaded = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"config {source}: {' '.join(str(exc).split())}") from exc
    except RecursionError:
        raise UsageError(f"config {source}: nested too deeply to be a configuration") from None
    return _user_catalog(_mapping(loaded, f"config {source}"), source)


def _notify_or_warning(raw: Mapping[str, Any], source: Path, *, notifies: bool) -> dict[str, Any]:
    try:
        notify = _mapping(raw.get("notify"), f"config {source}: notify")
        desk = _mapping(raw.get("desk"), f"config {source}: desk")
        return {"notify": _notify(notify, source, desk)}
    except UsageError as exc:
        if notifies:
            raise
        return {"notify": Notify(), "warnings": (f"{exc.one_line()} (no notice is sent)",)}


def _url(value: Any, where: str) -> str | None:
    """An http(s) URL or None; a bad one is a usage error naming `where`, never the URL (its
    path or query may be a token)."""
    if value is None or value == "":
        return None
    url = str(value)
    if not re.match(r"^https?://[^/\s]+", url):
        raise UsageError(f"{where}: expected an http:// or https:// URL")
    return url


def _secret(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise UsageError(f"{where}: expected one word (the value is not shown)")
    return value


def _notify(raw: Mapping[str, Any], source: Path, desk: Mapping[str, Any] | None = None) -> Notify:
    """The webhook settings; the environment wins over the file (a URL holding a token is
    better kept out of a file others read). A bad value is a usage error naming its key, never
    the URL or the secret itself."""
    env = os.environ.get
    url = _url(
        env("RUNBOOK_WEBHOOK_URL") or raw.get("webhook_url"),
        f"config {source}: notify.webhook_url (or RUNBOOK_WEBHOOK_URL)",
    )
    fmt = str(env("RUNBOOK_WEBHOOK_FORMAT") or raw.get("format") or "json")
    if fmt not in WEBHOOK_FORMATS:
        raise UsageError(
            f"config {source}: notify.format (or RUNBOOK_WEBHOOK_FORMAT) {fmt!r}: "
            f"expected one of {', '.join(WEBHOOK_FORMATS)}"
        )
    where = f"config {source}: notify"
    slack = _mapping(raw.get("slack"), f"{where}.slack")
    teams = _mapping(raw.get("teams"), f"{where}.teams")
    pagerduty = _mapping(raw.get("pagerduty"), f"{where}.pagerduty")
    return Notify(
        webhook_url=url,
        format=fmt,
        expiry_window=parse_duration(raw.get("expiry_window", "2h"), what=f"{where}.expiry_window"),
        timeout=parse_duration(raw.get("timeout", "2s"), what=f"{where}.timeout"),
        signing_secret=_secret(
            env("RUNBOOK_WEBHOOK_SECRET") or raw.get("signing_secret"),
            f"{where}.signing_secret (or RUNBOOK_WEBHOOK_SECRET)",
        ),
        slack_url=_url(
            env("RUNBOOK_SLACK_WEBHOOK_URL") or slack.get("webhook_url"),
            f"{where}.slack.webhook_url (or RUNBOOK_SLACK_WEBHOOK_URL)",
        ),
        teams_url=_url(
            env("RUNBOOK_TEAMS_WEBHOOK_URL") or teams.get("webhook_url"),
            f"{where}.teams.webhook_url (or RUNBOOK_TEAMS_WEBHOOK_URL)",
        ),
        pagerduty_routing_key=_secret(
            env("RUNBOOK_PAGERDUTY_ROUTING_KEY") or pagerduty.get("routing_key"),
            f"{where}.pagerduty.routing_key (or RUNBOOK_PAGERDUTY_ROUTING_KEY)",
        ),
        pagerduty_url=_url(pagerduty.get("url"), f"{where}.pagerduty.url") or PAGERDUTY_EVENTS_URL,
        desk_url=_desk_url(desk or {}, source),
    )


def _desk_url(raw: Mapping[str, Any], source: Path) -> str | None:
    """`desk.base_url` (else RUNBOOK_DESK_URL, as the desk itself reads it): where the approval
    desk is reached, without a trailing slash."""
    url = _url(
        raw.get("base_url") or os.environ.get("RUNBOOK_DESK_URL"),
        f"config {source}: desk.base_url (or RUNBOOK_DESK_URL)",
    )
    return url.rstrip("/") if url else None
