#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need (Debian packages,
# a virtualenv with the project and its test tools), then lint, types and pytest.
# Usage: bash tests/run.sh [pytest args]      (as root: the tests create network namespaces)
set -euo pipefail
cd "$(dirname "$0")/.."

# prometheus: for promtool (check rules/metrics, test rules; Debian ships no promtool alone);
# its service is not started (policy-rc.d below)
# postgresql: the shared approval queue's tests start their own server (never the system's);
# chromium: the desk's browser tests (headless, driven by Playwright)
# gcc, libc6-dev, python3-dev: the install builds the scanner's C passes
# (runbook/parsers/_scanfast.c); tests/unit/parsers/test_scanfast.py fails without them
apt_packages=(openssh-server openssh-client iproute2 util-linux procps psmisc prometheus bash dash
  postgresql chromium gcc libc6-dev python3-dev)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # the tests start their own sshd per test host; never let the package start the system's
  added_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ -n "$added_policy" ] && rm -f /usr/sbin/policy-rc.d
fi

# the remedies render patches with `kubectl patch --local` (offline); the machine's kubectl is
# used, never Debian's kubernetes-client (it would replace it)
if ! command -v kubectl >/dev/null; then
  echo "tests/run.sh: kubectl is required (the remedies' patches are rendered by kubectl patch --local)" >&2
  exit 2
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# tests/scenarios run real CPU torch.distributed (gloo) jobs. Exactly this version: pip takes its
# CPU build from the machine's local index (a bare `torch` could pull a multi-GiB CUDA build).
# Skipped when already there, so a rerun costs nothing.
torch_version=2.13.0
if ! .venv/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '$torch_version')" 2>/dev/null; then
  echo "installing: torch==$torch_version"
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==$torch_version"
fi

# kubernetes.core (requirements.yml) from the `ansible` wheel on PyPI: Galaxy may be unreachable
.venv/bin/python tests/tools/install_collections.py

echo "== ruff"
.venv/bin/ruff check runbook tests benchmarks
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
exec .venv/bin/python -m pytest "$@"
