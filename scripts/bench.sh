#!/usr/bin/env bash
# python -m bench "$@" inside the project's .venv (created on first use). When the
# workplace's real data archives sit beside the repository (../shared/data), they are
# unpacked (verified, idempotent) into ./data first.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bash "$repo/scripts/ensure_venv.sh"
cd "$repo"
if [ -x ../shared/data/unpack.sh ] && [ -z "${BENCH_NO_UNPACK:-}" ]; then
  ../shared/data/unpack.sh data MNIST FashionMNIST-test cifar-10-batches-py tiny-imagenet-200 CamVid-240x180 >&2
fi
exec .venv/bin/python -m bench "$@"
