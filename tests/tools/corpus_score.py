"""Score `runbook analyze` on the real-incident bundles (tests/bundles/real-*, composed by
tests/tools/bundles.py): root cause and first anomaly (file and line) against each bundle's
expected.yaml, by root cause and by evidence format. Prints a Markdown table.

    .venv/bin/python tests/tools/corpus_score.py                # this checkout
    .venv/bin/python tests/tools/corpus_score.py --pythonpath DIR   # another checkout's package
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script: the checkout
from tests.tools import bundles


def verdict(bundle: Path, pythonpath: str | None, want: dict[str, object]) -> dict[str, object]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    # analysed the way tests/unit/test_bundle_corpus.py analyses it: a hang's bundle with its
    # runbook, an operator's --var values
    args = [sys.executable, "-m", "runbook", "analyze", str(bundle), "--format", "json"]
    if want.get("runbook"):
        args += ["--runbook", str(want["runbook"])]
    variables = want.get("vars") or {}
    assert isinstance(variables, dict), "vars: must be a mapping"
    for key, value in variables.items():
        args += ["--var", f"{key}={value}"]
    out = subprocess.run(
        args,
        capture_output=True, text=True, env=env, timeout=120, check=False, cwd=pythonpath or None,
    )  # fmt: skip
    try:
        data: dict[str, object] = json.loads(out.stdout)
    except json.JSONDecodeError:
        return {"root_cause": "error", "first_anomaly": None}
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pythonpath", help="import the runbook package from this directory")
    args = ap.parse_args()
    rows = []
    for d in [bundles.path(n) for n in bundles.names() if n.startswith("real-")]:
        want = yaml.safe_load((d / "expected.yaml").read_text())
        v = verdict(d, args.pythonpath, want)
        cause_ok = v.get("root_cause") == want["root_cause"]
        fa_want = want.get("first_anomaly")
        fa = v.get("first_anomaly") or {}
        if fa_want is None:
            fa_ok = not fa if want["root_cause"] == "healthy" else True
        else:
            fa_ok = isinstance(fa, dict) and all(fa.get(k) == fa_want[k] for k in fa_want)
        rows.append((d.name, want["root_cause"], want["real"].get("formats", []), cause_ok, fa_ok))
    by_cause: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    by_format: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    for _, cause, formats, c, f in rows:
        for key, table in [(cause, by_cause)] + [(fm, by_format) for fm in formats]:
            table[key][0] += 1
            table[key][1] += int(c)
            table[key][2] += int(c and f)
    total = [len(rows), sum(r[3] for r in rows), sum(r[3] and r[4] for r in rows)]
    print(f"bundles {total[0]}: root cause right {total[1]}, and first anomaly too {total[2]}\n")
    for title, table in (("root cause", by_cause), ("evidence format", by_format)):
        print(f"| {title} | bundles | root cause right | + first anomaly |\n|---|---:|---:|---:|")
        for key in sorted(table):
            n, c, f = table[key]
            print(f"| {key} | {n} | {c} | {f} |")
        print()
    for name, cause, _, c, f in rows:
        if not (c and f):
            print(f"miss: {name} ({cause}): root cause {'ok' if c else 'wrong'}, first anomaly "
                  f"{'ok' if f else 'wrong'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
