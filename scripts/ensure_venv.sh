#!/usr/bin/env bash
# Create .venv and install the pinned project (with test extras) when missing or when
# pyproject.toml changed since the last install. Idempotent and quiet when up to date.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
py=${PYTHON:-python3}
stamp=.venv/.bench-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setting up .venv (pinned dependencies from pyproject.toml; torch takes a minute or two)" >&2
[ -x .venv/bin/python ] || "$py" -m venv .venv
if ! .venv/bin/python -m pip install -e ".[test]" > .venv/install.log 2>&1; then
  tail -n 30 .venv/install.log >&2
  echo "ensure_venv: pip install failed (full log: .venv/install.log)" >&2
  exit 1
fi
echo "$want" > "$stamp"
