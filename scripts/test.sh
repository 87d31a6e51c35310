#!/usr/bin/env bash
# The test command (README and CI): pytest inside .venv, created on first use. Real-data
# tests run when the data is unpacked (here from ../shared/data when present), else skip.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/ensure_venv.sh"
cd "$repo"
if [ -x ../shared/data/unpack.sh ]; then
  ../shared/data/unpack.sh data MNIST FashionMNIST-test cifar-10-batches-py >&2
fi
# the test files on one pytest-xdist worker per core (up to 4; tests/conftest.py gives each worker
# cores of its own), a file's tests on one worker (they share module fixtures and services);
# `-n 0` after it runs them in this process. The slowest tests, in every CI log: the suite should
# stay near 15 minutes of test time on 2 cores
workers=$(.venv/bin/python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')
[ "$workers" -ge 2 ] || workers=0
exec .venv/bin/python -m pytest -n "$workers" --dist loadfile --durations=60 "$@"
