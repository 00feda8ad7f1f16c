"""The desk as its own ASGI application (runbook.desk.app.build) called in this process through
httpx, signed in by the trusted-proxy header from 127.0.0.1; the store is real SQLite under the
test's directory. For tests of what a page says, without starting a server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from runbook import config as config_mod
from runbook.config import Config
from runbook.desk import app as desk_app
from runbook.desk import settings as desk_settings

BASE = "http://127.0.0.1:8080"
DESK = {
    "base_url": BASE,
    "trusted_header": {"proxies": ["127.0.0.1/32"]},
    "allow": [{"groups": ["gpu-oncall"], "kinds": ["*"]}],
}
HEADERS = {"X-Forwarded-Email": "alice@example.org", "X-Forwarded-Groups": "gpu-oncall"}


def config(root: Path, *, db: str | None = None, **more: Any) -> Config:
    """A config file under `root` with its store there (or `db`: a postgresql:// URL), the
    desk above and `more` sections."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "config.yaml"
    path.write_text(json.dumps({"approvals": {"db": db or str(root / "approvals.db"),
                                              "audit_log": str(root / "audit.jsonl")},
                                "desk": DESK, **more}))  # fmt: skip
    return config_mod.load(path)


def build(cfg: Config, **desk: Any) -> Any:
    return desk_app.build(cfg, desk_settings.load({**DESK, **desk}, source="test", base_url=None,
                                                  insecure_http=True))  # fmt: skip


def get(app: Any, *paths: str) -> list[httpx.Response]:
    """GET each path, signed in as alice of gpu-oncall."""

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url=BASE,
                                     headers=HEADERS) as client:  # fmt: skip
            return [await client.get(path) for path in paths]

    return asyncio.run(run())
