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
# the slowest tests, in every CI log: the suite should stay near 15 minutes on 2 cores
exec .venv/bin/python -m pytest --durations=60 "$@"
